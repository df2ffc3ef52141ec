"""A run's writes are idempotent: a retried start, step or finish changes nothing, overlapping
attempts of one step record it once, and writes are tenant-checked."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.helpers import start
from waypoint.activities.checkpoints import CheckpointActivities
from waypoint.agents import AgentRegistry
from waypoint.errors import NotFound
from waypoint.names import RunStatus
from waypoint.store import RunStore
from waypoint.store.schema import checkpoints, events, runs
from waypoint.store.steps import NewRun
from waypoint.types import ModelTurn, RunPlan, StepRecord, ToolCall, ToolResult, Usage

pytestmark = pytest.mark.postgres


async def counts(engine: AsyncEngine, run_id: str) -> tuple[int, int, int]:
    async with engine.connect() as conn:
        n_events = await conn.scalar(select(func.count()).select_from(events).where(events.c.run_id == run_id))
        n_cps = await conn.scalar(select(func.count()).select_from(checkpoints).where(checkpoints.c.run_id == run_id))
        tokens = await conn.scalar(select(runs.c.input_tokens).where(runs.c.run_id == run_id))
    return n_events, n_cps, tokens


def step_one(run_id: str, tenant: str) -> StepRecord:
    turn = ModelTurn(
        model="scripted",
        tool_calls=[ToolCall(id="c1", name="add", arguments='{"a":1,"b":2}')],
        usage=Usage(input_tokens=40, output_tokens=9),
    )
    return StepRecord(
        run_id=run_id,
        tenant_id=tenant,
        step=1,
        turn=turn,
        tool_results=[ToolResult(call_id="c1", name="add", output="3")],
    )


async def test_every_write_of_a_run_twice_is_a_no_op(engine: AsyncEngine, store: RunStore, settings):
    run_id = await start(store, settings)
    new = NewRun(run_id, settings.tenant, "calculator", "t", "Add numbers.", RunPlan(model="scripted", max_steps=50))
    await store.steps.create_run(new)  # a retried start creates nothing new
    assert await counts(engine, run_id) == (1, 1, 0)

    first = await store.steps.record_step(step_one(run_id, settings.tenant))
    after_first = await counts(engine, run_id)
    assert after_first == (3, 2, 40)  # model_response + tool_result; checkpoint 1; tokens once
    assert await store.steps.record_step(step_one(run_id, settings.tenant), attempt=2) == first
    assert await counts(engine, run_id) == after_first

    await store.log.finish_run(settings.tenant, run_id, RunStatus.COMPLETED, "3", None)
    again = await store.log.finish_run(settings.tenant, run_id, RunStatus.FAILED, None, "late")
    assert again.status == RunStatus.COMPLETED  # the first final status sticks
    assert await counts(engine, run_id) == (4, 2, 40)


async def test_overlapping_attempts_of_one_step_record_it_once(engine: AsyncEngine, store: RunStore, settings):
    run_id = await start(store, settings)
    record = step_one(run_id, settings.tenant)
    # A retry can start while a stalled first attempt is still writing.
    seqs = await asyncio.gather(*(store.steps.record_step(record, attempt=n) for n in range(1, 5)))
    assert len(set(seqs)) == 1
    assert await counts(engine, run_id) == (3, 2, 40)


async def test_writes_name_their_tenant(engine: AsyncEngine, store: RunStore, settings):
    run_id = await start(store, settings)
    with pytest.raises(NotFound):
        await store.steps.record_step(step_one(run_id, "someone-else"))
    with pytest.raises(NotFound):
        await store.log.finish_run("someone-else", run_id, RunStatus.COMPLETED, "x", None)
    await store.log.set_status("someone-else", run_id, RunStatus.PAUSED, None)  # matches no row: nothing changes
    assert await counts(engine, run_id) == (1, 1, 0)
    assert (await store.get_run(settings.tenant, run_id)).status == RunStatus.RUNNING


async def test_the_activity_boundary_makes_a_missing_checkpoint_non_retryable(
    store: RunStore, agents: AgentRegistry, settings
):
    acts = CheckpointActivities(store, agents)
    run_id = await start(store, settings)
    record = step_one(run_id, settings.tenant)
    gap = StepRecord(**{**record.__dict__, "step": 3})
    with pytest.raises(ApplicationError, match="no checkpoint for step 2") as info:
        await ActivityEnvironment().run(acts.record_step, gap)
    assert info.value.non_retryable and info.value.type == "NotFound"
