"""Cold starts under load: 10 worker processes, started one after another beside a CPU burner (a
busy loop per core), each serving one step of one run as the first request it makes. The run pauses
after each step; the worker is SIGKILLed while the run waits, a fresh one starts, and the resume
makes the next step's model call that worker's first. No step is lost or recorded twice, each
tool's effect happens once, and the provider sees exactly one request per step: no first call
missed its heartbeat timeout (and was made again) because the worker was still warming up."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import COLD_EFFECTS
from tests.helpers import eventually
from tests.processes import kill, worker_env
from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import EventKind, idempotency_key
from waypoint.store.schema import checkpoints, events, runs, tool_effects
from waypoint.testing.fake_openai import FakeOpenAI, Turn

WORKERS = 10  # and steps: step N is the first request of worker N; the last step answers
# 10 worker starts on a loaded machine, each with a kill, a resume and a step: a minute or two. Ten
# first calls beside the burner found the 2 s heartbeat miss as surely as twenty, at half the cost.
pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(900)]

BURNER = "while True:\n    pass\n"


@pytest.fixture
def cpu_burner() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A Python busy loop per core, for the whole test: every worker starts and serves on a loaded machine."""
    burners = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(os.cpu_count() or 2)]
    yield burners
    for proc in burners:
        proc.kill()
        proc.wait(10)


class HeldProvider:
    """The fake provider's answers: the request of step N is held until the test lets it go (so the
    test can pause the run while its step is in flight), then answered with a `stamp` call, or with
    the final answer at the last step. Every chat request is counted by its step."""

    def __init__(self, steps: int):
        self.steps = steps
        self.requests: list[int] = []  # the step of each chat request, in arrival order
        self.arrived = {n: threading.Event() for n in range(1, steps + 1)}
        self.release = {n: threading.Event() for n in range(1, steps + 1)}

    def __call__(self, body: dict[str, Any], n: int) -> Turn:
        # The step a request is for: one tool result per step taken so far.
        step = 1 + sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")
        self.requests.append(step)
        self.arrived[step].set()
        self.release[step].wait(300)  # in the fake's request thread; the test lets it go
        if step >= self.steps:
            return Turn(content="all steps stamped")
        return Turn(tool_calls=[("stamp", {"step": step})])


async def test_ten_fresh_workers_under_load_each_make_their_first_call_once(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    fake_openai: FakeOpenAI,
    cpu_burner: list[subprocess.Popen[bytes]],
) -> None:
    provider = HeldProvider(WORKERS)
    fake_openai.responder = provider  # the settings' provider: every worker calls it through the openai SDK
    env = worker_env(settings)
    wp = Waypoint(client, engine, settings)
    workers: list[subprocess.Popen[str]] = []
    starts: list[float] = []
    run_id = ""

    async def paused() -> bool:
        async with engine.connect() as conn:
            status = await conn.scalar(select(runs.c.status).where(runs.c.run_id == run_id))
        return status == "paused"

    async def idle() -> bool:
        # The workflow task that showed the pause has completed and no activity is open: the worker
        # killed next holds nothing of the run, so its kill costs no retry.
        history = await client.get_workflow_handle(run_id).fetch_history()
        kinds = [e.WhichOneof("attributes") or "" for e in history.events]
        tasks = [k for k in kinds if k.startswith("workflow_task_")]
        scheduled = kinds.count("activity_task_scheduled_event_attributes")
        closed = sum(
            k.startswith("activity_task_")
            and not k.endswith(("_scheduled_event_attributes", "_started_event_attributes"))
            for k in kinds
        )
        return tasks[-1] == "workflow_task_completed_event_attributes" and scheduled == closed

    try:
        for n in range(1, WORKERS + 1):
            began = time.monotonic()
            workers.append(await asyncio.to_thread(spawn_worker, env, timeout=120))
            starts.append(time.monotonic() - began)
            if n == 1:
                run_id = await wp.start_run("stamp every step", agent="cold_start", model="openai:cold-start")
            else:
                await wp.resume(run_id)  # its workflow task waits out the dead worker's sticky queue
            await asyncio.to_thread(provider.arrived[n].wait, 120)
            assert provider.arrived[n].is_set(), f"step {n}'s model call never reached the provider"
            if n < WORKERS:
                await wp.pause(run_id)  # taken by this worker while the step is in flight
            provider.release[n].set()
            if n < WORKERS:
                await eventually(paused, timeout=120, what=f"the run paused after step {n}")
                await eventually(idle, timeout=60, what=f"the workflow task after step {n}")
                kill(workers[-1])
        result = await asyncio.wait_for(wp.result(run_id), 120)
    finally:
        for event in provider.release.values():
            event.set()  # no request thread of the fake waits past the test
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)
    print(
        f"worker start beside {len(cpu_burner)} busy loop(s), {WORKERS} starts: "
        f"p50 {statistics.median(starts):.2f} s, max {max(starts):.2f} s"
    )

    assert (result.status, result.steps, result.output) == ("completed", WORKERS, "all steps stamped"), result
    # The provider saw each step's request once: no first call was made twice.
    assert provider.requests == list(range(1, WORKERS + 1))
    # Postgres: contiguous steps, each recorded once, no failed (or lost) model attempt.
    async with engine.connect() as conn:
        saved = sorted((await conn.execute(select(checkpoints.c.step).where(checkpoints.c.run_id == run_id))).scalars())
        logged = (
            await conn.execute(
                select(events.c.step, events.c.kind, events.c.payload)
                .where(events.c.run_id == run_id)
                .order_by(events.c.seq)
            )
        ).all()
        ledger = (await conn.execute(select(tool_effects).where(tool_effects.c.run_id == run_id))).all()
    assert saved == list(range(WORKERS + 1))
    assert [s for s, k, _ in logged if k == EventKind.MODEL_RESPONSE] == list(range(1, WORKERS + 1))
    failed = [json.dumps(p) for _, k, p in logged if k == EventKind.MODEL_ATTEMPT_FAILED]
    assert failed == []
    # Each tool call ran once, on its first attempt, and its effect is there once.
    keys = [idempotency_key(run_id, step, 0) for step in range(1, WORKERS)]
    assert sorted((r.idempotency_key, r.attempt) for r in ledger) == sorted((k, 1) for k in keys)
    effects = (settings.resolved_workspace / COLD_EFFECTS).read_text().splitlines()
    assert sorted(effects) == sorted(keys)
    # Temporal: every activity of the run started once (no attempt timed out and was retried).
    history = await client.get_workflow_handle(run_id).fetch_history()
    kinds = [e.WhichOneof("attributes") for e in history.events]
    assert "activity_task_timed_out_event_attributes" not in kinds
    retried = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes") and e.activity_task_started_event_attributes.attempt > 1
    ]
    assert retried == []
