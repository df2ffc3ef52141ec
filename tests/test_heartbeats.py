"""What lets a dead worker's activity be noticed fast and a fresh worker's first call keep its heartbeat:
heartbeats a quarter of the timeout apart and never more than a second; one beat per activity, whose
details are its latest progress; the worker's sticky queue timeout; every configured provider's SDK
loaded when the worker is built."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from waypoint import retry
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


def beats_of(timeout: timedelta | None, body: Any) -> list[tuple[float, tuple[Any, ...]]]:
    """Run `body` as an activity with heartbeat timeout `timeout`; each heartbeat's time and details."""
    env = ActivityEnvironment()
    env.info = replace(env.info, heartbeat_timeout=timeout)
    beats: list[tuple[float, tuple[Any, ...]]] = []
    env.on_heartbeat = lambda *details: beats.append((time.monotonic(), details))
    asyncio.run(env.run(body))
    return beats


@pytest.mark.parametrize(("timeout", "gap"), [(timedelta(seconds=2), 0.5), (timedelta(minutes=5), 1.0), (None, 1.0)])
def test_an_activity_beats_at_its_pace(timeout: timedelta | None, gap: float) -> None:
    async def body() -> None:
        async with heartbeating("step-1"):
            await asyncio.sleep(2.2)

    beats = beats_of(timeout, body)
    times = [at for at, _ in beats]
    # The first at once, then one per gap: never a longer silence than the pace (plus scheduling slack).
    assert len(beats) == int(2.2 / gap) + 1
    assert max(b - a for a, b in zip(times, times[1:], strict=False)) < gap + 0.25
    assert {details for _, details in beats} == {("step-1",)}


def test_a_block_inside_another_adds_no_beat_and_the_details_are_the_latest() -> None:
    progress: dict[str, Any] = {"key": "run:1:0", "mcp_task": None}

    async def body() -> None:
        async with heartbeating(progress):
            async with heartbeating("run:1:0"):  # a ledger read inside the tool call's beat
                await asyncio.sleep(0.6)
            progress["mcp_task"] = "task-7"
            await asyncio.sleep(0.6)

    beats = beats_of(timedelta(seconds=2), body)
    assert len(beats) == 3  # 0, 0.5, 1.0 s: one beat, not two
    assert all(details == (progress,) for _, details in beats)  # the same dict, sent as it is at each beat


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
