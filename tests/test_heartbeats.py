"""What lets a dead worker's activity be noticed fast and a fresh worker's first call keep its heartbeat:
heartbeats a quarter of the timeout apart and never more than a second; one beat per activity, whose
details are its latest progress; the worker's sticky queue timeout; every configured provider's SDK
loaded when the worker is built."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from waypoint import retry
from waypoint.activities import boundary
from waypoint.activities.boundary import heartbeating
from waypoint.activities.model import ModelActivities
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.config import Settings
from waypoint.models.spec import configured_providers, has_extra
from waypoint.names import Provider
from waypoint.store import RunStore


def test_heartbeat_pace_is_a_quarter_of_the_timeout_and_at_most_a_second() -> None:
    assert retry.heartbeat_every(timedelta(seconds=2)) == 0.5
    assert retry.heartbeat_every(timedelta(seconds=1)) == 0.25
    assert retry.heartbeat_every(timedelta(seconds=30)) == retry.HEARTBEAT_MAX_GAP == 1.0
    assert retry.heartbeat_every(None) == 1.0


class Beats:
    """An activity's heartbeats, each with its details, and the pauses its beat loop asked for. The
    loop's `asyncio.sleep` is made instant (it yields once), so the pacing is read from what it asked
    for, not from a wall clock a busy machine stretches."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.details: list[tuple[Any, ...]] = []
        self.pauses: list[float] = []
        real = asyncio.sleep

        async def sleep(delay: float, result: Any = None) -> Any:
            if delay:
                self.pauses.append(delay)
            return await real(0, result)

        monkeypatch.setattr(boundary.asyncio, "sleep", sleep)

    def run(self, timeout: timedelta | None, body: Any) -> None:
        env = ActivityEnvironment()
        env.info = replace(env.info, heartbeat_timeout=timeout)
        env.on_heartbeat = lambda *details: self.details.append(details)
        asyncio.run(env.run(body))

    async def until(self, count: int) -> None:
        """Yield to the beat loop until it has sent `count` beats in all."""
        while len(self.details) < count:
            await asyncio.sleep(0)


@pytest.mark.parametrize(("timeout", "gap"), [(timedelta(seconds=2), 0.5), (timedelta(minutes=5), 1.0), (None, 1.0)])
def test_an_activity_beats_at_its_pace(timeout: timedelta | None, gap: float, monkeypatch: pytest.MonkeyPatch) -> None:
    beats = Beats(monkeypatch)

    async def body() -> None:
        async with heartbeating("step-1"):
            await beats.until(5)

    beats.run(timeout, body)
    # The first beat at once, then one after each pause of the pace: never a longer silence.
    assert len(beats.details) == 5 and set(beats.pauses) == {gap} and len(beats.pauses) >= 4
    assert set(beats.details) == {("step-1",)}


def test_a_block_inside_another_adds_no_beat_and_the_details_are_the_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    progress: dict[str, Any] = {"key": "run:1:0", "mcp_task": None}
    beats = Beats(monkeypatch)
    sent: list[Any] = []

    async def body() -> None:
        async with heartbeating(progress):
            await beats.until(2)
            async with heartbeating("run:1:0"):  # a ledger read inside the tool call's beat
                await beats.until(4)
            progress["mcp_task"] = "task-7"
            await beats.until(5)
            sent.extend(dict(d[0]) for d in beats.details[-1:])

    beats.run(timedelta(seconds=2), body)
    assert all(details == (progress,) for details in beats.details)  # the outer beat only: one loop
    assert len(beats.pauses) == len(beats.details) - 1 or len(beats.pauses) == len(beats.details)  # one loop's pauses
    assert sent == [{"key": "run:1:0", "mcp_task": "task-7"}]  # the details as they are at each beat


async def test_the_worker_hands_its_sticky_queue_over_fast(
    client: Client, engine: AsyncEngine, settings: Settings
) -> None:
    worker = build_worker(client, engine, settings, AgentRegistry([]))
    assert worker.config()["sticky_queue_schedule_to_start_timeout"] == retry.STICKY_QUEUE_TIMEOUT
    assert retry.STICKY_QUEUE_TIMEOUT <= timedelta(seconds=1)


@pytest.mark.skipif(not has_extra(Provider.ANTHROPIC), reason="needs the anthropic extra")
def test_warm_loads_every_configured_provider(
    engine: AsyncEngine, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No agent names Anthropic, but its key is set: a run's own `--model anthropic:...` may call it,
    so its SDK client is made when the worker is built, not inside that run's first call."""
    assert configured_providers(settings) == [Provider.OPENAI]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert configured_providers(settings) == [Provider.OPENAI, Provider.ANTHROPIC]
    models = ModelActivities(RunStore(engine), AgentRegistry([]), settings)
    models.warm()
    assert models._openai is not None
    assert [key[0] for key in models._clients] == [Provider.ANTHROPIC]
    assert {Provider.OPENAI, Provider.ANTHROPIC} <= models._warmed
