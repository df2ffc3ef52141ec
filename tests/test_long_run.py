"""A 1,000-step run: it continues as new several times, keeps one run id, contiguous checkpoints,
a bounded history per execution and a bounded checkpoint size."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from waypoint.app.client import Waypoint
from waypoint.config import Settings
from waypoint.store.schema import checkpoints

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(900)]


async def test_1000_steps_across_continue_as_new(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("go the distance", agent="marathon")
    result = await wp.result(run_id)
    assert (result.status, result.steps, result.output) == ("completed", 1000, "done")

    async with engine.connect() as conn:
        steps = await conn.execute(
            select(func.count(), func.min(checkpoints.c.step), func.max(checkpoints.c.step)).where(
                checkpoints.c.run_id == run_id
            )
        )
        sizes = await conn.execute(
            select(checkpoints.c.step, func.pg_column_size(checkpoints.c.state))
            .where(checkpoints.c.run_id == run_id, checkpoints.c.step.in_([100, 500, 1000]))
            .order_by(checkpoints.c.step)
        )
        size_by_step = dict(sizes.all())
    assert tuple(steps.one()) == (1001, 0, 1000)  # contiguous: 1,001 rows from 0 to 1,000
    # the working memory stays bounded by its token budget, not by run length
    assert size_by_step[1000] < 2 * size_by_step[100]

    executions = [e async for e in client.list_workflows(f"WorkflowId = '{run_id}'")]
    # continue_as_new_every=200 gives at least 5; Temporal suggests it sooner (at 4,096 events here)
    assert len(executions) >= 5
    for execution in executions:
        history = await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
        assert len(history.events) < 6_000
        assert sum(e.ByteSize() for e in history.events) < 2_000_000  # far below Temporal's 50 MB
