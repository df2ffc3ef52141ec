"""A worker process SIGKILLed in the middle of a tool call, then of a model call: the run completes,
its steps are contiguous, and each tool call's side effect happened exactly once; its SSE stream
resumes across both kills. The first kill also lands while a fan-out run's eight sub-agent runs are
all in a tool call (one killed worker proves both). A SIGKILL during a streaming model call (one
provider for real, each provider's own part in-process); a SIGTERM that lets the running tool finish."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import FANOUT, FANOUT_ATTEMPTS, FANOUT_LOG
from tests.conftest import ApiServer
from tests.helpers import eventually, log_seqs, read_stream
from tests.processes import kill, wait_for, worker_env
from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import child_run_id, idempotency_key
from waypoint.store.schema import checkpoints, events, runs, tool_effects
from waypoint.types import RunResult

# Each test starts worker processes (two or three): under CPU load one took over 100 s of its default 180.
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


async def test_sigkill_during_a_tool_and_during_a_model_call(
    client: Client, engine: AsyncEngine, settings: Settings, api: ApiServer
):
    """The same two kills also show the run's SSE stream resumed with Last-Event-ID across each
    (tests/test_http_stream.py): one client reads the run's first event, drops, and comes
    back after each kill; every event reaches it once, in order, exactly the log.

    The first kill also lands while a fan-out tree's eight sub-agent runs are all in a tool call
    (`fan_lead` calls `fan_child` 8 times in one turn): on the new worker each child run exists
    once and completes, the lead gets every answer at its call, and no tool's effect happened
    twice anywhere in the tree (`fan_tree_came_through`). One killed worker, one re-dispatch wait,
    for both runs; the tree is done before the second kill, which is the crashy run's alone."""
    workspace = settings.resolved_workspace
    # The calls to kill in are held (tests/agents.py) until the kill: it lands in them however late it comes.
    # Step 2's tool is held too: the crashy run waits there, after the first kill, until the tree is done.
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "hold-tool-1-attempt-1").touch()
    held_step_2 = workspace / "hold-tool-2-attempt-1"
    held_step_2.touch()
    held_model = workspace / "hold-model-3"
    held_model.touch()
    attempts_log = workspace / FANOUT_ATTEMPTS

    async def all_in_their_tool() -> bool:
        lines = attempts_log.read_text().splitlines() if attempts_log.exists() else []
        return sum(line.endswith(" attempt 1") for line in lines) == FANOUT

    env = worker_env(settings)
    workers = [await asyncio.to_thread(spawn_worker, env)]
    try:
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("append three lines", agent="crashy")
        lead_id = await wp.start_run("hand out the parts", agent="fan_lead")
        # The run's first event, then the client leaves (a step's events are written once its tools are done).
        first = await read_stream(api, run_id, until=lambda e: e.event == "run_started")

        await wait_for(workspace / "tool-started-1-attempt-1")
        await eventually(all_in_their_tool, what="8 children in their tool")
        # Mid-tool: the crashy run's line is written, its call not finished; each child's line is
        # written, none of the 8 calls finished; no stream client connected.
        kill(workers[-1])
        workers.append(await asyncio.to_thread(spawn_worker, env))
        second = await read_stream(api, run_id, last_id=first[-1].id, until=lambda e: e.data["step"] >= 1)
        lead = await asyncio.wait_for(wp.result(lead_id), 60)

        held_step_2.unlink()
        await wait_for(workspace / "model-started-3")
        kill(workers[-1])  # mid-model-call of step 3
        held_model.unlink()  # the call made again answers
        workers.append(await asyncio.to_thread(spawn_worker, env))

        third = await read_stream(api, run_id, last_id=second[-1].id)  # to the end
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

    # The stream, resumed across both kills: gapless, none twice, exactly the log, to the run's end.
    received = [e for e in first + second + third if e.id is not None]
    ids = [int(e.id) for e in received]
    assert ids == list(range(1, len(ids) + 1))
    assert ids == await log_seqs(engine, run_id)
    assert [e.data["seq"] for e in received] == ids and all(e.event == e.data["kind"] for e in received)
    assert received[-1].event == "run_finished" and received[-1].data["payload"]["status"] == "completed"

    await fan_tree_came_through(client, engine, workspace, lead_id, lead)


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


async def fan_tree_came_through(
    client: Client, engine: AsyncEngine, workspace: Path, run_id: str, result: RunResult
) -> None:
    """A fan_lead run whose 8 children were all in their fan_line call when the worker died: each
    child run exists once and completes, the lead gets every answer at its call, and no tool's
    effect happened twice anywhere in the tree."""
    attempts_log = workspace / FANOUT_ATTEMPTS
    children = [child_run_id(run_id, 1, i) for i in range(FANOUT)]
    keys = [idempotency_key(child, 1, 0) for child in children]  # each child's fan_line call
    assert result.status == "completed", result
    # the effects: one line per call, for exactly these calls; each call was cut off and ran again
    lines = (workspace / FANOUT_LOG).read_text().splitlines()
    assert sorted(lines) == sorted(f"{key} part {i}" for i, key in enumerate(keys))
    attempts = attempts_log.read_text().splitlines()
    assert sorted(attempts) == sorted(f"{key} attempt {n}" for key in keys for n in (1, 2))

    async with engine.connect() as conn:
        tree = {r.run_id: r for r in await conn.execute(select(runs).where(runs.c.root_run_id == run_id))}
        ledger = (await conn.execute(select(tool_effects).where(tool_effects.c.run_id.in_([run_id, *children])))).all()
        seqs = (await conn.execute(select(events.c.run_id, events.c.seq).where(events.c.run_id.in_(children)))).all()
        saved = (await conn.execute(select(checkpoints.c.run_id, checkpoints.c.step))).all()
        responses = (
            await conn.execute(
                select(events.c.run_id, events.c.step).where(
                    events.c.run_id.in_(children), events.c.kind == "model_response"
                )
            )
        ).all()
    assert set(tree) == {run_id, *children}  # each child once, under its derived id
    answers = sorted((r for r in ledger if r.run_id == run_id), key=lambda r: (r.step, r.call_index))
    assert [(r.step, r.call_index, r.tool, r.outcome) for r in answers] == [
        (1, i, "fan_child", "ok") for i in range(FANOUT)
    ]
    for i, (child, answer) in enumerate(zip(children, answers, strict=True)):
        row = tree[child]
        assert (row.status, row.steps, row.agent) == ("completed", 3, "fan_child")
        assert (row.caller_run_id, row.caller_step, row.caller_call_index) == (run_id, 1, i)
        assert row.output == f"part {i} is done (42)" == answer.output  # its answer, at its call
        assert sorted(s for r, s in saved if r == child) == [0, 1, 2, 3]
        assert sorted(step for r, step in responses if r == child) == [1, 2, 3]  # no step recorded twice
        seq = sorted(s for r, s in seqs if r == child)
        assert seq == list(range(1, len(seq) + 1))
        calls = sorted((r.step, r.call_index, r.tool, r.attempt) for r in ledger if r.run_id == child)
        assert calls == [(1, 0, "fan_line", 2), (2, 0, "add", 1)]  # the ledger row of the attempt that ran again
    assert result.output == " | ".join(f"part {i} is done (42)" for i in range(FANOUT))
    assert sorted(s for r, s in saved if r == run_id) == [0, 1, 2]

    # Temporal: one execution per child id, and none under any other id below the lead
    async def executions(query: str) -> list[str]:
        return [w.id async for w in client.list_workflows(query)]

    for child in children:
        found = await eventually(lambda: executions(f"WorkflowId = '{child}'"), what=f"{child} listed")  # noqa: B023
        assert found == [child]
    below = await executions(f"WorkflowId STARTS_WITH '{run_id}.'")
    assert sorted(below) == sorted(children)


async def test_sigkill_during_a_streaming_call(client: Client, engine: AsyncEngine, settings: Settings):
    """A worker killed while Claude's answer streams in (the fake, through its official SDK in a
    worker process): a new worker calls the model again, the run completes, and step 2 is recorded
    once, with the answer of the call that finished. One provider is enough for the kill: what it
    proves (the call made again, the step recorded once) is the activity's, the same for every
    adapter (they fill in one template, waypoint/models/_base.py); what is each provider's own, a
    stream cut off mid-answer and the same request made again, answered whole, is shown for each
    by the test after this one, in-process."""
    from waypoint.testing.fake_anthropic import FakeAnthropic
    from waypoint.testing.fake_openai import Turn

    answers = 0

    def respond(body: dict, n: int) -> Turn:
        # By what the request holds, not its number: under load the first call may be made twice.
        nonlocal answers
        text = json.dumps(body)
        if not any(mark in text for mark in ("tool_result", "functionResponse", "function_response")):
            return Turn(tool_calls=[("add", {"a": 2, "b": 3})])
        answers += 1
        # The first request with the tool's result streams slowly (the worker dies in it); a retry answers at once.
        return Turn(content="The answer is 5 after all.", chunk_delay=1.0 if answers == 1 else 0.0)

    fake = FakeAnthropic(respond).start()
    env = worker_env(settings) | {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "fake"}
    model = "anthropic:claude-haiku-4-5"
    workers = [await asyncio.to_thread(spawn_worker, env)]
    try:
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("add 2 and 3", agent="calculator", model=model)

        # Once the request with the tool's result is in, its answer streams: the first chunk at once,
        # the rest 1 s apart. (The worker's deltas would tell its first words, but a busy machine may
        # drop them: they are best effort.)
        async def slow_answer_begun() -> bool:
            return answers >= 1

        await eventually(slow_answer_begun, timeout=120, what="step 2's answer streaming")
        kill(workers[-1])
        workers.append(await asyncio.to_thread(spawn_worker, env))
        result = await asyncio.wait_for(wp.result(run_id), 120)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)
        fake.stop()

    assert (result.status, result.steps, result.output) == ("completed", 2, "The answer is 5 after all."), result
    # The killed call was made again. Under a loaded machine a retry may itself miss a 2 s heartbeat
    # and be made once more: what must hold is below, that step 2 is recorded once.
    assert len(fake.seen) >= 3
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(events.c.step, events.c.kind).where(events.c.run_id == run_id).order_by(events.c.seq)
            )
        ).all()
        steps = list((await conn.execute(select(checkpoints.c.step).where(checkpoints.c.run_id == run_id))).scalars())
    assert [s for s, k in rows if k == "model_response"] == [1, 2]  # no step recorded twice
    assert sorted(steps) == [0, 1, 2]
    assert (await wp.effects(run_id))[0].output == "5"


class FirstPiece:
    """A delta sink that tells when the first piece of a streamed answer has arrived."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.arrived = asyncio.Event()

    def text(self, piece: str) -> None:
        self.pieces.append(piece)
        self.arrived.set()

    def tool_call(self, index: int, call_id: str | None, name: str | None, arguments: str) -> None:
        self.arrived.set()


@pytest.mark.parametrize("provider", ["anthropic", "google"])
async def test_a_streaming_call_cut_off_mid_answer_is_made_again_whole(provider: str, monkeypatch: pytest.MonkeyPatch):
    """Each provider's part of the kill above, in-process against its fake server through its SDK:
    a call cut off while its answer streams (the task cancelled after the first piece, as the kill
    cuts the process) returns nothing partial, and the call a new worker makes (a new SDK client)
    sends the same request and gets the whole answer."""
    from waypoint.models import anthropic as claude
    from waypoint.models import google as gemini
    from waypoint.testing.fake_anthropic import FakeAnthropic
    from waypoint.testing.fake_gemini import FakeGemini
    from waypoint.testing.fake_openai import Turn

    answer = "The answer is 5 after all."

    def respond(body: dict, n: int) -> Turn:
        # The first request streams slowly (it is cut off in it, right after its first piece); the next
        # answers at once. A quarter second apart leaves over a second of stream after the first piece
        # (the check below fails if the cut came too late), and the fake's stop, which waits for the
        # cut-off answer's thread to play it out, a few seconds at most.
        return Turn(content=answer, chunk_delay=0.25 if n == 1 else 0.0)

    fake = (FakeAnthropic(respond) if provider == "anthropic" else FakeGemini(respond)).start()
    try:
        if provider == "anthropic":
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "fake")
            make, model = claude.make_adapter, "claude-haiku-4-5"
        else:
            monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.base_url)
            monkeypatch.setenv("GEMINI_API_KEY", "fake")
            make, model = gemini.make_adapter, "gemini-2.5-flash"
        messages = [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "add 2 and 3"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call-1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call-1", "name": "add", "content": "5"},
        ]
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "Add two numbers.",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "required": ["a", "b"],
                    },
                },
            }
        ]
        killed = make(Settings(), model, None, {})  # the worker that dies
        first = FirstPiece()
        call = asyncio.create_task(killed.complete(messages, tools, step=2, deltas=first))
        await asyncio.wait_for(first.arrived.wait(), 30)
        call.cancel()  # mid-stream: the rest of the answer is still to come
        with pytest.raises(asyncio.CancelledError):
            await call
        assert "".join(first.pieces) != answer  # it really was cut off before the end

        again = make(Settings(), model, None, {})  # the new worker's own client
        turn = await asyncio.wait_for(again.complete(messages, tools, step=2, attempt=2), 30)
    finally:
        fake.stop()
    assert (turn.content, turn.tool_calls) == (answer, [])
    assert len(fake.seen) == 2 and fake.seen[0].body == fake.seen[1].body  # the same request, made again
