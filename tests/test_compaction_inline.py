"""Inline compaction: a run whose working memory passes its threshold compacts itself right away,
with the same activity the Schedule uses, and its next steps see the summary, not the old turns."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.client import Waypoint
from waypoint.compaction import SUMMARY_HEADER
from waypoint.store.compactions import latest_compaction
from waypoint.store.schema import compactions, events

pytestmark = pytest.mark.postgres


async def test_a_run_over_its_budget_compacts_inline(memory_worker, engine: AsyncEngine):
    wp, store = memory_worker
    run_id = await wp.start_run("Read the report.", agent="compactor")
    result = await wp.result(run_id)
    assert (result.status, result.steps) == ("completed", 12), result.error

    async with engine.connect() as conn:
        n = await conn.scalar(select(func.count()).select_from(compactions).where(compactions.c.run_id == run_id))
        newest = await latest_compaction(conn, run_id)
        logged = await conn.scalar(select(func.count()).select_from(events).where(events.c.run_id == run_id))
    assert n >= 1 and newest is not None
    assert newest["tokens_after"] < newest["tokens_before"]
    # the last model call saw the newest summary in place of the turns it covers
    system = json.loads(result.output)
    assert system[0] == "Read the report page by page."
    assert newest["summary"] in system and newest["summary"].startswith(SUMMARY_HEADER)
    # the log itself is untouched: every step's events are still there, and the chain verifies
    assert logged >= 1 + 12 * 2
    assert (await wp.verify(run_id)).ok
    # the summary became a high-importance episode in long-term memory
    summaries = [e for e in await store.list_run(wp.settings.tenant, run_id) if e.kind == "summary"]
    assert summaries and summaries[-1].importance >= 0.8


async def test_inline_compaction_is_off_at_compact_at_one(client, engine: AsyncEngine, settings, agents, worker):
    from dataclasses import replace

    from waypoint.agents import AgentRegistry
    from waypoint.app.worker import build_worker

    lazy = replace(agents.get("compactor"), name="lazy-compactor", compact_at=1.0)
    settings = settings.model_copy(update={"task_queue": settings.task_queue + "-lazy"})
    async with build_worker(client, engine, settings, AgentRegistry([lazy])):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("Read the report.", agent="lazy-compactor")
        assert (await wp.result(run_id)).status == "completed"
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is None
