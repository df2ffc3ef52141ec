"""A 200-step run: it continues as new four times, keeps one run id, contiguous checkpoints,
a bounded history per execution and a bounded checkpoint size. (It was 1,000 steps, 130 s, then
400; the property needs several continue-as-new boundaries and a working memory full long before
the end, not the length, and the workflow's own logic at a boundary is tested in
tests/test_workflow_logic.py.)"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import MARATHON_STEPS
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.store.schema import checkpoints

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(600)]


async def test_200_steps_across_continue_as_new(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("go the distance", agent="marathon")
    result = await wp.result(run_id)
    assert (result.status, result.steps, result.output) == ("completed", MARATHON_STEPS, "done")

    async with engine.connect() as conn:
        steps = await conn.execute(
            select(func.count(), func.min(checkpoints.c.step), func.max(checkpoints.c.step)).where(
                checkpoints.c.run_id == run_id
            )
        )
        sizes = await conn.execute(
            select(checkpoints.c.step, func.pg_column_size(checkpoints.c.state))
            .where(checkpoints.c.run_id == run_id, checkpoints.c.step.in_([50, MARATHON_STEPS]))
            .order_by(checkpoints.c.step)
        )
        size_by_step = dict(sizes.all())
    # contiguous: one row per step from 0 to the last
    assert tuple(steps.one()) == (MARATHON_STEPS + 1, 0, MARATHON_STEPS)
    # the working memory stays bounded by its token budget (full by step 50), not by run length
    assert size_by_step[MARATHON_STEPS] < 2 * size_by_step[50]

    executions = [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]
    # continue_as_new_every=40 gives 5 executions
    assert len(executions) == 5
    for execution in executions:
        history = await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
        assert len(history.events) < 6_000
        assert sum(e.ByteSize() for e in history.events) < 2_000_000  # far below Temporal's 50 MB
