"""Fleet flow control with real worker processes: two workers share one model key's limit through
the Postgres limiter, a provider with exactly that capacity never answers 429, waiting runs show
`waiting_capacity` and are woken by signal, and a worker SIGKILLed mid-call gives its slot back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.helpers import HISTORIES, RECORD, eventually
from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import EventKind, RunStatus, Signal
from waypoint.store.schema import capacity_leases, checkpoints, events
from waypoint.testing.capacity import Capacity
from waypoint.testing.fake_openai import FakeOpenAI, Turn

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

RUNS, STEPS = 8, 4  # each run: STEPS tool steps, then its answer


def steps_then_answer(body: dict[str, Any], index: int) -> Turn:
    done = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if done < STEPS:
        return Turn(tool_calls=[("add", {"a": done, "b": 1})])
    return Turn(content=f"added {done} times")


async def signalled(client: Client, run_id: str) -> int:
    count = 0
    async for event in client.get_workflow_handle(run_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            count += event.workflow_execution_signaled_event_attributes.signal_name == Signal.CAPACITY
    return count


async def test_two_workers_share_a_model_limit_and_a_killed_worker_gives_its_slot_back(
    client: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
) -> None:
    fake = FakeOpenAI(responder=steps_then_answer, capacity=Capacity(in_flight=2, per_minute=None, latency=0.3)).start()
    limits = tmp_path / "limits.toml"
    limits.write_text('[models."openai:fake-model"]\nin_flight = 2\n')
    settings = settings.model_copy(update={"openai_base_url": fake.base_url, "limits_file": limits})
    env = settings.child_environment(WAYPOINT_AGENTS="tests.agents", WAYPOINT_LIMIT_LEASE_SECONDS="2")
    workers: list[subprocess.Popen[str]] = []
    wp = Waypoint(client, engine, settings)
    try:
        workers = list(await asyncio.gather(*(asyncio.to_thread(spawn_worker, env) for _ in range(2))))
        run_ids = await asyncio.gather(*(wp.start_run(f"add #{i}", agent="metered") for i in range(RUNS)))
        # Some runs wait for the key: they say so, with the key and their place in line.
        waiting = await eventually(
            lambda: _waiting(wp), timeout=60, what="a run waiting for capacity with its place in line"
        )
        assert waiting.waiting_key == "openai:fake-model" and waiting.waiting_position >= 1
        await eventually(lambda: _served(fake, 12), timeout=60, what="a third of the calls served")
        os.kill(workers[0].pid, signal.SIGKILL)  # its call in flight holds a slot nobody renews now
        results = await asyncio.wait_for(asyncio.gather(*(wp.result(r) for r in run_ids)), 180)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)
        fake.stop()

    assert [r.status for r in results] == [RunStatus.COMPLETED] * RUNS
    # The fleet kept to the provider's capacity, across the kill: not one 429.
    assert fake.refused == 0 and fake.served >= RUNS * (STEPS + 1)
    async with engine.connect() as conn:
        steps = await conn.execute(
            select(checkpoints.c.run_id, func.array_agg(checkpoints.c.step))
            .where(checkpoints.c.run_id.in_(run_ids))
            .group_by(checkpoints.c.run_id)
        )
        for run_id, recorded in steps.all():
            assert sorted(recorded) == list(range(STEPS + 2)), (run_id, recorded)  # contiguous, each once
        waits = await conn.scalar(
            select(func.count()).where(
                events.c.run_id.in_(run_ids),
                events.c.kind == EventKind.STATUS_CHANGED,
                events.c.payload["status"].astext == RunStatus.WAITING_CAPACITY,
            )
        )
        held = await conn.scalar(select(func.count()).where(capacity_leases.c.run_id.in_(run_ids)))
    assert waits > 0 and held == 0  # runs waited in line; none holds a slot after its end
    woken = sum(await asyncio.gather(*(signalled(client, r) for r in run_ids)))
    assert woken > 0  # a freed slot woke its waiter by signal, not only by its timer
    report = await wp.limits.report()
    key = next(k for k in report.keys if k.key == "openai:fake-model")
    assert key.in_flight == 0 and key.requests >= RUNS * (STEPS + 1)
    if RECORD:  # a run that waited in line, for the replay test
        history = await client.get_workflow_handle(run_ids[-1]).fetch_history()
        (HISTORIES / "agent_run_capacity.json").write_text(history.to_json())


async def _waiting(wp: Waypoint) -> Any:
    rows = await wp.runs(status=RunStatus.WAITING_CAPACITY, limit=50)
    return rows[0] if rows and rows[0].waiting_position else None


async def _served(fake: FakeOpenAI, n: int) -> bool:
    return fake.served >= n
