"""Two worker processes on one task queue share 20 concurrent runs: every run completes, and Temporal's
history shows that both workers ran activities."""

from __future__ import annotations

import asyncio
import collections
import subprocess
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.store.schema import checkpoints

pytestmark = pytest.mark.postgres

RUNS = 20


async def activity_workers(client: Client, run_id: str) -> collections.Counter[str]:
    """Activities of the run per worker identity, as Temporal recorded them."""
    seen: collections.Counter[str] = collections.Counter()
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            seen[event.activity_task_started_event_attributes.identity] += 1
    return seen


async def test_two_workers_share_twenty_concurrent_runs(client: Client, engine: AsyncEngine, settings: Settings):
    # One embedded Qdrant shard per process: a shard has one owner (a Qdrant server has no such limit).
    envs = [
        settings.child_environment(
            WAYPOINT_AGENTS="tests.agents", WAYPOINT_QDRANT_PATH=str(settings.state_dir / f"qdrant-{i}")
        )
        for i in range(2)
    ]
    workers: list[subprocess.Popen[str]] = []
    try:
        for env in envs:
            workers.append(await asyncio.to_thread(spawn_worker, env))
        wp = Waypoint(client, engine, settings)
        started = time.monotonic()
        run_ids = await asyncio.gather(*(wp.start_run(f"add #{i}", agent="calculator") for i in range(RUNS)))
        results = await asyncio.wait_for(asyncio.gather(*(wp.result(r) for r in run_ids)), 180)
        elapsed = time.monotonic() - started
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)

    assert [(r.status, r.output) for r in results] == [("completed", "The answer is 15.")] * RUNS
    async with engine.connect() as conn:
        recorded = await conn.scalar(select(func.count()).where(checkpoints.c.run_id.in_(run_ids)))
    assert recorded == RUNS * 4  # steps 0..3 of every run, each once

    per_worker: collections.Counter[str] = collections.Counter()
    for counts in await asyncio.gather(*(activity_workers(client, r) for r in run_ids)):
        per_worker.update(counts)
    # The SDK's default identity is `pid@host`: map each to the process that ran it.
    by_pid = {int(identity.split("@", 1)[0]): n for identity, n in per_worker.items()}
    assert set(by_pid) == {proc.pid for proc in workers}, per_worker
    assert all(n > 0 for n in by_pid.values())
    print(f"\n{RUNS} runs on 2 workers in {elapsed:.1f} s; activities per worker: {sorted(by_pid.values())}")
