"""MCP tool calls survive a SIGKILLed worker process: a plain call runs again once, keyed by the
same idempotency key (so the server applies its effect once); a long-running MCP task is polled
again by the next worker instead of being started again."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import eventually
from tests.mcp_agents import alive, lines, serving_http
from tests.processes import kill
from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.store.schema import tool_effects

pytestmark = pytest.mark.postgres


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "mcp"


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(15)


def worker_env(settings: Settings, folder: Path, url: str = "") -> dict[str, str]:
    return settings.child_environment(
        WAYPOINT_AGENTS="tests.mcp_agents", WAYPOINT_MEMORY="false", MCP_TEST_DIR=str(folder), MCP_TEST_HTTP_URL=url
    )


async def ledger_row(engine: AsyncEngine, key: str):
    async with engine.connect() as conn:
        return (await conn.execute(select(tool_effects).where(tool_effects.c.idempotency_key == key))).one()


@pytest.mark.timeout(240)
async def test_sigkill_mid_call_reruns_it_once_with_the_same_idempotency_key(
    client: Client, engine: AsyncEngine, settings: Settings, folder: Path, workers: list[subprocess.Popen[str]]
):
    env = worker_env(settings, folder)
    workers.append(await asyncio.to_thread(spawn_worker, env))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("record a line", agent="mcp_crashy")
    await eventually(lambda: asyncio.to_thread((folder / "record-running-one").exists), timeout=60, what="the call")
    kill(workers[-1])  # mid-call: the server applied the effect, the worker never heard back
    workers.append(await asyncio.to_thread(spawn_worker, env))
    result = await asyncio.wait_for(wp.result(run_id), 120)

    assert (result.status, result.output) == ("completed", "tool said: recorded one")
    key = f"{run_id}:1:0"
    calls = [c for c in lines(folder, "calls") if c["tool"] == "record"]
    assert [c["key"] for c in calls] == [key, key]  # one re-execution, with the same key...
    assert calls[0]["pid"] != calls[1]["pid"]  # ...on the new worker's own server process
    assert [e["key"] for e in lines(folder, "effects")] == [key]  # ...and the effect applied once
    row = await ledger_row(engine, key)
    assert (row.outcome, row.attempt) == ("ok", 2)

    for proc in workers:  # a worker that stops gracefully stops its stdio servers
        proc.terminate()
        await asyncio.to_thread(proc.wait, 15)
    await eventually(
        lambda: asyncio.to_thread(lambda: not any(alive(s["pid"]) for s in lines(folder, "started"))),
        timeout=20,
        what="every stdio server gone (the killed worker's exits when its stdin closes)",
    )


@pytest.mark.timeout(240)
async def test_a_long_running_task_is_polled_again_after_a_worker_kill_not_started_again(
    client: Client, engine: AsyncEngine, settings: Settings, folder: Path, workers: list[subprocess.Popen[str]]
):
    with serving_http(folder) as (url, _):
        env = worker_env(settings, folder, url)
        workers.append(await asyncio.to_thread(spawn_worker, env))
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("write the report", agent="mcp_tasker")
        # The task id rides the next heartbeat, which Temporal's client sends within 0.8 x the 2 s
        # heartbeat timeout: kill after that, mid-task.
        await eventually(
            lambda: asyncio.to_thread(lambda: len(lines(folder, "polls")) >= 10), timeout=60, what="2 s of polling"
        )
        kill(workers[-1])  # the 5-second task goes on in the server; nobody polls it
        polls_before = len(lines(folder, "polls"))
        workers.append(await asyncio.to_thread(spawn_worker, env))
        result = await asyncio.wait_for(wp.result(run_id), 120)

    assert (result.status, result.output) == ("completed", "tool said: report on q3: all good")
    tasks = lines(folder, "tasks")
    assert [t["key"] for t in tasks] == [f"{run_id}:1:0"]  # created once, by the first worker
    polls = lines(folder, "polls")
    assert len(polls) > polls_before and {p["task"] for p in polls} == {tasks[0]["task"]}  # the same task, resumed
    row = await ledger_row(engine, f"{run_id}:1:0")
    assert (row.outcome, row.attempt) == ("ok", 2)
