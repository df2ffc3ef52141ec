"""The open Agent Protocol's background runs (langchain-ai/agent-protocol, openapi.json 0.1.6) that
LangGraph's API has only under a thread: search, delete, wait and cancel a run by its id alone.

The spec's run is LangGraph's (protocol/shapes.py `run_json`) with its own status set: a live run
(`running` in LangGraph's) is `pending`, and the agent is `agent_id` as well as `assistant_id`. The
spec's messages carry a `role` (user, assistant, tool) beside LangChain's `type`.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.protocol.runs import member_json, shown_run
from waypoint.app.http.protocol.shapes import conversation, flatten, run_json, spec_messages, spec_run, values
from waypoint.app.http.state import ApiState
from waypoint.client import RunRow
from waypoint.errors import NotFound

router = APIRouter(tags=["agent protocol (open spec): background runs"])

SCAN = 1000  # how many of the newest runs a filtered search looks through


class RunSearch(BaseModel):
    model_config = ConfigDict(extra="ignore")
    metadata: dict[str, Any] | None = None
    status: Literal["pending", "error", "success", "timeout", "interrupted"] | None = None
    thread_id: str | None = None
    agent_id: str | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


async def _row(api: ApiState, tenant: str, run_id: str) -> RunRow | None:
    """The run's row; None while a run just started has none yet; NotFound for no such run."""
    return await api.wp.run_if_written(run_id, tenant_id=tenant)


@router.post("/runs/search")
async def search_runs(body: RunSearch, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    """Runs newest first: a thread's (`thread_id`), or the tenant's top-level runs (sub-agent runs are
    their parents' parts); filtered by agent, the spec's status, and metadata (`waypoint_status`, `steps`)."""
    if body.thread_id is not None:
        thread = await api.wp.threads.get(body.thread_id, tenant_id=tenant)
        found = [spec_run(await member_json(api, tenant, body.thread_id, m)) for m in reversed(thread.runs)]
        if body.agent_id is not None:
            found = [r for r in found if r["agent_id"] == body.agent_id]
    else:
        filtered = body.status is not None or bool(body.metadata)
        rows = await api.wp.runs(
            tenant_id=tenant,
            limit=SCAN if filtered else min(body.offset + body.limit, SCAN),
            agent=body.agent_id,
            roots=True,
        )
        found = [spec_run(run_json(r.run_id, None, "", r)) for r in rows]
        placed = {r.run_id: r for r in rows}
    if body.status is not None:
        found = [r for r in found if r["status"] == body.status]
    if body.metadata:
        found = [r for r in found if all(r["metadata"].get(k) == v for k, v in body.metadata.items())]
    page = found[body.offset : body.offset + body.limit]
    if body.thread_id is None:  # each on its thread (if any), with the strategy it was created with there
        page = [await _on_thread(api, tenant, placed[run["run_id"]], run) for run in page]
    return page


async def _on_thread(api: ApiState, tenant: str, row: RunRow, shaped: dict[str, Any]) -> dict[str, Any]:
    """A run of the tenant's listing as its thread shows it (the multitask strategy it was created
    with there), or as listed when it is on no thread."""
    thread_id = await api.wp.threads.of_run(row.run_id, tenant_id=tenant)
    if thread_id is None:
        return shaped
    with contextlib.suppress(NotFound):  # the thread went meanwhile: a run on no thread
        thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
        for member in thread.runs:
            if member.run_id == row.run_id:
                return spec_run(run_json(row.run_id, thread_id, "", row, strategy=member.multitask_strategy))
    return shaped


@router.delete("/runs/{run_id}", status_code=204)
async def delete_run(run_id: str, api: Api, tenant: Tenant) -> Response:
    """Delete a run that ended (and everything it wrote), and take it off its thread; a live run is
    a conflict: cancel it first."""
    await api.wp.threads.delete_run(run_id, tenant_id=tenant)
    return Response(status_code=204)


@router.get("/runs/{run_id}/wait")
async def wait_run(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Wait for the run to end (at once if it has): the run, its final values and their messages."""
    await _row(api, tenant, run_id)
    result = await api.wp.result(run_id, tenant_id=tenant)
    final = values(flatten(await conversation(api.wp, tenant, run_id)), result.output_json)
    run = spec_run(await shown_run(api, tenant, run_id))
    return {"run": run, "values": final, "messages": spec_messages(final["messages"])}


@router.post("/runs/{run_id}/cancel", status_code=204)
async def cancel_run(
    run_id: str,
    api: Api,
    tenant: Tenant,
    wait: Annotated[bool, Query()] = False,
    action: Annotated[Literal["interrupt", "rollback"], Query()] = "interrupt",
) -> Response:
    """Cancel the run after its current step. `rollback` also takes it off its thread (its steps are
    no part of the thread's state; the run stays in the log, cancelled); `wait=true` answers when it ended."""
    await _row(api, tenant, run_id)
    reason = f"cancelled through the Agent Protocol ({action})"
    await api.wp.threads.cancel_run(run_id, reason, rollback=action == "rollback", tenant_id=tenant)
    if wait:
        await api.wp.result(run_id, tenant_id=tenant)
    return Response(status_code=204)
