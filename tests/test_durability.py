"""Retries, the tool ledger, budgets and claim checks, on the real stack and a real socket."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from tests.agents import EFFECTS
from tests.helpers import eventually, run_events
from waypoint.activities.tools import INLINE_OUTPUT_CHARS, ToolActivities
from waypoint.agents import AgentRegistry
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import InvalidInput, NotFound
from waypoint.store import RunStore
from waypoint.store.schema import checkpoints, runs, tool_effects
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn
from waypoint.types import Budget, RunToolInput, ToolCall

pytestmark = pytest.mark.postgres


async def checkpoint_steps(engine: AsyncEngine, run_id: str) -> list[int]:
    async with engine.connect() as conn:
        query = select(checkpoints.c.step).where(checkpoints.c.run_id == run_id).order_by(checkpoints.c.step)
        return list((await conn.execute(query)).scalars())


async def test_503_three_times_then_200_completes_with_every_attempt_recorded(
    client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI
):
    busy = Reply(503, {"error": {"message": "overloaded", "type": "server_error"}}, {"retry-after-ms": "50"})
    fake_openai.answer(busy, busy, busy, Turn(content="made it"))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote")
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "made it")
    assert len(fake_openai.seen) == 4
    failed = await run_events(engine, run_id, "model_attempt_failed")
    assert [(f["attempt"], f["status"], f["retryable"]) for f in failed] == [
        (1, 503, True),
        (2, 503, True),
        (3, 503, True),
    ]
    assert all(f["retry_in_seconds"] == pytest.approx(0.05) for f in failed)
    (response,) = await run_events(engine, run_id, "model_response")
    assert response["attempt"] == 4


async def test_429_retry_after_is_honoured(client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI):
    limited = Reply(429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after": "2"})
    fake_openai.answer(limited, Turn(content="ok"))
    wp = Waypoint(client, engine, settings)
    result = await wp.result(await wp.start_run("hi", agent="remote"))
    assert result.status == "completed"
    first, second = fake_openai.seen
    assert second.at - first.at >= 2.0


async def test_401_is_recorded_and_not_retried(client: Client, engine, settings: Settings, worker, fake_openai):
    fake_openai.answer(Reply(401, {"error": {"message": "bad key", "type": "invalid_request_error"}}))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote")
    result = await wp.result(run_id, tenant_id=settings.tenant)
    assert result.status == "failed" and "HTTP 401" in result.error and "bad key" in result.error
    assert len(fake_openai.seen) == 1
    (failed,) = await run_events(engine, run_id, "model_attempt_failed")
    assert (failed["status"], failed["retryable"]) == (401, False)


async def test_repeated_bad_tool_calls_end_the_run_after_max_repairs(client: Client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("go", agent="stubborn")
    result = await wp.result(run_id, tenant_id=settings.tenant)
    assert result.status == "failed" and result.steps == 3  # max_repairs=2: the third bad step ends it
    assert "invalid tool calls 3 steps in a row" in result.error and "no tool 'teleport'" in result.error
    assert await checkpoint_steps(engine, run_id) == [0, 1, 2, 3]


async def test_a_hanging_tool_times_out_is_retried_and_fails_cleanly(client: Client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("go", agent="hanger")
    result = await wp.result(run_id)
    assert result.status == "completed"
    assert "failed after 2 attempt(s)" in result.output and "timeout" in result.output.lower()
    (tool_result,) = await run_events(engine, run_id, "tool_result")
    assert tool_result["outcome"] == "failed" and tool_result["is_error"]


@pytest.mark.parametrize(
    ("budget", "prices", "reason", "least_steps"),
    [
        (Budget(max_tokens=300), {}, "token budget reached", 1),
        (Budget(max_cost_usd=0.01), {"scripted": (10.0, 10.0)}, "cost budget reached", 1),
        # A tiny budget reads as itself, never "$0.0000 of $0.0000"; its pool refuses the first call,
        # which would cost more than the whole budget, before it goes out.
        (Budget(max_cost_usd=0.00001), {"scripted": (0.1, 0.1)}, "$0 of $0.00001 used", 0),
        (Budget(deadline_seconds=1.0), {}, "deadline reached", 1),
    ],
    ids=["tokens", "cost", "tiny-cost", "deadline"],
)
async def test_each_budget_stops_the_run_cleanly(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry, budget, prices, reason, least_steps
):
    from waypoint.app.worker import build_worker

    settings = settings.model_copy(update={"prices": prices})
    async with build_worker(client, engine, settings, agents):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("loop", agent="listener", budget=budget)
        result = await wp.result(run_id)
    assert result.status == "budget_exceeded"
    assert reason in result.error
    assert least_steps <= result.steps < 200
    assert await checkpoint_steps(engine, run_id) == list(range(result.steps + 1))  # the final checkpoint is there
    (finished,) = await run_events(engine, run_id, "run_finished")
    assert finished["status"] == "budget_exceeded" and reason in finished["error"]


async def test_the_ledger_returns_a_recorded_call_without_running_the_tool_again(
    engine: AsyncEngine, agents: AgentRegistry, settings: Settings, client, worker
):
    EFFECTS.clear()
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add", agent="calculator", max_steps=1)
    await wp.result(run_id)
    assert len(EFFECTS) == 1  # step 1 ran `note` once
    # A retried attempt of the same call (same run, step, index) finds it in the ledger.
    acts = ToolActivities(RunStore(engine), agents, settings)
    call = ToolCall(id="call_1_1", name="note", arguments='{"text": "adding"}')
    inp = RunToolInput(run_id=run_id, tenant_id=settings.tenant, agent="calculator", step=1, call_index=1, call=call)
    again = await ActivityEnvironment().run(acts.run_tool, inp)
    assert again.from_ledger and again.output == "noted 'adding'"
    assert len(EFFECTS) == 1
    async with engine.connect() as conn:
        rows = (await conn.execute(select(tool_effects).where(tool_effects.c.run_id == run_id))).all()
    assert sorted(r.idempotency_key for r in rows) == [f"{run_id}:1:0", f"{run_id}:1:1"]


async def test_run_tool_takes_the_source_of_recorded_tools_from_its_input(
    engine: AsyncEngine, agents: AgentRegistry, settings: Settings, client, worker
):
    """The workflow names the run whose ledger answers a rerun's calls: run_tool does not read the
    run's origin (here the run is no rerun at all, and the input alone decides); an input from
    before it carried one still looks the origin up."""
    EFFECTS.clear()
    wp = Waypoint(client, engine, settings)
    source = await wp.start_run("add", agent="calculator", max_steps=1)  # step 1, call 1: note("adding")
    other = await wp.start_run("double it", agent="quick")  # step 1 has one call: position 1 is free
    await wp.result(source)
    await wp.result(other)
    acts = ToolActivities(RunStore(engine), agents, settings)
    call = ToolCall(id="call_x", name="note", arguments='{"text": "adding"}')
    at = {"run_id": other, "tenant_id": settings.tenant, "agent": "calculator", "step": 1, "call": call}
    inp = RunToolInput(**at, call_index=1, recorded_from=source, origin_known=True)
    answered = await ActivityEnvironment().run(acts.run_tool, inp)
    assert (answered.outcome, answered.output) == ("ok", "noted 'adding'")
    assert EFFECTS == [f"{source}:1:1=adding"]  # answered from the source's ledger: the tool did not run
    before = RunToolInput(**at, call_index=2)  # from an older history: the origin is looked up (none)
    assert (await ActivityEnvironment().run(acts.run_tool, before)).output == "noted 'adding'"
    assert EFFECTS == [f"{source}:1:1=adding", f"{other}:1:2=adding"]


async def test_large_outputs_stay_out_of_history(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hoard", agent="hoarder")
    result = await wp.result(run_id)
    assert (result.status, result.steps) == ("max_steps", 10)
    history = await client.get_workflow_handle(run_id).fetch_history()
    # What counts toward Temporal's 50 MB limit: the events' protobuf size.
    per_step = sum(e.ByteSize() for e in history.events) / result.steps
    print(f"history bytes per step with 100 KB tool outputs: {per_step:.0f}")
    assert per_step <= 16_000, f"{per_step:.0f} history bytes per step"
    # ...but the model got every byte: the checkpoint references the event that holds the output
    state = await wp.state(run_id, 1)
    assert len(state.messages[-1]["content"]) == 100_000
    # ...stored once: in the ledger, while each event holds its hash and length (issue: twice before)
    outputs = await run_events(engine, run_id, "tool_result")
    assert all("output" not in o and o["output_ref"]["chars"] == 100_000 and o["stored"] for o in outputs)
    shown = [e.payload for e in await wp.events(run_id, kinds=["tool_result"])]
    assert all(len(p["output"]) == 100_000 for p in shown)  # reads put it back in place
    async with engine.connect() as conn:
        ledger = await conn.scalar(
            select(func.sum(func.length(tool_effects.c.output))).where(tool_effects.c.run_id == run_id)
        )
    assert ledger == 100_000 * len(outputs)
    assert INLINE_OUTPUT_CHARS < 100_000
    # the window stays within its token budget: old 100 KB outputs leave it; and a checkpoint
    # holds references, so its size does not depend on what the messages contain
    async with engine.connect() as conn:
        last = await conn.scalar(
            select(checkpoints.c.state).where(checkpoints.c.run_id == run_id, checkpoints.c.step == 10)
        )
        status = await conn.scalar(select(runs.c.status).where(runs.c.run_id == run_id))
    assert status == "max_steps"
    assert last["dropped_steps"] > 0 and len(str(last)) < 1_000


async def test_unknown_run_messages_name_the_problem(client: Client, engine, settings: Settings):
    wp = Waypoint(client, engine, settings)
    with pytest.raises(NotFound, match="no run 'run-nope'"):
        await wp.pause("run-nope")
    with pytest.raises(InvalidInput, match="max tokens must be positive"):
        await wp.start_run("x", budget=Budget(max_tokens=0))
    # what the store cannot hold is refused before anything starts or is asked
    with pytest.raises(InvalidInput, match="lone surrogate"):
        await wp.start_run("\udb0c_")
    with pytest.raises(InvalidInput, match="at most 315360000"):
        await wp.start_run("x", budget=Budget(deadline_seconds=1e12))
    with pytest.raises(InvalidInput, match="NUL"):
        await wp.runs(text="a\x00b")
    with pytest.raises(InvalidInput, match="after_seq"):
        await wp.events("run-nope", after_seq=3_000_000_000)
    # an empty message is refused by the client itself, before any run is asked (every surface)
    with pytest.raises(InvalidInput, match="the message is empty"):
        await wp.send("run-nope", "  ")


async def test_a_200_that_is_not_a_completion_is_retried_then_fails_naming_what_came_back(
    client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI
):
    html = Reply(200, "<html><body>502 Bad Gateway (proxy)</body></html>", {"content-type": "text/html"})
    truncated = Reply(200, '{"id": "x", "choices": [{"message": {"role": "assis')
    empty = Reply(200, {"id": "x", "object": "chat.completion", "model": "m", "choices": []})
    fake_openai.answer(html, Turn(content="recovered"))
    wp = Waypoint(client, engine, settings)
    first = await wp.result(await wp.start_run("hi", agent="remote"))
    assert (first.status, first.output) == ("completed", "recovered")

    fake_openai.answer(html, truncated, empty)
    run_id = await wp.start_run("hi", agent="remote")
    result = await wp.result(run_id)
    assert result.status == "failed"
    assert f"{fake_openai.base_url}/chat/completions answered HTTP 200 with something that is not" in result.error
    assert "choices" in result.error  # what came back, quoted
    failed = await run_events(engine, run_id, "model_attempt_failed")
    assert [(f["attempt"], f["type"], f["retryable"]) for f in failed] == [
        (1, "MalformedAnswer", True),
        (2, "MalformedAnswer", True),
        (3, "MalformedAnswer", False),
    ]
    assert "502 Bad Gateway (proxy)" in failed[0]["error"]


async def test_cancel_stops_a_step_stuck_in_model_retries(
    client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI
):
    # The model server is down for 30 s: the step's model call waits for its next attempt. A cancel
    # ends the run now, not after the outage: the call is cancelled, the step gets no checkpoint and
    # a `step_cancelled` event says what was stopped.
    down = Reply(503, {"error": {"message": "down for maintenance", "type": "server_error"}}, {"retry-after": "30"})
    fake_openai.responder = lambda body, n: down if n == 1 else Turn(content="too late")
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote")
    await eventually(lambda: run_events(engine, run_id, "model_attempt_failed"), what="a failed model attempt")
    await wp.cancel(run_id, "the provider is down")
    result = await wp.result(run_id)
    assert (result.status, result.error) == ("cancelled", "the provider is down")
    assert len(fake_openai.seen) == 1  # it ended while the model was still down
    (stopped,) = await run_events(engine, run_id, "step_cancelled")
    assert (stopped["step"], stopped["activity"]) == (1, "call_model")
    assert await checkpoint_steps(engine, run_id) == [0]
