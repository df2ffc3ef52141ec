"""Whole runs on the real stack, checked row by row in Postgres."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowFailureError

from tests.agents import EFFECTS
from tests.helpers import rows
from waypoint.app.demo_run import wrote_report
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import DEMO_TASK, seed_workspace
from waypoint.errors import InvalidInput, NotFound, UnknownAgent
from waypoint.names import Workflow
from waypoint.store.hashing import event_hash
from waypoint.store.schema import checkpoints, events, runs
from waypoint.types import Budget, RunInput

pytestmark = pytest.mark.postgres


async def test_demo_run_completes_and_mirrors_every_step(
    client: Client, engine: AsyncEngine, settings: Settings, worker
):
    seed_workspace(settings.resolved_workspace)
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run(DEMO_TASK, agent="demo")
    result = await wp.result(run_id)

    assert result.status == "completed", result
    assert result.steps == 5
    assert "62 words in 3 notes" in result.output
    report = (settings.resolved_workspace / "report.md").read_text()  # the tool's effect is real
    assert "notes/memory.txt | 19" in report
    assert await wrote_report(wp, run_id)

    cps = await rows(engine, checkpoints, run_id, checkpoints.c.step)
    assert [c["step"] for c in cps] == [0, 1, 2, 3, 4, 5]
    # each checkpoint extends the previous one by exactly its step's messages
    # each checkpoint is the previous window plus one segment (references to the step's events)
    for before, after in zip(cps, cps[1:], strict=False):
        assert after["state"]["segments"][:-1] == before["state"]["segments"]
        assert after["state"]["segments"][-1][:3] == [run_id, before["last_event_seq"] + 1, after["last_event_seq"]]
    messages = (await wp.state(run_id, 5)).messages
    assert [m["role"] for m in messages[:4]] == ["system", "user", "assistant", "tool"]
    assert messages[1]["content"] == DEMO_TASK and messages[-1] == {"role": "assistant", "content": result.output}

    evs = await rows(engine, events, run_id, events.c.seq)
    assert [e["seq"] for e in evs] == list(range(1, len(evs) + 1))
    assert sorted({e["step"] for e in evs if e["kind"] == "model_response"}) == [1, 2, 3, 4, 5]
    tool_results = [e for e in evs if e["kind"] == "tool_result"]
    assert [e["payload"]["name"] for e in tool_results] == (
        ["list_files"] + ["read_file"] * 3 + ["word_stats"] * 3 + ["write_file"]
    )
    assert evs[0]["kind"] == "run_started" and evs[-1]["kind"] == "run_finished"
    assert cps[-1]["last_event_seq"] == evs[-2]["seq"]  # step 5's checkpoint covers all but run_finished
    prev = None
    for e in evs:  # the hash chain holds
        assert e["prev_hash"] == prev
        assert e["hash"] == event_hash(
            prev, run_id=run_id, seq=e["seq"], step=e["step"], kind=e["kind"], payload=e["payload"]
        )
        prev = e["hash"]

    run = (await rows(engine, runs, run_id, runs.c.run_id))[0]
    assert run["status"] == "completed" and run["steps"] == 5 and run["tenant_id"] == settings.tenant
    usage = [e["payload"]["usage"] for e in evs if e["kind"] == "model_response"]
    assert run["input_tokens"] == sum(u["input_tokens"] for u in usage) == result.input_tokens > 0
    timeline = await wp.timeline(run_id)
    assert [line.step for line in timeline] == [1, 2, 3, 4, 5]
    assert timeline[1].tools == ["read_file"] * 3 and timeline[-1].action == "answer"


async def test_tool_results_feed_the_next_model_call(client: Client, engine: AsyncEngine, settings: Settings, worker):
    EFFECTS.clear()
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add things", agent="calculator")
    result = await wp.result(run_id)
    assert not await wrote_report(wp, run_id)  # the demo says "report written" only for a run that wrote it
    assert result.status == "completed"
    assert result.output == "The answer is 15."  # 2+3, then +10: each answer came from a real tool result
    assert len(EFFECTS) == 1 and EFFECTS[0].endswith(":1:1=adding")  # idempotency key run:step:index


async def test_run_stops_at_max_steps(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("loop", agent="looper", max_steps=3)
    result = await wp.result(run_id)
    assert (result.status, result.steps) == ("max_steps", 3)
    assert [c["step"] for c in await rows(engine, checkpoints, run_id, checkpoints.c.step)] == [0, 1, 2, 3]
    assert (await wp.run(run_id)).finished_at is not None


async def test_bad_tool_calls_are_told_to_the_model_and_the_run_goes_on(client, engine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("try", agent="clumsy")
    result = await wp.result(run_id)
    assert result.status == "completed" and result.steps == 3
    step1 = [e.payload for e in await wp.events(run_id, kinds=["tool_result"]) if e.step == 1]
    assert all(p["is_error"] for p in step1)
    assert "no tool 'no_such_tool'" in step1[0]["output"]
    assert "invalid arguments for add" in step1[1]["output"] and "a:" in step1[1]["output"]
    messages = (await wp.state(run_id, 1)).messages
    assert messages[-1]["role"] == "tool" and messages[-1]["content"].startswith("error:")


async def test_a_run_that_cannot_start_is_refused_before_it_gets_an_id(
    client: Client, engine: AsyncEngine, settings, worker
):
    wp = Waypoint(client, engine, settings)
    before = len(await wp.runs(limit=100))
    with pytest.raises(UnknownAgent, match=r"unknown agent 'nobody' \(known: .*calculator.*\)"):
        await wp.start_run("hello", agent="nobody")
    with pytest.raises(InvalidInput, match="unknown model spec 'gpt-4'"):
        await wp.start_run("hello", agent="calculator", model="gpt-4")
    with pytest.raises(InvalidInput, match="agent 'remote' has no scripted turns"):
        await wp.start_run("hello", agent="remote", model="scripted")
    with pytest.raises(InvalidInput, match="invalid tenant id ''"):
        await wp.start_run("hello", agent="calculator", tenant_id="")
    assert len(await wp.runs(limit=100)) == before  # nothing started, nothing written


async def test_a_run_whose_start_fails_anyway_gets_a_failed_row(client: Client, engine: AsyncEngine, settings, worker):
    # Started without the client's checks (as another SDK could): the workflow's start fails,
    # and the run it was given an id for is still visible, failed, with the reason.
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await client.start_workflow(
        Workflow.AGENT_RUN,
        RunInput(agent="nobody", task="hello", tenant_id=settings.tenant),
        id=run_id,
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await client.get_workflow_handle(run_id).result()
    assert "could not start: unknown agent 'nobody'" in str(info.value.cause)
    row = await Waypoint(client, engine, settings).run(run_id)
    assert (row.status, row.agent, row.task) == ("failed", "nobody", "hello")
    assert "could not start: unknown agent 'nobody'" in (row.error or "")
    async with engine.connect() as conn:
        kinds = list(await conn.scalars(select(events.c.kind).where(events.c.run_id == run_id)))
    assert kinds == ["run_finished"]


async def test_a_start_that_keeps_failing_ends_failed_with_the_reason_and_can_be_deleted(
    client: Client, engine: AsyncEngine, settings, worker, caplog: pytest.LogCaptureFixture
):
    # A bug in the agent's definition: start_run fails the same way on every attempt. It is tried a
    # few times (one traceback, then a line per attempt) and the run ends failed with the reason. A
    # value Postgres refuses (a budget past its column, started without the client's checks) fails
    # at the first attempt: no retry can heal it.
    wp = Waypoint(client, engine, settings)
    buggy = await wp.start_run("hello", agent="unplannable")
    huge = f"run-{uuid.uuid4().hex[:12]}"
    await client.start_workflow(
        Workflow.AGENT_RUN,
        RunInput(agent="calculator", task="hello", tenant_id=settings.tenant, budget=Budget(max_steps=2**40)),
        id=huge,
        task_queue=settings.task_queue,
    )
    assert (await wp.result(buggy)).status == "failed"
    assert (await wp.result(huge)).status == "failed"
    row = await wp.run(buggy)
    assert "could not start: RuntimeError: the tool table is corrupt (after 3 attempt(s))" in (row.error or "")
    assert "Postgres refused a value" in ((await wp.run(huge)).error or "")
    assert {buggy, huge} <= {r.run_id for r in await wp.runs(status="failed")}
    tracebacks = [r for r in caplog.records if r.exc_info and buggy in r.getMessage()]
    assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
    for run_id in (buggy, huge):
        await wp.delete(run_id)
        with pytest.raises(NotFound):
            await wp.run(run_id)


async def test_a_fork_of_the_demo_from_any_step_completes(client: Client, engine: AsyncEngine, settings, worker):
    """The demo's scripted turns find the tool results they need wherever a fork put them."""
    seed_workspace(settings.resolved_workspace)
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run(DEMO_TASK, agent="demo")
    assert (await wp.result(run_id)).status == "completed"
    forks = [await wp.fork(run_id, step, message="Shorter, please.") for step in range(6)]
    for step, fork_id in enumerate(forks):
        result = await wp.result(fork_id)
        assert result.status == "completed", (step, result)
        assert step == 5 or "Total: 62 words in 3 notes." in (result.output or ""), (step, result)


async def test_a_bug_in_a_script_fails_the_run_without_retrying(client: Client, engine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("go", agent="broken")
    result = await wp.result(run_id, tenant_id=settings.tenant)
    assert result.status == "failed"
    assert "turn 1 (tests.agents._crash) failed on this conversation: 'missing' (KeyError)" in result.error
    assert "KeyError:" not in result.error  # a message, not a Python exception's repr
    history = await client.get_workflow_handle(run_id).fetch_history()
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert max(attempts) == 1


async def test_an_empty_answer_is_not_a_completion(client: Client, engine: AsyncEngine, settings, worker):
    """An answer with neither text nor a tool call is told to the model, which may answer again; a
    model that keeps answering nothing fails the run instead of completing it with no output."""
    wp = Waypoint(client, engine, settings)
    once = await wp.result(await wp.start_run("speak", agent="mute-once"))
    assert (once.status, once.steps) == ("completed", 2)
    assert once.output == "ok: Your last answer was empty. Answer the task in text, or call a tool."
    never = await wp.result(await wp.start_run("speak", agent="mute"))
    assert never.status == "failed" and "answered nothing" in (never.error or "")
    assert never.steps == 3  # max_repairs=2: the third empty answer ends it
