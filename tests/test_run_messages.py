"""Pause, resume, cancel, send, approve and deny: durable messages to a running run."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import EFFECTS
from tests.helpers import eventually
from tests.run_history import done_while_paused
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import WaypointError
from waypoint.store.schema import checkpoints, events, runs
from waypoint.types import Budget, RunInput

pytestmark = pytest.mark.postgres


async def db_status(engine: AsyncEngine, run_id: str) -> str | None:
    async with engine.connect() as conn:
        return await conn.scalar(select(runs.c.status).where(runs.c.run_id == run_id))


async def test_pause_resume_send_and_cancel(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("count", agent="listener")
    await eventually(lambda: _steps_at_least(wp, run_id, 2))

    with pytest.raises(WaypointError, match="is not paused"):
        await wp.resume(run_id)
    await wp.pause(run_id)
    with pytest.raises(WaypointError, match="already paused"):
        await wp.pause(run_id)
    await eventually(lambda: _is(engine, run_id, "paused"))
    paused_at = (await wp.run(run_id)).steps
    assert (await wp.progress(run_id)).status == "paused"

    resumed = await wp.resume(run_id)
    assert resumed.status == "running"  # the state after the change, not before
    assert await done_while_paused(client, run_id) == []  # nothing moved while paused
    await eventually(lambda: _steps_at_least(wp, run_id, paused_at + 2))
    assert await db_status(engine, run_id) == "running"

    await wp.send(run_id, "stop now")  # the agent answers when it reads this
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "heard: stop now")
    sent = [e for e in await _events(engine, run_id) if e.kind == "user_message"]
    assert [e.payload["content"] for e in sent] == ["stop now"]
    with pytest.raises(WaypointError, match="has ended|is completed"):
        await wp.send(run_id, "too late")

    run_id = await wp.start_run("count", agent="listener")
    await eventually(lambda: _steps_at_least(wp, run_id, 1))
    await wp.cancel(run_id, "enough")
    result = await wp.result(run_id)
    assert (result.status, result.error) == ("cancelled", "enough")
    async with engine.connect() as conn:
        steps = list((await conn.execute(select(checkpoints.c.step).where(checkpoints.c.run_id == run_id))).scalars())
    assert sorted(steps) == list(range(result.steps + 1))  # the final checkpoint is the last step's


async def test_cancel_while_paused_ends_the_run(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("count", agent="listener")
    await wp.pause(run_id)
    await eventually(lambda: _is(engine, run_id, "paused"))
    await wp.cancel(run_id)
    result = await wp.result(run_id)
    assert result.status == "cancelled" and result.error == "cancelled by a user"


async def test_a_deadline_no_timer_holds_still_lets_a_paused_run_end(
    client: Client, engine: AsyncEngine, settings: Settings, worker
):
    """A run started before budgets were bounded may carry such a deadline: its waits are cut to the
    longest timer instead of failing every workflow task."""
    wp = Waypoint(client, engine, settings)
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    huge = RunInput(agent="listener", task="count", tenant_id=settings.tenant, budget=Budget(deadline_seconds=1e300))
    await (await wp.temporal()).start_run(run_id, huge)  # past the client, which refuses it now
    await wp.pause(run_id)
    await eventually(lambda: _is(engine, run_id, "paused"))
    await asyncio.wait_for(wp.cancel(run_id), 60)  # without the cut, no workflow task completes
    assert (await wp.result(run_id)).status == "cancelled"


async def test_approve_then_deny(client: Client, engine: AsyncEngine, settings: Settings, worker):
    EFFECTS.clear()
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("clean up", agent="careful")
    with pytest.raises(WaypointError, match="no tool call waiting|no tool call waits"):
        await wp.approve(run_id)
    await eventually(lambda: _is(engine, run_id, "waiting_approval"))
    (pending,) = (await wp.progress(run_id)).pending_approvals
    assert (pending.tool, pending.step) == ("delete_file", 1)
    assert EFFECTS == []  # nothing ran before the approval
    with pytest.raises(WaypointError, match="no tool call 'call_x'"):
        await wp.approve(run_id, call_id="call_x")

    approved = await wp.approve(run_id, reason="fine")
    assert (approved.status, approved.pending_approvals) == ("running", [])  # the state after the change
    await eventually(lambda: _pending_step(wp, run_id, 2))
    assert EFFECTS == ["deleted a.txt"]
    await wp.deny(run_id, reason="keep b.txt")
    result = await wp.result(run_id)
    assert result.status == "completed"
    assert result.output == "last tool answer: error: a human denied this call: keep b.txt"
    assert EFFECTS == ["deleted a.txt"]
    decisions = [e.payload for e in await _events(engine, run_id) if e.kind == "decision"]
    assert [(d["decision"], d["reason"]) for d in decisions] == [("approved", "fine"), ("denied", "keep b.txt")]


async def _steps_at_least(wp: Waypoint, run_id: str, n: int) -> bool:
    try:
        return (await wp.run(run_id)).steps >= n
    except WaypointError:
        return False


async def _is(engine: AsyncEngine, run_id: str, status: str) -> bool:
    return await db_status(engine, run_id) == status


async def _pending_step(wp: Waypoint, run_id: str, step: int) -> bool:
    pending = (await wp.progress(run_id)).pending_approvals
    return bool(pending) and pending[0].step == step


async def _events(engine: AsyncEngine, run_id: str) -> list:
    async with engine.connect() as conn:
        return list(await conn.execute(select(events).where(events.c.run_id == run_id).order_by(events.c.seq)))
