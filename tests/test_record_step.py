"""The checkpoint activities are idempotent: a retried attempt changes nothing."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.checkpoints import CheckpointActivities
from waypoint.agents import AgentRegistry
from waypoint.store.schema import checkpoints, events, runs
from waypoint.types import Budget, FinishRunInput, ModelTurn, StartRunInput, StepRecord, ToolCall, ToolResult, Usage

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


def new_run(settings) -> StartRunInput:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    return StartRunInput(
        run_id=run_id, tenant_id=settings.tenant, agent="calculator", task="t", model=None, budget=Budget()
    )


async def test_record_step_twice_is_a_no_op(engine: AsyncEngine, agents: AgentRegistry, settings):
    acts = CheckpointActivities(engine, agents)
    env = ActivityEnvironment()
    start = new_run(settings)
    run_id = start.run_id
    plan = await env.run(acts.start_run, start)
    assert await env.run(acts.start_run, start) == plan  # a retried start creates nothing new
    assert await counts(engine, run_id) == (1, 1, 0)

    first = await env.run(acts.record_step, step_one(run_id, settings.tenant))
    after_first = await counts(engine, run_id)
    assert after_first == (3, 2, 40)  # model_response + tool_result; checkpoint 1; tokens once

    second = await env.run(acts.record_step, step_one(run_id, settings.tenant))
    assert second == first
    assert await counts(engine, run_id) == after_first

    done = FinishRunInput(run_id=run_id, tenant_id=settings.tenant, status="completed", steps=1, output="3")
    await env.run(acts.finish_run, done)
    again = await env.run(acts.finish_run, FinishRunInput(**{**done.__dict__, "status": "failed"}))
    assert again.status == "completed"  # the first final status sticks
    assert await counts(engine, run_id) == (4, 2, 40)


async def test_record_step_refuses_a_step_without_its_predecessor(engine: AsyncEngine, agents, settings):
    acts = CheckpointActivities(engine, agents)
    record = step_one(f"run-{uuid.uuid4().hex[:8]}", settings.tenant)
    with pytest.raises(ApplicationError, match="no checkpoint for step 0") as info:
        await ActivityEnvironment().run(acts.record_step, record)
    assert info.value.non_retryable


async def test_overlapping_attempts_of_one_step_record_it_once(engine: AsyncEngine, agents: AgentRegistry, settings):
    import asyncio

    acts = CheckpointActivities(engine, agents)
    env = ActivityEnvironment()
    start = new_run(settings)
    run_id = start.run_id
    await env.run(acts.start_run, start)
    record = step_one(run_id, settings.tenant)
    # A retry can start while a stalled first attempt is still writing.
    seqs = await asyncio.gather(*(ActivityEnvironment().run(acts.record_step, record) for _ in range(4)))
    assert len(set(seqs)) == 1
    assert await counts(engine, run_id) == (3, 2, 40)
