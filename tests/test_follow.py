"""`waypoint run --follow` tells what keeps a run from moving (no worker, a worker that cannot decode
the run), keeps waiting, and Ctrl-C stops following, not the run."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.helpers import cli_env, eventually
from waypoint.agents import Agent, AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.testing.fake_openai import FakeOpenAI
from waypoint.types import RetrySpec

# Each test starts the CLI in a process of its own: on a busy machine its start alone took 12 s.
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
# How long a test waits for a line of the CLI: its start, the run's start and its asks to Temporal
# all slow down on a busy machine; a line that never comes fails the test after this, within its limit.
LINE_WAIT = 120


async def start_cli(settings: Settings, *args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "waypoint",
        *args,
        env=env or cli_env(settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=as_in_a_terminal,
    )


def as_in_a_terminal() -> None:
    """Ctrl-C reaches the CLI as it does in a terminal. A suite started in the background by a
    non-interactive shell (`pytest &`, as CI scripts may) runs with SIGINT ignored, and its children
    inherit that: Python then installs no Ctrl-C handler, and the CLI would never see the signal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def line_with(stream: asyncio.StreamReader, text: str, timeout: float = LINE_WAIT) -> str:
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            line = (await stream.readline()).decode()
            assert line, f"the stream ended without {text!r}: {''.join(seen)}"
            seen.append(line)
            if text in line:
                return line


async def test_no_worker_is_named_within_seconds_and_following_goes_on(
    client: Client, engine, settings: Settings, agents: AgentRegistry
):
    async with build_worker(client, engine, settings, agents):
        pass  # registers its agents (the run is checked against them), then stops polling
    proc = await start_cli(settings, "run", "add", "--agent", "calculator", "--follow")
    assert proc.stderr is not None
    warning = await line_with(proc.stderr, "no worker polls task queue")
    assert settings.task_queue in warning and "waypoint worker" in warning and "still waiting" in warning
    async with build_worker(client, engine, settings, agents):  # now one comes: the run goes on
        out, err = await asyncio.wait_for(proc.communicate(), LINE_WAIT)
    assert proc.returncode == 0, err.decode()
    assert "The answer is 15." in out.decode()


async def test_a_worker_that_cannot_decode_the_run_is_named(
    client: Client, engine, settings: Settings, agents: AgentRegistry
):
    key = base64.b64encode(os.urandom(32)).decode()
    encrypted = cli_env(settings, WAYPOINT_CODEC_KEYS=f"k1:{key}")
    async with build_worker(client, engine, settings, agents):  # a worker without the keys
        proc = await start_cli(settings, "run", "add", "--agent", "calculator", "--follow", env=encrypted)
        assert proc.stderr is not None
        warning = await line_with(proc.stderr, "keep failing")
        assert "WAYPOINT_CODEC_KEYS" in warning and "workflow tasks of run" in warning
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), LINE_WAIT)
    assert proc.returncode == 130
    assert "the run goes on" in err.decode() and "--follow" in err.decode() and "Traceback" not in err.decode()
    run_id = warning.split("workflow tasks of run ", 1)[1].split()[0]
    await client.get_workflow_handle(run_id).terminate("test over")


async def test_ctrl_c_stops_following_not_the_run(client: Client, engine, settings: Settings, agents, worker):
    proc = await start_cli(settings, "run", "count", "--agent", "listener", "--follow")
    assert proc.stdout is not None
    started = await line_with(proc.stdout, "started ")
    run_id = started.split("started ", 1)[1].split()[0]
    await line_with(proc.stdout, "step   2")
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), LINE_WAIT)
    assert proc.returncode == 130
    assert f"stopped following {run_id}; the run goes on" in err.decode()
    assert f"waypoint status {run_id} --follow" in err.decode()
    wp = Waypoint(client, engine, settings)
    before = (await wp.run(run_id)).steps
    await eventually(lambda: _steps_past(wp, run_id, before), timeout=60, what="a step after the follower stopped")
    await wp.send(run_id, "stop now")
    assert (await wp.result(run_id)).status == "completed"


async def test_following_wakes_on_the_logs_notifications_not_its_poll(
    client: Client, engine, settings: Settings, agents: AgentRegistry
):
    """Each step shows when it lands: with a poll an hour apart, only the LISTEN on the log's
    channel can bring the steps and the end of the run within the two minutes a busy machine may take."""
    from waypoint.app.follow import follow

    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, agents):
        run_id = await wp.start_run("add 7 and 8", agent="calculator")
        row = await asyncio.wait_for(follow(wp, run_id, poll_seconds=3600), 120)
    assert row.status == "completed" and row.steps >= 2


async def test_a_model_call_that_keeps_failing_is_warned_about_once_not_per_attempt(
    client: Client,
    engine,
    settings: Settings,
    fake_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    """Following in this process, so the test sees each time it asks Temporal what blocks the run:
    once it has been told of the failing call on two different attempts, it has warned once."""
    from waypoint.app.follow import follow
    from waypoint.gateway.temporal import Blocked, TemporalGateway

    told: list[Blocked] = []
    ask = TemporalGateway.blocked

    async def blocked(self: TemporalGateway, run_id: str) -> Blocked | None:
        problem = await ask(self, run_id)
        if problem is not None:
            told.append(problem)
        return problem

    async def told_on_two_attempts() -> bool:
        return len({p.message for p in told if p.what == "activity call_model"}) >= 2  # the attempt is in it

    monkeypatch.setattr(TemporalGateway, "blocked", blocked)
    # The fake has no answer: every attempt gets HTTP 500 and is retried after 0.5 to 1 s (jitter).
    stubborn = Agent(
        name="stubborn",
        instructions="Answer.",
        model="openai:fake-model",
        model_retry=RetrySpec(max_attempts=1000, initial_interval_seconds=1, max_interval_seconds=1),
    )
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, AgentRegistry([stubborn])):
        run_id = await wp.start_run("hello", agent="stubborn")
        following = asyncio.create_task(follow(wp, run_id))
        await eventually(told_on_two_attempts, timeout=120, what="the follower told of two attempts of call_model")
        following.cancel()  # as Ctrl-C does
        with pytest.raises(asyncio.CancelledError):
            await following
        await client.get_workflow_handle(run_id).terminate("test over")
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    about_the_call = [line for line in warnings if f"call_model of run {run_id} is on attempt" in line]
    assert len(about_the_call) == 1, warnings


async def _steps_past(wp: Waypoint, run_id: str, steps: int) -> bool:
    return (await wp.run(run_id)).steps > steps


def test_no_event_is_awaited_through_wait_for_which_drops_a_cancel():
    """Python 3.11's `asyncio.wait_for` returns when its event is set in the same turn as a cancel (a
    Ctrl-C) lands, and the cancel is lost: following went on after Ctrl-C on a busy machine. A wait
    for an event with a deadline is `async with asyncio.timeout(...)`, which keeps the cancel."""

    async def cancelled(use_timeout: bool) -> bool:
        event = asyncio.Event()

        async def waiter() -> None:
            while True:
                with contextlib.suppress(TimeoutError):
                    if use_timeout:
                        async with asyncio.timeout(60):
                            await event.wait()
                    else:
                        await asyncio.wait_for(event.wait(), 60)
                event.clear()

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        event.set()
        task.cancel()  # in the same turn as the set
        for _ in range(5):
            await asyncio.sleep(0)
        done = task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return done

    async def both() -> tuple[bool, bool]:
        return await cancelled(use_timeout=False), await cancelled(use_timeout=True)

    dropped, kept = asyncio.run(both())
    assert kept
    if not dropped:  # this Python drops it: nothing of ours may wait that way
        root = Path(__file__).resolve().parent.parent
        pattern = re.compile(r"wait_for\((?!asyncio\.shield)[^\n]*\.wait\(\)")
        found = [
            f"{path.relative_to(root)}:{n}"
            for folder in ("waypoint", "activities", "workflows")
            for path in (root / folder).rglob("*.py")
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)
        ]
        assert found == [], found
