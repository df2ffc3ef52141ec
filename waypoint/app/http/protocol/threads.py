"""Agent Protocol threads: a thread is a conversation, a chain of Waypoint runs (protocol/runs.py
starts them); its state is the conversation of its newest run, and its checkpoints are the steps
of that run and of the runs it was forked from (`<run_id>:<step>`)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http.auth import Api, OpenStream, Tenant
from waypoint.app.http.problems import not_supported
from waypoint.app.http.protocol import interrupts
from waypoint.app.http.protocol.follow import follow_thread
from waypoint.app.http.protocol.shapes import (
    Entry,
    conversation,
    flatten,
    iso,
    thread_status,
    values,
)
from waypoint.app.http.state import ApiState
from waypoint.client import RunRow, ThreadRow, newest_started
from waypoint.errors import NotFound
from waypoint.names import FINISHED

router = APIRouter(tags=["agent protocol: threads"])


class Loose(BaseModel):
    # LangGraph clients send many optional fields; the ones Waypoint cannot honour are refused below.
    model_config = ConfigDict(extra="ignore")


class ThreadCreate(Loose):
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
    if_exists: str = "raise"


class ThreadPatch(Loose):
    metadata: dict[str, Any] = Field(default_factory=dict)


class ThreadSearch(Loose):
    metadata: dict[str, Any] | None = None
    status: str | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class History(Loose):
    limit: int = Field(10, ge=1, le=1000)
    before: dict[str, Any] | str | None = None


class CheckpointRef(Loose):
    checkpoint: dict[str, Any]


# --- threads ------------------------------------------------------------------------------------


async def thread_json(api: ApiState, tenant: str, thread: ThreadRow) -> dict[str, Any]:
    last = newest_started(thread)
    state = values(flatten(await conversation(api.wp, tenant, last.run_id)), last.output_json) if last else {}
    waiting = await _waiting(api, tenant, thread)
    status = thread_status(thread)
    return {
        "thread_id": thread.thread_id,
        "created_at": iso(thread.created_at),
        "updated_at": iso(thread.updated_at),
        "metadata": thread.metadata,
        "status": "interrupted" if waiting else "busy" if status == "interrupted" else status,
        "values": state,
        # by task, as LangGraph keys them: the waiting step's tools node
        "interrupts": {interrupts.task(run.run_id, run.steps + 1, found)["id"]: found for run, found in waiting},
    }


async def _waiting(api: ApiState, tenant: str, thread: ThreadRow) -> list[tuple[RunRow, list[dict[str, Any]]]]:
    """The thread's run and its interrupts, read live from its pending approvals (none: not interrupted)."""
    row = thread.last.run if thread.last is not None else None
    found = await interrupts.interrupts(api, tenant, row)
    return [(row, found)] if row is not None and found else []


async def live_status(api: ApiState, tenant: str, thread: ThreadRow) -> str:
    """The thread's status, `interrupted` only while its run has a call that waits (an answered one
    is `busy` at once, before the run's row catches up)."""
    status = thread_status(thread)
    if status != "interrupted":
        return status
    return "interrupted" if await _waiting(api, tenant, thread) else "busy"


@router.post("/threads")
async def create_thread(body: ThreadCreate, api: Api, tenant: Tenant) -> dict[str, Any]:
    thread = await api.wp.threads.create(
        thread_id=body.thread_id, metadata=body.metadata, if_exists=body.if_exists, tenant_id=tenant
    )
    return await thread_json(api, tenant, thread)


@router.post("/threads/search")
async def search_threads(body: ThreadSearch, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    found = await api.wp.threads.search(metadata=body.metadata, limit=body.limit, offset=body.offset, tenant_id=tenant)
    shaped = [await thread_json(api, tenant, t) for t in found]
    return [t for t in shaped if body.status is None or t["status"] == body.status]


@router.post("/threads/count")
async def count_threads(body: ThreadSearch, api: Api, tenant: Tenant) -> int:
    return await api.wp.threads.count(metadata=body.metadata, tenant_id=tenant)


@router.get("/threads/{thread_id}")
async def get_thread(thread_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return await thread_json(api, tenant, await api.wp.threads.get(thread_id, tenant_id=tenant))


@router.patch("/threads/{thread_id}")
async def patch_thread(thread_id: str, body: ThreadPatch, api: Api, tenant: Tenant) -> dict[str, Any]:
    return await thread_json(api, tenant, await api.wp.threads.update(thread_id, body.metadata, tenant_id=tenant))


@router.delete("/threads/{thread_id}", status_code=204)
async def delete_thread(thread_id: str, api: Api, tenant: Tenant) -> Response:
    """Forget the thread; its runs stay in the log (DELETE /v1/runs/{id} removes one)."""
    await api.wp.threads.delete(thread_id, tenant_id=tenant)
    return Response(status_code=204)


@router.post("/threads/{thread_id}/copy")
async def copy_thread(thread_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """A new thread with the same history: its next run forks from the same place (nothing is copied)."""
    return await thread_json(api, tenant, await api.wp.threads.copy(thread_id, tenant_id=tenant))


# --- state and history (checkpoints are steps: "<run_id>:<step>") ---------------------------------


def checkpoint_ref(thread_id: str, run_id: str, step: int) -> dict[str, Any]:
    return {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": f"{run_id}:{step}", "checkpoint_map": None}


def states(thread: ThreadRow, entries: list[Entry], last: RunRow) -> list[dict[str, Any]]:
    """Every checkpoint of the conversation, newest first, with its values."""
    points: list[tuple[str, int]] = []
    for e in entries:
        if not points or points[-1] != (e.run_id, e.step):
            points.append((e.run_id, e.step))
    if (last.run_id, last.steps) not in points:
        points.append((last.run_id, last.steps))
    out: list[dict[str, Any]] = []
    for i, (run_id, step) in enumerate(points):
        upto = [e for e in entries if (e.run_id, e.step) in points[: i + 1]]
        at = upto[-1].at if upto else None
        live = (run_id, step) == points[-1] and last.status not in FINISHED
        out.append(
            {
                # The newest checkpoint of a typed run that ended carries its answer.
                "values": values(flatten(upto), last.output_json if i == len(points) - 1 else None),
                "next": ["model"] if live else [],
                "checkpoint": checkpoint_ref(thread.thread_id, run_id, step),
                "metadata": {"run_id": run_id, "step": step, "source": "input" if i == 0 else "loop"},
                "created_at": iso(at),
                "parent_checkpoint": checkpoint_ref(thread.thread_id, *points[i - 1]) if i else None,
                "tasks": [],
                "interrupts": [],
            }
        )
    return list(reversed(out))


async def thread_states(api: ApiState, tenant: str, thread_id: str) -> list[dict[str, Any]]:
    thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
    last = newest_started(thread)
    if last is None:
        return []
    found = states(thread, await conversation(api.wp, tenant, last.run_id), last)
    for run, waiting in await _waiting(api, tenant, thread):
        if found and run.run_id == last.run_id:  # the newest checkpoint waits: its tools node holds the interrupts
            found[0] = {
                **found[0],
                "next": ["tools"],
                "tasks": [interrupts.task(run.run_id, run.steps + 1, waiting)],
                "interrupts": waiting,
            }
    return found


def empty_state(thread_id: str) -> dict[str, Any]:
    return {
        "values": {},
        "next": [],
        "checkpoint": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": None, "checkpoint_map": None},
        "metadata": {},
        "created_at": None,
        "parent_checkpoint": None,
        "tasks": [],
        "interrupts": [],
    }


@router.get("/threads/{thread_id}/state")
async def get_state(thread_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    found = await thread_states(api, tenant, thread_id)
    return found[0] if found else empty_state(thread_id)


@router.get("/threads/{thread_id}/state/{checkpoint_id}")
async def get_state_at(thread_id: str, checkpoint_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    for state in await thread_states(api, tenant, thread_id):
        if state["checkpoint"]["checkpoint_id"] == checkpoint_id:
            return state
    raise NotFound(f"thread {thread_id} has no checkpoint {checkpoint_id!r}: its history lists them")


@router.post("/threads/{thread_id}/state/checkpoint")
async def post_state_at(thread_id: str, body: CheckpointRef, api: Api, tenant: Tenant) -> dict[str, Any]:
    return await get_state_at(thread_id, str(body.checkpoint.get("checkpoint_id")), api, tenant)


@router.post("/threads/{thread_id}/history")
async def history(thread_id: str, body: History, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    found = await thread_states(api, tenant, thread_id)
    before = body.before.get("checkpoint_id") if isinstance(body.before, dict) else body.before
    if before:
        ids = [s["checkpoint"]["checkpoint_id"] for s in found]
        found = found[ids.index(before) + 1 :] if before in ids else []
    return found[: body.limit]


@router.get("/threads/{thread_id}/history")
async def history_of(
    thread_id: str,
    api: Api,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    before: str | None = None,
) -> list[dict[str, Any]]:
    """The same as POST, with `limit` and `before` (a checkpoint id) in the query."""
    return await history(thread_id, History(limit=limit, before=before), api, tenant)


@router.get("/threads/{thread_id}/stream")
async def thread_stream(
    thread_id: str,
    api: Api,
    tenant: Tenant,
    slot: OpenStream,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> Response:
    """Join the thread's stream: its current run (or its next), then every run after it, until the
    client leaves; Last-Event-ID (`<run_id>:<seq>`) resumes (protocol/follow.py)."""
    return await follow_thread(api, tenant, slot, thread_id, stream_mode, last_event_id)


@router.post("/threads/prune")
async def prune(tenant: Tenant) -> None:
    raise not_supported(
        "pruning threads is not supported: delete each with DELETE /threads/{id} "
        "(its runs stay in the log until DELETE /v1/runs/{id})"
    )
