"""A worker process SIGKILLed in the middle of a tool call, then of a model call: the run completes,
its steps are contiguous, and each tool call's side effect happened exactly once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from waypoint.app.client import Waypoint
from waypoint.app.devstack import spawn_worker
from waypoint.config import Settings
from waypoint.store.schema import checkpoints, events, tool_effects

pytestmark = pytest.mark.postgres


def worker_env(settings: Settings) -> dict[str, str]:
    # Every worker opens the same Qdrant shard: a killed process releases its lock.
    return settings.child_environment(WAYPOINT_AGENTS="tests.agents")


async def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.05)


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


async def test_sigkill_during_a_tool_and_during_a_model_call(client: Client, engine: AsyncEngine, settings: Settings):
    workspace = settings.resolved_workspace
    env = worker_env(settings)
    workers = [await asyncio.to_thread(spawn_worker, env)]
    try:
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("append three lines", agent="crashy")

        await wait_for(workspace / "tool-started-1-attempt-1")
        kill(workers[-1])  # mid-tool: the line is written, the call is not finished
        workers.append(await asyncio.to_thread(spawn_worker, env))

        await wait_for(workspace / "model-started-3")
        kill(workers[-1])  # mid-model-call of step 3
        workers.append(await asyncio.to_thread(spawn_worker, env))

        result = await asyncio.wait_for(wp.result(run_id), 120)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)

    assert (result.status, result.steps, result.output) == ("completed", 4, "three lines appended")
    assert (workspace / "tool-started-1-attempt-2").exists()  # the killed call really ran again...
    lines = (workspace / "effects.log").read_text().splitlines()
    assert sorted(line.split()[1] for line in lines) == ["one", "three", "two"]  # ...but its effect is once
    assert len({line.split()[0] for line in lines}) == 3

    async with engine.connect() as conn:
        steps = list((await conn.execute(select(checkpoints.c.step).where(checkpoints.c.run_id == run_id))).scalars())
        ledger = (await conn.execute(select(tool_effects).where(tool_effects.c.run_id == run_id))).all()
        responses = (
            await conn.execute(
                select(events.c.step).where(events.c.run_id == run_id, events.c.kind == "model_response")
            )
        ).scalars()
    assert sorted(steps) == [0, 1, 2, 3, 4]
    assert sorted(list(responses)) == [1, 2, 3, 4]  # no step recorded twice
    assert sorted((r.step, r.call_index, r.tool) for r in ledger) == [
        (1, 0, "slow_effect"),
        (2, 0, "add"),
        (2, 1, "slow_effect"),
        (3, 0, "slow_effect"),
    ]
    attempts = {(r.step, r.call_index): r.attempt for r in ledger}
    assert attempts[(1, 0)] == 2  # the ledger row came from the attempt that finished


async def test_sigterm_lets_the_running_tool_finish(client: Client, engine: AsyncEngine, settings: Settings):
    workspace = settings.resolved_workspace
    env = worker_env(settings)
    first = await asyncio.to_thread(spawn_worker, env)
    second = None
    try:
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("append three lines", agent="crashy")
        await wait_for(workspace / "tool-started-1-attempt-1")
        first.send_signal(signal.SIGTERM)  # graceful: the 3 s tool call is finished, not abandoned
        # The draining worker still holds its Qdrant shard: the newcomer gets its own.
        other = env | {"WAYPOINT_QDRANT_PATH": str(settings.state_dir / "qdrant-2")}
        second = await asyncio.to_thread(spawn_worker, other)
        assert await asyncio.to_thread(first.wait, 30) == 0
        result = await asyncio.wait_for(wp.result(run_id), 120)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(15)
    assert result.status == "completed"
    assert not (workspace / "tool-started-1-attempt-2").exists()  # never retried
    async with engine.connect() as conn:
        attempt = await conn.scalar(
            select(tool_effects.c.attempt).where(tool_effects.c.idempotency_key == f"{run_id}:1:0")
        )
    assert attempt == 1
