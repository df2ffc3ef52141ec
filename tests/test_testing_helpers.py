"""`waypoint.testing`, the helpers users test their agents with: the embedded stack in one call, the fake
providers, and an agent's run in the time-skipping environment with scripted model answers."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import waypoint.testing
from waypoint import Agent, Budget, ScriptedTurn, ToolError, tool
from waypoint.app.embedded import EmbeddedStack, port_is_free
from waypoint.gateway.stack import running_stack
from waypoint.names import RunStatus, ToolOutcome
from waypoint.store.db import create_engine, migrate
from waypoint.testing import (
    FakeAnthropic,
    FakeGemini,
    FakeOpenAI,
    Turn,
    embedded_stack,
    run_scripted,
    stack_settings,
)
from waypoint.testing.capacity import Capacity
from waypoint.testing.fake_server import FakeServer


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def refuse(why: str) -> str:
    """Always refuses."""
    raise ToolError(f"no: {why}")


adder = Agent(name="adder", instructions="Add what you are asked to.", tools=[add, refuse], max_steps=5)


def test_the_helpers_are_public_and_lazy() -> None:
    assert sorted(waypoint.testing.__all__) == [
        "FakeAnthropic",
        "FakeGemini",
        "FakeOpenAI",
        "Reply",
        "ScriptedRun",
        "Turn",
        "embedded_stack",
        "run_scripted",
        "stack_settings",
        "time_skipping",
    ]
    # A fake server alone loads neither the stack nor Temporal.
    code = (
        "import sys, waypoint.testing.fake_openai; "
        "print('temporalio' in sys.modules, 'waypoint.app.embedded' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == [
        "False",
        "False",
    ]


async def test_run_scripted_runs_the_real_workflow_and_the_agents_tools(
    ts: WorkflowEnvironment, tmp_path: Path
) -> None:
    script = [
        ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 3}), ("refuse", {"why": "test"})]),
        lambda messages: ScriptedTurn(content=f"the sum is {messages[-2]['content']}"),
    ]
    run = await run_scripted(adder, "add 2 and 3", script, env=ts, workspace=tmp_path)
    assert run.result.status == RunStatus.COMPLETED, run.result
    assert run.result.output == "the sum is 5"  # the second turn saw the first tool's real output
    assert run.result.steps == 2 and [s.step for s in run.steps] == [1, 2]
    assert run.tool_outputs == ["5", "no: test"]
    assert [r.outcome for r in run.tool_results] == [ToolOutcome.OK, ToolOutcome.TOOL_ERROR]
    assert [c.step for c in run.model_calls] == [1, 2]


async def test_run_scripted_keeps_the_budget_with_a_model_that_never_answers(ts: WorkflowEnvironment) -> None:
    loop = [ScriptedTurn(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(10)]
    run = await run_scripted(adder, "count", loop, env=ts, budget=Budget(max_steps=3))
    assert run.result.steps == 3
    assert run.result.status != RunStatus.COMPLETED, run.result
    assert run.tool_outputs == ["1", "2", "3"]


async def test_run_scripted_skips_a_long_deadline(ts: WorkflowEnvironment) -> None:
    """A week's deadline in the time-skipping environment: the run is stopped by it, in seconds."""
    slow = Agent(name="slow", instructions="wait", tools=[add], max_steps=10_000)
    loop = [ScriptedTurn(tool_calls=[("add", {"a": 1, "b": 1})])] * 3
    run = await run_scripted(
        slow, "wait", loop, env=ts, budget=Budget(deadline_seconds=timedelta(days=7).total_seconds(), max_steps=3)
    )
    assert run.result.steps == 3, run.result


def test_embedded_stack_runs_temporal_postgres_and_gives_its_settings(tmp_path: Path) -> None:
    with embedded_stack(tmp_path / "state") as stack:
        assert stack.info is not None
        assert running_stack(stack.state_dir) == stack.info  # what `waypoint` commands in that folder find
        settings = stack_settings(stack, task_queue="helpers")
        assert settings.temporal_address == stack.info.temporal_address
        assert settings.database_url == stack.info.database_url and settings.task_queue == "helpers"
        assert Path(settings.qdrant_path).parent == stack.state_dir

        info = stack.info

        async def reach() -> str:
            client = await Client.connect(info.temporal_address)
            engine = create_engine(info.database_url)
            await migrate(engine)  # a real PostgreSQL answers
            await engine.dispose()
            return client.namespace

        assert asyncio.run(reach()) == "default"
    assert port_is_free(stack.temporal_port)  # stopped on exit
    assert running_stack(tmp_path / "state") is None
    with pytest.raises(RuntimeError, match="not running"):
        stack_settings(EmbeddedStack(tmp_path / "other"))


@pytest.mark.parametrize("fake_class", [FakeOpenAI, FakeAnthropic, FakeGemini])
def test_the_fake_providers_are_exported_and_serve(fake_class: type[FakeServer]) -> None:
    fake = fake_class().start()
    try:
        assert fake.base_url.startswith("http://127.0.0.1:")
        assert httpx.get(fake.base_url.rstrip("/") + "/nothing-here", timeout=5).status_code == 404
    finally:
        fake.stop()


# Each fake's model route, and where its error body says what went wrong.
MODEL_CALLS = [
    (FakeOpenAI, "/chat/completions", lambda body: body["error"]["type"]),
    (FakeAnthropic, "/v1/messages", lambda body: body["error"]["type"]),
    (FakeGemini, "/v1beta/models/m:generateContent", lambda body: body["error"]["status"]),
]


@pytest.mark.parametrize(("fake_class", "path", "kind"), MODEL_CALLS)
def test_every_fake_takes_bursts_and_a_capacity_from_the_shared_base(
    fake_class: type[FakeServer], path: str, kind: Any
) -> None:
    fake = fake_class(capacity=Capacity(per_minute=1)).start()
    try:
        url = fake.base_url.rstrip("/") + path
        call = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        fake.burst(503, 30.0, retry_after=2)
        stormed = httpx.post(url, json=call, timeout=5)
        fake.burst(503, 0.0)
        fake.answer(Turn(content="after the storm"), Turn(content="never sent"))
        answered = httpx.post(url, json=call, timeout=5)
        refused = httpx.post(url, json=call, timeout=5)

        assert (stormed.status_code, stormed.headers["retry-after"]) == (503, "2")
        assert answered.status_code == 200 and "after the storm" in answered.text
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        # Each answers in its provider's own error body.
        assert {kind(stormed.json()), kind(refused.json())} <= {
            "server_error",
            "requests",
            "overloaded_error",
            "rate_limit_error",
            "UNAVAILABLE",
            "RESOURCE_EXHAUSTED",
        }
        # Neither the storm's answer nor the refusal took a scripted item or entered the request log.
        assert (fake.burst_answers[503], fake.served, fake.refused, len(fake.seen)) == (1, 1, 1, 1)
        assert [type(item) for item in fake.script] == [Turn]
    finally:
        fake.stop()


async def test_the_fake_openai_answers_a_scripted_turn() -> None:
    fake = FakeOpenAI().start()
    fake.answer(Turn(content="hello from the script"))
    try:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="fake", max_retries=0)
        answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "hello from the script"
    finally:
        fake.stop()
