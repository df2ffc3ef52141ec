"""Agent Protocol crons: LangGraph's `client.crons` on Waypoint's scheduled agents (`wp.schedules`,
Temporal Schedules). A cron is a schedule: its `cron_id` is the schedule's id, each fire an ordinary
run with `schedule_id` set (`GET /v1/runs?schedule_id=...`, the viewer's /ui/schedules).

- `POST /runs/crons`: each fire is a run on no thread (a stateless run);
- `POST /threads/{id}/runs/crons`: each fire is a run that joins the thread when it starts (it goes
  on from the thread's newest run, as a run posted to the thread would);
- the run each fire starts: the input's last user message is its task; `config.configurable` or
  `context` give model, max_steps, priority; `webhook` gets its end;
- `multitask_strategy`, what a fire does while the cron's previous run still runs (Temporal's
  overlap policy): reject -> skip this fire, enqueue -> buffer one (start when it ends),
  interrupt and rollback -> cancel the running one; none given: reject;
- `enabled: false` creates it paused (Temporal's pause); PATCH `enabled` pauses and resumes.

What Waypoint cannot keep is refused (501, saying what to do), never dropped: metadata (a schedule
has none), interrupt_before/after, `on_run_completed: keep` (a stateless fire makes no thread).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.problems import not_supported
from waypoint.app.http.protocol.runs import RunCreate, _options
from waypoint.app.http.protocol.shapes import cron_json, task_of
from waypoint.app.http.protocol.threads import newest_started
from waypoint.app.http.state import ApiState
from waypoint.client import ScheduleRow
from waypoint.errors import InvalidInput
from waypoint.names import ScheduleOverlap
from waypoint.run_config import RunConfig

CRON_KEEPS = ("model", "max_steps", "priority")  # what a schedule keeps of a run's settings

router = APIRouter(tags=["agent protocol: crons"])

STRATEGIES = {
    "reject": ScheduleOverlap.SKIP,
    "enqueue": ScheduleOverlap.BUFFER_ONE,
    "interrupt": ScheduleOverlap.CANCEL_OTHER,
    "rollback": ScheduleOverlap.CANCEL_OTHER,
}
LISTED_AT_ONCE = 500  # the most schedules one listing call answers (search and count page through)


class CronCreate(RunCreate):
    schedule: str
    timezone: str | None = None
    end_time: datetime | None = None
    enabled: bool | None = None
    on_run_completed: str | None = None


class CronUpdate(BaseModel):
    # LangGraph sends only what changes; `end_time: null` clears the end (see `model_fields_set`).
    model_config = ConfigDict(extra="ignore")
    schedule: str | None = None
    timezone: str | None = None
    end_time: datetime | None = None
    input: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    webhook: str | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    on_run_completed: str | None = None
    enabled: bool | None = None


SortBy = Literal["cron_id", "assistant_id", "thread_id", "created_at", "updated_at", "next_run_date", "end_time"]


class CronSearch(BaseModel):
    model_config = ConfigDict(extra="ignore")
    assistant_id: str | None = None
    thread_id: str | None = None
    enabled: bool | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)
    sort_by: SortBy = "created_at"
    sort_order: Literal["asc", "desc"] = "desc"
    select: list[str] | None = None


def _refuse(
    metadata: dict[str, Any] | None, before: Any, after: Any, on_run_completed: str | None, *, stateless: bool
) -> None:
    if metadata:
        raise not_supported(
            "cron metadata is not kept (a schedule has none): leave it out; find a cron by its assistant or "
            "thread (POST /runs/crons/search)"
        )
    if before or after:
        raise not_supported(
            "interrupt_before/after are not supported: tools declared requires_approval wait for a human"
        )
    if on_run_completed not in (None, "delete"):
        where = "a stateless cron's runs are on no thread" if stateless else "on_run_completed is for stateless crons"
        raise not_supported(
            f"on_run_completed={on_run_completed!r} is not supported: {where}; each fired run is kept and listed "
            "by GET /v1/runs?schedule_id=<cron_id> (create_for_thread keeps a conversation)"
        )


def _overlap(strategy: str | None) -> ScheduleOverlap:
    if strategy is None:
        return ScheduleOverlap.SKIP
    if strategy not in STRATEGIES:
        raise InvalidInput(f"unknown multitask_strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    return STRATEGIES[strategy]


async def _check_thread(api: ApiState, tenant: str, thread_id: str, assistant_id: str) -> None:
    """A thread keeps its assistant: a cron for another one would fail at every fire."""
    thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
    last = newest_started(thread)
    if last is not None and last.agent != assistant_id:
        raise InvalidInput(f"thread {thread_id} talks to assistant {last.agent!r}: a thread keeps its assistant")


async def _create(api: ApiState, tenant: str, thread_id: str | None, body: CronCreate) -> dict[str, Any]:
    _refuse(body.metadata, body.interrupt_before, body.interrupt_after, body.on_run_completed, stateless=not thread_id)
    if body.command:
        raise not_supported("commands are not supported in a cron: its input's last user message is each run's task")
    task = task_of(body.input or {})
    model, max_steps, priority = _options(body)
    # A created assistant's cron runs its graph with its settings (those a schedule keeps).
    found, settings = await api.wp.assistants.run_settings(body.assistant_id, tenant_id=tenant)
    merged = RunConfig(model=model, max_steps=max_steps, priority=priority).under(settings)
    if others := [k for k, v in asdict(merged).items() if v is not None and k not in CRON_KEEPS]:
        raise InvalidInput(
            f"assistant {body.assistant_id!r} sets {', '.join(others)}, which a cron cannot keep "
            f"(only {', '.join(CRON_KEEPS)}): make the cron of graph {found.graph_id!r} with those settings"
        )
    overlap = _overlap(body.multitask_strategy)
    if thread_id is not None:
        await _check_thread(api, tenant, thread_id, found.graph_id)
    row = await api.wp.schedules.create(
        agent=found.graph_id,
        task=task,
        cron=body.schedule,
        tz=body.timezone or "UTC",
        overlap=overlap,
        end_at=body.end_time,
        model=merged.model,
        max_steps=merged.max_steps,
        priority=merged.priority,
        webhook=body.webhook,
        thread_id=thread_id,
        paused=body.enabled is False,
        tenant_id=tenant,
    )
    return cron_json(row)


@router.post("/runs/crons")
async def create_stateless(body: CronCreate, api: Api, tenant: Tenant) -> dict[str, Any]:
    """A cron whose every fire is a new run on no thread."""
    return await _create(api, tenant, None, body)


@router.post("/threads/{thread_id}/runs/crons")
async def create_for_thread(thread_id: str, body: CronCreate, api: Api, tenant: Tenant) -> dict[str, Any]:
    """A cron whose every fire is the thread's next run."""
    return await _create(api, tenant, thread_id, body)


async def _all(api: ApiState, tenant: str, assistant_id: str | None, thread_id: str | None) -> list[ScheduleRow]:
    found: list[ScheduleRow] = []
    while True:
        page = await api.wp.schedules.list(
            tenant_id=tenant, agent=assistant_id, thread_id=thread_id, limit=LISTED_AT_ONCE, offset=len(found)
        )
        found.extend(page)
        if len(page) < LISTED_AT_ONCE:
            return found


def _sort_key(field: str) -> Any:
    def key(shaped: dict[str, Any]) -> tuple[bool, str]:
        value = shaped.get(field)
        return (value is None, str(value or ""))  # ISO times and ids sort as text; none last

    return key


@router.post("/runs/crons/search")
async def search(body: CronSearch, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    """The tenant's crons (every schedule, those made with `waypoint cron` too), newest first by default."""
    if body.metadata:
        return []  # a schedule has no metadata, so none matches a filter on it
    simple = body.enabled is None and body.sort_by == "created_at" and body.sort_order == "desc"
    if simple:  # the client's own order and page
        rows = await api.wp.schedules.list(
            tenant_id=tenant,
            agent=body.assistant_id,
            thread_id=body.thread_id,
            limit=min(body.limit, LISTED_AT_ONCE),
            offset=body.offset,
        )
        shaped = [cron_json(r) for r in rows]
    else:
        shaped = [cron_json(r) for r in await _all(api, tenant, body.assistant_id, body.thread_id)]
        shaped = [c for c in shaped if body.enabled is None or c["enabled"] == body.enabled]
        shaped.sort(key=_sort_key(body.sort_by), reverse=body.sort_order == "desc")
        shaped = shaped[body.offset : body.offset + body.limit]
    if body.select:
        shaped = [{k: v for k, v in c.items() if k in body.select} for c in shaped]
    return shaped


@router.post("/runs/crons/count")
async def count(body: CronSearch, api: Api, tenant: Tenant) -> int:
    if body.metadata:
        return 0
    return len(await _all(api, tenant, body.assistant_id, body.thread_id))


@router.patch("/runs/crons/{cron_id}")
async def update(cron_id: str, body: CronUpdate, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Change what is sent; `enabled` pauses or resumes; `end_time: null` clears the end."""
    _refuse(body.metadata, body.interrupt_before, body.interrupt_after, body.on_run_completed, stateless=False)
    schedules = api.wp.schedules
    row = await schedules.get(cron_id, tenant_id=tenant)
    changes: dict[str, Any] = {}
    if body.schedule is not None:
        changes["cron"] = body.schedule
    if body.timezone is not None:
        changes["tz"] = body.timezone
    if "end_time" in body.model_fields_set:
        changes["end_at"] = body.end_time
    if body.input is not None:
        changes["task"] = task_of(body.input)
    if body.config is not None or body.context is not None:  # the run's settings, replaced as a whole
        settings = RunCreate(assistant_id=row.agent, config=body.config, context=body.context)
        model, max_steps, priority = _options(settings)
        changes.update(model=model, max_steps=max_steps, priority=priority)
    if body.webhook is not None:
        changes["webhook"] = body.webhook or None
    if changes:
        row = await schedules.update(cron_id, tenant_id=tenant, **changes)
    if body.enabled is not None and body.enabled == row.paused:
        change = schedules.resume if body.enabled else schedules.pause
        note = f"{'enabled' if body.enabled else 'disabled'} through the Agent Protocol"
        row = await change(cron_id, note=note, tenant_id=tenant)
    return cron_json(row)


@router.delete("/runs/crons/{cron_id}", status_code=204)
async def delete(cron_id: str, api: Api, tenant: Tenant) -> Response:
    """Delete the cron (its Temporal Schedule and its row); the runs it fired stay."""
    await api.wp.schedules.delete(cron_id, tenant_id=tenant)
    return Response(status_code=204)
