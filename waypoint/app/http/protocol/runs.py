"""Agent Protocol runs: on a thread (each forks the thread's newest run) and stateless.

The first run on a thread starts the assistant's agent with the last user message of the input
as its task; each later run forks the previous run at its last step with the new message, so it
continues from that run's final state (or from `checkpoint_id`, a `<run_id>:<step>` of the
thread). A thread runs one run at a time; a new run while one is live (or waits to start) follows
its `multitask_strategy`:

- reject (the default): 409, naming the busy run;
- enqueue: the new run takes the thread's next place at once, `queued` (pending) until the run
  before it ends, then goes on from that run's last step;
- interrupt: the busy run is cancelled (it stops after its current step) and the new run is
  enqueued after it, so it goes on from the cancelled run's last checkpoint;
- rollback: the busy run is cancelled and taken off the thread (its steps are no part of the
  thread's state; the run itself stays in the log, cancelled, on no thread), and the new run starts
  at once from the thread's newest run before it.

`after_seconds` delays a run (`scheduled`, pending, until then). Stateless runs (`/runs/...`) are
runs on no thread. A create with an `Idempotency-Key` header answers the key's run on a repeat
(see `start_on_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, model_validator

from waypoint.app.http.auth import Api, OpenStream, Tenant
from waypoint.app.http.limits import StreamSlot
from waypoint.app.http.problems import not_supported
from waypoint.app.http.protocol import interrupts
from waypoint.app.http.protocol.follow import follow_run, written
from waypoint.app.http.protocol.interrupts import check_command
from waypoint.app.http.protocol.shapes import (
    conversation,
    flatten,
    run_json,
    spec_messages,
    spec_run,
    task_of,
    values,
)
from waypoint.app.http.protocol.stream import ProtocolFormat, SubgraphFormat, stream_modes, wants_deltas
from waypoint.app.http.protocol.threads import live_status
from waypoint.app.http.runs import IdempotencyKey, resume_point
from waypoint.app.http.state import ApiState
from waypoint.app.http.streams import StreamItem, sse_response
from waypoint.app.http.trees import TreeStream
from waypoint.client import MULTITASK_STRATEGIES as STRATEGIES
from waypoint.client import RunRow, ThreadRun, Turn
from waypoint.errors import InvalidInput, NotFound
from waypoint.run_config import RunConfig, run_config

router = APIRouter(tags=["agent protocol: runs"])


class RunCreate(BaseModel):
    # LangGraph clients send many optional fields; the ones Waypoint cannot honour are refused below.
    model_config = ConfigDict(extra="ignore")
    assistant_id: str
    input: dict[str, Any] | None = None
    command: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: bool = False
    multitask_strategy: str | None = None
    checkpoint_id: str | None = None
    checkpoint: dict[str, Any] | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    webhook: str | None = None
    after_seconds: int | None = None
    if_not_exists: str | None = None
    # The open spec's run create: `POST /runs` with `thread_id` runs on that thread.
    thread_id: str | None = None
    # The open spec's name for the agent (LangGraph's is `assistant_id`, which it fills in below).
    agent_id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _spec_names(cls, data: Any) -> Any:
        """The open Agent Protocol spec's names for the same things: `agent_id` for `assistant_id`,
        `messages` for `input: {"messages": [...]}`."""
        if isinstance(data, dict):
            if data.get("assistant_id") is None and data.get("agent_id") is not None:
                data = {**data, "assistant_id": data["agent_id"]}
            if data.get("input") is None and isinstance(data.get("messages"), list):
                data = {**data, "input": {"messages": data["messages"]}}
        return data

    @property
    def speaks_spec(self) -> bool:
        """The open spec's body (it names the agent `agent_id`, as LangGraph's never does): its
        answer comes in the spec's shapes."""
        return self.agent_id is not None


def _refuse_unsupported(body: RunCreate) -> None:
    if body.multitask_strategy not in (None, *STRATEGIES):
        raise InvalidInput(
            f"multitask_strategy={body.multitask_strategy!r} is not one of {', '.join(STRATEGIES)}: "
            "what a new run on a busy thread does"
        )
    if body.interrupt_before or body.interrupt_after:
        raise not_supported(
            "interrupt_before/after are not supported: tools declared requires_approval wait for a human"
        )


@dataclass(frozen=True)
class Options:
    """What the run runs: its assistant's agent and version, and the settings of its config and
    context over the assistant's (`waypoint.run_config`)."""

    agent: str
    assistant: tuple[str, int]
    settings: RunConfig


def _options(body: RunCreate) -> tuple[str | None, int | None, int | None]:
    """(model, max_steps, priority) from config and context: what a cron's schedule keeps."""
    found = run_config(body.config, body.context)
    kept = ("model", "max_steps", "priority")
    if others := [k for k, v in asdict(found).items() if v is not None and k not in kept]:
        raise InvalidInput(f"a cron keeps {', '.join(kept)} of config/context, not {', '.join(others)}")
    return found.model, found.max_steps, found.priority


async def _run_options(api: ApiState, tenant: str, body: RunCreate) -> Options:
    own = run_config(body.config, body.context)
    found, settings = await api.wp.assistants.run_settings(body.assistant_id, tenant_id=tenant)
    return Options(found.graph_id, (found.assistant_id, found.version), own.under(settings))


async def start_on_thread(
    api: ApiState, tenant: str, thread_id: str | None, body: RunCreate, idempotency_key: str | None = None
) -> RunRow:
    """Start the run: the thread's next turn (`wp.threads.start_turn`), or a run on no thread. With
    `command={'resume': ...}`, no run starts: the thread's waiting run is answered and goes on (see
    protocol/interrupts.py). Answers the run: the row of one that existed before (a repeat's, a
    resumed one), or the row a new one's start asks for (its worker writes it in a moment)."""
    if body.command:
        run_id, _ = await resume_on_thread(api, tenant, thread_id, body)
        return await api.wp.run_or_planned(run_id, tenant_id=tenant)
    _refuse_unsupported(body)
    api.wp.check_webhook(body.webhook)  # before the run takes a place on its thread
    task = task_of(body.input or {})
    options = await _run_options(api, tenant, body)
    settings = options.settings
    turn = Turn(
        task,
        agent=options.agent,
        model=settings.model,
        budget=settings.budget(),
        priority=settings.priority,
        after_seconds=float(body.after_seconds) if body.after_seconds else None,
        webhook=body.webhook,
        instructions=settings.instructions,
        assistant=options.assistant,
        checkpoint=_checkpoint(body),
        create_thread=body.if_not_exists == "create",
    )
    # The request a key stands for: the whole body, on its thread.
    request = {"thread_id": thread_id, "body": body.model_dump(mode="json")}
    started = await api.wp.threads.start_turn(
        thread_id, turn, body.multitask_strategy, idempotency_key=idempotency_key, request=request, tenant_id=tenant
    )
    if started.repeat or started.status is None:
        return await api.wp.run_or_planned(started.run_id, tenant_id=tenant)
    return _planned(tenant, started.run_id, task, options, started.status)


def _checkpoint(body: RunCreate) -> str | None:
    """The `<run_id>:<step>` of the thread the run goes on from, if the body names one."""
    wanted = body.checkpoint_id or (body.checkpoint or {}).get("checkpoint_id")
    return str(wanted) if wanted else None


def _planned(tenant: str, run_id: str, task: str, options: Options, status: str) -> RunRow:
    """The row a run just started will have once its worker writes it (status: starting, queued
    or scheduled; no steps)."""
    assistant_id, version = options.assistant
    return RunRow(
        run_id=run_id,
        tenant_id=tenant,
        agent=options.agent,
        task=task,
        model=options.settings.model or "",  # "": its agent's own
        status=status,
        steps=0,
        max_steps=0,
        assistant_id=assistant_id,
        assistant_version=version,
    )


async def resume_on_thread(api: ApiState, tenant: str, thread_id: str | None, body: RunCreate) -> tuple[str, int]:
    """Answer the interrupt of the thread's waiting run with `body.command`'s resume value; returns
    the run and the seq of its log before the answer (a stream of the resumed run goes on from there)."""
    value = check_command(body.command or {})
    if thread_id is None:
        raise InvalidInput(
            "a resume answers an interrupted thread's run: POST /threads/{thread_id}/runs with the command, "
            "or POST /runs/{run_id}/wait with it"
        )
    thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
    row = thread.last.run if thread.last is not None else None
    return await _resume_run(api, tenant, row, f"thread {thread_id}", await live_status(api, tenant, thread), value)


async def _resume_run(
    api: ApiState, tenant: str, row: RunRow | None, where: str, status: str, value: Any
) -> tuple[str, int]:
    position = await api.wp.last_seq(row.run_id, tenant_id=tenant) if row is not None else 0
    return await interrupts.resume(api, tenant, row, status, where, value), position


async def _member(api: ApiState, tenant: str, thread_id: str, run_id: str) -> ThreadRun:
    """The run's place on the thread (its row None while it starts); NotFound unless it has one."""
    thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
    for member in thread.runs:
        if member.run_id == run_id:
            return member
    raise NotFound(f"thread {thread_id} has no run {run_id!r}: GET /threads/{thread_id}/runs lists them")


async def member_json(api: ApiState, tenant: str, thread_id: str | None, member: ThreadRun) -> dict[str, Any]:
    """A run of a thread as the protocol's Run: its row, or, before its worker wrote one, the row
    its start asked for; with the multitask strategy it was created with."""
    row = member.run or await api.wp.run_or_planned(member.run_id, tenant_id=tenant)
    return run_json(member.run_id, thread_id, "", row, strategy=member.multitask_strategy)


async def shown_run(api: ApiState, tenant: str, run_id: str) -> dict[str, Any]:
    """A run by its id alone as the protocol's Run: on its thread (if any), as `member_json`."""
    thread_id = await api.wp.threads.of_run(run_id, tenant_id=tenant)
    if thread_id is not None:
        with contextlib.suppress(NotFound):  # taken off its thread meanwhile: a run on no thread
            return await member_json(api, tenant, thread_id, await _member(api, tenant, thread_id, run_id))
    return run_json(run_id, None, "", await api.wp.run_or_planned(run_id, tenant_id=tenant))


def created_json(row: RunRow, thread_id: str | None, body: RunCreate) -> dict[str, Any]:
    """A create's answer: the run (as its start asked for it, or the row of one that existed
    before), with the strategy it was created with; in the open spec's shape for the spec's body."""
    strategy = body.multitask_strategy if thread_id else None  # a run on no thread shares none
    shaped = run_json(row.run_id, thread_id, body.assistant_id, row, strategy=strategy)
    return spec_run(shaped) if body.speaks_spec else shaped


def _locations(thread_id: str | None, run_id: str) -> dict[str, str]:
    base = f"/threads/{thread_id}/runs/{run_id}" if thread_id else f"/runs/{run_id}"
    return {"Location": f"{base}/stream", "Content-Location": base}


async def _stream(
    api: ApiState,
    tenant: str,
    slot: StreamSlot,
    thread_id: str | None,
    run_id: str,
    modes: list[str],
    resume_after: int = 0,
    *,
    subgraphs: bool = False,
    resumed: bool = False,
) -> Response:
    """The run's stream in the protocol's format: its log from the start (state is rebuilt from it;
    parts the client saw before `resume_after` are not sent again), then live; with `subgraphs`,
    its sub-agent runs' parts too, until every run of its tree has ended."""
    fmt = ProtocolFormat(run_id, modes, [], forked=False, resume_after=resume_after, thread_id=thread_id)
    deltas = wants_deltas(modes)
    tree = TreeStream(api.hub, api.wp, tenant, run_id, {}, deltas=deltas) if subgraphs else None

    async def items() -> AsyncIterator[StreamItem]:
        async for item in follow_run(api, tenant, run_id, fmt, tree.items if tree else None):
            stops = item.event is not None and item.event.run_id == run_id and interrupts.is_wait(item.event)
            if stops and item.event is not None:
                fmt.interrupts[item.event.seq] = await interrupts.interrupts(
                    api, tenant, await api.wp.run(run_id, tenant_id=tenant)
                )
            yield item
            if stops and item.event is not None and item.event.seq > resume_after:
                return  # as LangGraph's: a stream ends at an interrupt

    return sse_response(
        items(),
        SubgraphFormat(fmt, tree, modes).render if tree else fmt.render,
        slot=slot,
        keepalive=api.settings.api_keepalive_seconds,
        headers=_locations(thread_id, run_id),
        opening=fmt.opening() if resume_after == 0 or resumed else [],  # (a reconnect saw it)
    )


async def _final_values(api: ApiState, tenant: str, run_id: str) -> dict[str, Any]:
    """The run's values when it ends, or when it waits for a human: then with `__interrupt__`."""
    ending = asyncio.ensure_future(api.wp.result(run_id, tenant_id=tenant))
    try:
        while not ending.done():
            row = await written(api, tenant, run_id, wait=0.0)
            waiting = await interrupts.interrupts(api, tenant, row)
            if waiting:
                return {**values(flatten(await conversation(api.wp, tenant, run_id))), "__interrupt__": waiting}
            await asyncio.wait([ending], timeout=0.25)
    finally:
        if not ending.done():
            ending.cancel()
    result = ending.result()
    final = values(flatten(await conversation(api.wp, tenant, run_id)), result.output_json)
    if result.status == "failed":
        final["__error__"] = {"error": "RunFailed", "message": result.error}
    return final


@router.post("/threads/{thread_id}/runs")
async def create_run(
    thread_id: str, body: RunCreate, api: Api, tenant: Tenant, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Start a run on the thread in the background."""
    row = await start_on_thread(api, tenant, thread_id, body, idempotency_key)
    return JSONResponse(created_json(row, thread_id, body), headers=_locations(thread_id, row.run_id))


@router.post("/threads/{thread_id}/runs/stream")
async def stream_run(
    thread_id: str,
    body: RunCreate,
    api: Api,
    tenant: Tenant,
    slot: OpenStream,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Start a run on the thread and stream it in the requested stream modes (protocol/stream.py)."""
    modes = stream_modes(body.stream_mode)
    if body.command:  # the waiting run goes on: its stream from the answer on
        run_id, position = await resume_on_thread(api, tenant, thread_id, body)
        return await _stream(
            api, tenant, slot, thread_id, run_id, modes, position, subgraphs=body.stream_subgraphs, resumed=True
        )
    run_id = (await start_on_thread(api, tenant, thread_id, body, idempotency_key)).run_id
    return await _stream(api, tenant, slot, thread_id, run_id, modes, subgraphs=body.stream_subgraphs)


@router.post("/threads/{thread_id}/runs/wait")
async def wait_run(
    thread_id: str, body: RunCreate, api: Api, tenant: Tenant, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    """Start a run on the thread and answer its final values when it ends."""
    run_id = (await start_on_thread(api, tenant, thread_id, body, idempotency_key)).run_id
    return JSONResponse(await _final_values(api, tenant, run_id), headers=_locations(thread_id, run_id))


@router.get("/threads/{thread_id}/runs")
async def list_runs(
    thread_id: str,
    api: Api,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status: str | None = None,
) -> list[dict[str, Any]]:
    """The thread's runs, newest first."""
    thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
    shaped = [await member_json(api, tenant, thread_id, m) for m in reversed(thread.runs)]
    shaped = [r for r in shaped if status is None or r["status"] == status]
    return shaped[offset : offset + limit]


@router.get("/threads/{thread_id}/runs/{run_id}")
async def get_run(thread_id: str, run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return await member_json(api, tenant, thread_id, await _member(api, tenant, thread_id, run_id))


@router.post("/threads/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(
    thread_id: str,
    run_id: str,
    api: Api,
    tenant: Tenant,
    wait: Annotated[bool, Query()] = False,
    action: Annotated[str, Query()] = "interrupt",
) -> JSONResponse:
    """Cancel the run after its current step (`action=interrupt`); `wait=1` answers when it ended."""
    await _member(api, tenant, thread_id, run_id)
    if action != "interrupt":
        raise not_supported("only action=interrupt is supported: the run's log is append-only (no rollback)")
    await api.wp.cancel(run_id, "cancelled through the Agent Protocol", tenant_id=tenant)
    if wait:
        await api.wp.result(run_id, tenant_id=tenant)
    shaped = await member_json(api, tenant, thread_id, await _member(api, tenant, thread_id, run_id))
    return JSONResponse(shaped, 200 if wait else 202)


@router.get("/threads/{thread_id}/runs/{run_id}/join")
async def join_run(thread_id: str, run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Wait for the run to end; answers the thread's final values."""
    await _member(api, tenant, thread_id, run_id)
    return await _final_values(api, tenant, run_id)


@router.get("/threads/{thread_id}/runs/{run_id}/stream")
async def join_stream(
    thread_id: str,
    run_id: str,
    api: Api,
    tenant: Tenant,
    slot: OpenStream,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Join a run's stream: from the start, or after Last-Event-ID, then live until it ends."""
    await _member(api, tenant, thread_id, run_id)
    position = await api.wp.check_position(run_id, resume_point(last_event_id, None), tenant_id=tenant)
    return await _stream(api, tenant, slot, thread_id, run_id, stream_modes(stream_mode), position)


@router.delete("/threads/{thread_id}/runs/{run_id}", status_code=204)
async def delete_run(thread_id: str, run_id: str, api: Api, tenant: Tenant) -> Response:
    """Delete a finished run (and everything it wrote) and take it off the thread."""
    await _member(api, tenant, thread_id, run_id)
    await api.wp.threads.delete_run(run_id, thread_id=thread_id, tenant_id=tenant)
    return Response(status_code=204)


# --- stateless runs (on no thread) ---------------------------------------------------------------


@router.post("/runs")
async def create_stateless(
    body: RunCreate, api: Api, tenant: Tenant, idempotency_key: IdempotencyKey = None
) -> JSONResponse:
    row = await start_on_thread(api, tenant, body.thread_id, body, idempotency_key)
    return JSONResponse(created_json(row, body.thread_id, body), headers=_locations(body.thread_id, row.run_id))


@router.post("/runs/stream")
async def stream_stateless(
    body: RunCreate, api: Api, tenant: Tenant, slot: OpenStream, idempotency_key: IdempotencyKey = None
) -> Response:
    modes = stream_modes(body.stream_mode)
    run_id = (await start_on_thread(api, tenant, body.thread_id, body, idempotency_key)).run_id
    return await _stream(api, tenant, slot, body.thread_id, run_id, modes, subgraphs=body.stream_subgraphs)


@router.post("/runs/wait")
async def wait_stateless(
    body: RunCreate, api: Api, tenant: Tenant, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Start a run and answer its final values when it ends (or waits for a human); for the open
    spec's body (`agent_id`), the spec's RunWaitResponse: the run, its values and their messages."""
    run_id = (await start_on_thread(api, tenant, body.thread_id, body, idempotency_key)).run_id
    final = await _final_values(api, tenant, run_id)
    if not body.speaks_spec:
        return final
    run = spec_run(await shown_run(api, tenant, run_id))
    return {"run": run, "values": final, "messages": spec_messages(final["messages"])}


@router.get("/runs/{run_id}")
async def get_stateless(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return await shown_run(api, tenant, run_id)


@router.get("/runs/{run_id}/stream")
async def join_stateless(
    run_id: str,
    api: Api,
    tenant: Tenant,
    slot: OpenStream,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    position = await api.wp.check_position(run_id, resume_point(last_event_id, None), tenant_id=tenant)
    return await _stream(api, tenant, slot, None, run_id, stream_modes(stream_mode), position)


# --- what is not supported: 501, with what to do instead -----------------------------------------


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    command: dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None


async def _resume_by_id(api: ApiState, tenant: str, run_id: str, body: ResumeBody) -> tuple[str, int]:
    if not body.command:
        raise InvalidInput(
            f"POST /runs/{run_id}/stream|wait answers the run's interrupt: send command={{'resume': ...}}"
        )
    value = check_command(body.command)
    row = await api.wp.run(run_id, tenant_id=tenant)
    return await _resume_run(api, tenant, row, f"run {run_id}", str(row.status), value)


@router.post("/runs/{run_id}/stream")
async def resume_stream(run_id: str, body: ResumeBody, api: Api, tenant: Tenant, slot: OpenStream) -> Response:
    """Answer the run's interrupt (`command={'resume': ...}`) and stream it from there."""
    modes = stream_modes(body.stream_mode)
    run_id, position = await _resume_by_id(api, tenant, run_id, body)
    return await _stream(api, tenant, slot, None, run_id, modes, position, resumed=True)


@router.post("/runs/{run_id}/wait")
async def resume_wait(run_id: str, body: ResumeBody, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Answer the run's interrupt (`command={'resume': ...}`) and answer its values when it ends (or waits again)."""
    run_id, _ = await _resume_by_id(api, tenant, run_id, body)
    return await _final_values(api, tenant, run_id)


@router.post("/runs/batch")
async def batch(tenant: Tenant) -> None:
    raise not_supported("batches of runs are not supported: start each run with POST /runs")


@router.post("/runs/cancel")
async def cancel_many(tenant: Tenant) -> None:
    raise not_supported(
        "cancelling runs in bulk is not supported: cancel each with POST /threads/{id}/runs/{run_id}/cancel "
        "or POST /v1/runs/{id}/cancel"
    )
