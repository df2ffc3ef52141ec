"""History, show, diff, events, export, fork and replay: any step, any time."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.changed_workflow import ChangedAgentRunWorkflow
from tests.helpers import one_line_error, waypoint, waypoint_here
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.store.schema import checkpoints

pytestmark = pytest.mark.postgres


async def six_steps(wp: Waypoint) -> str:
    run_id = await wp.start_run("the parent's task", agent="teller")
    assert (await wp.result(run_id)).output == "last user message: the parent's task"
    return run_id


async def test_fork_shares_the_past_and_diverges_after(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    parent = await six_steps(wp)
    async with engine.connect() as conn:
        before = await conn.scalar(select(func.count()).select_from(checkpoints).where(checkpoints.c.run_id == parent))

    fork = await wp.fork(parent, 3, message="blue")
    result = await wp.result(fork)
    assert (result.status, result.steps, result.output) == ("completed", 6, "last user message: blue")

    for step in (0, 1, 2):  # before the fork the fork *is* its parent
        mine, theirs = await wp.state(fork, step), await wp.state(parent, step)
        assert (mine.segments, mine.messages, mine.owner_run_id) == (theirs.segments, theirs.messages, parent)
    at_fork = (await wp.state(fork, 3)).messages
    assert at_fork[:-1] == (await wp.state(parent, 3)).messages
    assert at_fork[-1] == {"role": "user", "content": "blue"}
    assert (await wp.state(fork, 4)).messages != (await wp.state(parent, 4)).messages

    row = await wp.run(fork)
    assert (row.parent_run_id, row.fork_step) == (parent, 3)
    # A fork with a message is that message's run (a thread's next turn): its task is its own input.
    assert (row.task, (await wp.run(parent)).task) == ("blue", "the parent's task")
    async with engine.connect() as conn:  # the parent is untouched
        after = await conn.scalar(select(func.count()).select_from(checkpoints).where(checkpoints.c.run_id == parent))
    assert after == before == 7
    assert (await wp.verify(parent)).ok and (await wp.verify(fork)).ok

    grandchild = await wp.fork(fork, 5, message="green")  # forks of forks
    assert (await wp.result(grandchild)).output == "last user message: green"
    assert [(x.run_id, x.forked_at) for x in await wp.lineage(grandchild)] == [(parent, 3), (fork, 5)]
    assert (await wp.state(grandchild, 1)).owner_run_id == parent

    page = json.loads((await waypoint_here(settings, "history", fork, "--json")).out)
    assert [s["step"] for s in page["steps"]] == [4, 5, 6]
    assert page["lineage"][0] == {"run_id": parent, "forked_at": 3, "relation": "ancestor", "lineage_kind": "fork"}


async def test_history_show_diff_events_export(
    client: Client, engine: AsyncEngine, settings: Settings, worker, tmp_path
):
    """The commands in-process (what they print is theirs); `export` in a real process, as a user runs it."""
    wp = Waypoint(client, engine, settings)
    run_id = await six_steps(wp)

    first = json.loads((await waypoint_here(settings, "history", run_id, "--limit", "4", "--json")).out)
    assert [s["step"] for s in first["steps"]] == [1, 2, 3, 4] and first["next_after_step"] == 4
    rest = json.loads((await waypoint_here(settings, "history", run_id, "--after-step", "4", "--json")).out)
    assert [s["step"] for s in rest["steps"]] == [5, 6] and rest["next_after_step"] is None
    assert rest["steps"][-1]["action"] == "answer" and first["steps"][0]["tools"] == ["add"]

    shown = json.loads((await waypoint_here(settings, "show", run_id, "--step", "2", "--json")).out)
    assert [m["role"] for m in shown["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    assert [e["kind"] for e in shown["events"]] == ["model_response", "tool_result"]

    d = json.loads((await waypoint_here(settings, "diff", run_id, "2", "4", "--json")).out)
    assert [m["role"] for m in d["added"]] == ["assistant", "tool", "assistant", "tool"]
    assert d["dropped"] == [] and d["tokens_b"] > d["tokens_a"]

    listed = json.loads(
        (await waypoint_here(settings, "events", run_id, "--kind", "tool_result", "--since-step", "5", "--json")).out
    )
    assert [(e["step"], e["kind"]) for e in listed] == [(5, "tool_result")]

    target = tmp_path / "run.jsonl"
    done = await waypoint(settings, "export", run_id, "--output", str(target))
    assert done.code == 0, done.err
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines[0]["type"] == "run" and lines[0]["run_id"] == run_id
    assert [e["seq"] for e in lines[1:]] == list(range(1, len(lines)))
    assert lines[-1]["kind"] == "run_finished"


BAD_INPUT = [
    (["show", "{run}", "--step", "x"], "a step is a whole number, got 'x'"),
    (["show", "{run}", "--step", "99"], "has steps 0 to 6: there is no step 99"),
    (["diff", "{run}", "1", "two"], "a step is a whole number, got 'two'"),
    (["fork", "{run}", "--step", "7"], "there is no step 7"),
    (["history", "run-unknown"], "no run 'run-unknown'"),
    (["export", "{run}", "--format", "csv"], "unknown format 'csv'"),
]


async def test_bad_input_is_one_clear_line(client, engine, settings: Settings, worker):
    """One run for every case. The first case in a real process (the line on stderr, exit 1, no
    traceback); the others are what each command decides, so they run in-process."""
    run_id = await six_steps(Waypoint(client, engine, settings))
    for n, (args, message) in enumerate(BAD_INPUT):
        argv = [a.replace("{run}", run_id) for a in args]
        done = await (waypoint if n == 0 else waypoint_here)(settings, *argv)
        assert message in one_line_error(done), argv


async def test_another_tenant_sees_nothing(client: Client, engine: AsyncEngine, settings: Settings, worker):
    run_id = await six_steps(Waypoint(client, engine, settings))
    other = Waypoint(client, engine, settings.model_copy(update={"tenant": "intruder"}))
    for attempt in (
        other.state(run_id, 1),
        other.diff(run_id, 1, 2),
        other.fork(run_id, 1),
        other.verify(run_id),
        other.events(run_id),
        other.timeline(run_id),
        other.replay(run_id),
    ):
        with pytest.raises(NotFound):
            await attempt
    with pytest.raises(NotFound):
        [line async for line in other.export(run_id)]


async def test_replay_reports_an_incompatible_workflow_change(client: Client, engine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await six_steps(wp)
    assert [o.error for o in await wp.replay(run_id)] == [None]
    ok = await waypoint_here(settings, "replay", run_id)
    assert ok.code == 0 and "replay against the current code" in ok.out
    (outcome,) = await wp.replay(run_id, workflows=[ChangedAgentRunWorkflow])
    assert outcome.error is not None and "Nondeterminism" in outcome.error
