"""Time travel over trees of runs, on the real stack: `show` names a step's child runs and their
answers, a fork reuses the children before its fork step, a rerun answers sub-agent calls from the
record (or runs them again with --rerun-children), `compare` pairs the children of two trees, and
`verify` covers every run of a tree. The commands run in-process (what they print is theirs), but
for one `verify` in a real process."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.conftest import ApiServer
from tests.helpers import one_line_error, waypoint, waypoint_here
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.demo_research import RESEARCH_TASK, research
from waypoint.names import child_run_id
from waypoint.store.schema import runs

pytestmark = pytest.mark.postgres


@pytest.fixture
async def wp(client: Client, engine: AsyncEngine, settings: Settings) -> AsyncIterator[Waypoint]:
    """A client, with a worker that serves the research demo's agents."""
    seed_workspace(settings.resolved_workspace)
    async with build_worker(client, engine, settings, AgentRegistry([research])):
        yield Waypoint(client, engine, settings)


async def research_run(wp: Waypoint) -> str:
    run_id = await wp.start_run(RESEARCH_TASK, agent="research")
    assert (await wp.result(run_id)).status == "completed"
    return run_id


async def runs_of(engine: AsyncEngine, settings: Settings) -> list[tuple[str, str, str | None]]:
    """(run id, agent, caller) of every run of the test's tenant."""
    query = select(runs.c.run_id, runs.c.agent, runs.c.caller_run_id).where(runs.c.tenant_id == settings.tenant)
    async with engine.connect() as conn:
        return sorted((r.run_id, r.agent, r.caller_run_id) for r in await conn.execute(query.order_by(runs.c.run_id)))


async def show_names_the_children_of_a_step_and_their_answers(
    wp: Waypoint, settings: Settings, api: ApiServer, run_id: str
) -> None:
    readers = [child_run_id(run_id, 1, i) for i in range(3)]
    rows = {r.run_id: r for r in await wp.children(run_id)}

    fan_out = await wp.state(run_id, 1)
    assert [(c.call_index, c.agent, c.child_run_id, c.status) for c in fan_out.children] == [
        (i, "note_reader", readers[i], "completed") for i in range(3)
    ]
    for call in fan_out.children:
        child = rows[call.child_run_id or ""]
        assert call.answer == child.output and call.outcome == "ok" and call.steps == child.steps == 3
        assert call.tokens == child.input_tokens + child.output_tokens > 0
        assert call.answer is not None and call.answer.startswith("notes/")
    writer = (await wp.state(run_id, 2)).children
    assert [(c.agent, c.child_run_id) for c in writer] == [("report_writer", child_run_id(run_id, 2, 0))]
    assert writer[0].answer == rows[child_run_id(run_id, 2, 0)].output
    assert writer[0].answer is not None and writer[0].answer.startswith("Report written")
    assert (await wp.state(run_id, 3)).children == []  # the answer: no sub-agent call

    shown = await waypoint_here(settings, "show", run_id, "--step", "1")
    assert shown.code == 0, shown.err
    assert "sub-agent calls of this step" in shown.out
    for i, child in enumerate(readers):
        assert f"call {i}: note_reader -> run {child} (completed, 3 steps" in shown.out
    assert json.dumps(rows[readers[0]].output)[:60] in shown.out  # the answer itself
    as_json = json.loads((await waypoint_here(settings, "show", run_id, "--step", "2", "--json")).out)
    assert [(c["child_run_id"], c["status"]) for c in as_json["children"]] == [(writer[0].child_run_id, "completed")]

    state = (await api.http.get(f"/v1/runs/{run_id}/steps/1/state")).json()
    assert [(c["child_run_id"], c["answer"]) for c in state["children"]] == [
        (c.child_run_id, c.answer) for c in fan_out.children
    ]


async def test_a_fork_reuses_the_children_before_its_step_and_starts_its_own_after(
    wp: Waypoint, engine: AsyncEngine, settings: Settings
):
    run_id = await research_run(wp)
    before = await runs_of(engine, settings)
    assert len(before) == 5

    at_one = await wp.fork(run_id, 1)
    assert (await wp.result(at_one)).status == "completed"
    started = sorted(set(await runs_of(engine, settings)) - set(before))
    # the three note readers are not run again: only the report writer, under the fork's own id
    assert started == [(at_one, "research", None), (child_run_id(at_one, 2, 0), "report_writer", at_one)]
    writer = await wp.run(child_run_id(at_one, 2, 0))
    assert writer.status == "completed" and writer.root_run_id == at_one
    assert writer.task == (await wp.run(child_run_id(run_id, 2, 0))).task  # the reused answers went into its task
    assert (await wp.result(at_one)).output == (await wp.result(run_id)).output
    # the fork's step 1 is its parent's: show names the parent's children there
    inherited = (await wp.state(at_one, 1)).children
    assert [c.child_run_id for c in inherited] == [child_run_id(run_id, 1, i) for i in range(3)]
    assert [c.caller_run_id for c in inherited] == [run_id] * 3

    before = await runs_of(engine, settings)
    at_two = await wp.fork(run_id, 2)
    assert (await wp.result(at_two)).status == "completed"
    assert sorted(set(await runs_of(engine, settings)) - set(before)) == [(at_two, "research", None)]
    assert await wp.children(at_two) == []
    assert (await wp.result(at_two)).output == (await wp.result(run_id)).output

    # compare pairs the children: those before the fork step are shared, the writer is the fork's own
    found = await wp.compare(run_id, at_one)
    assert [(p.step, p.call_index, p.shared, p.same) for p in found.children] == [
        (1, 0, True, True),
        (1, 1, True, True),
        (1, 2, True, True),
        (2, 0, False, True),
    ]
    last = found.children[-1]
    assert last.a is not None and last.b is not None
    assert (last.a.child_run_id, last.b.child_run_id) == (child_run_id(run_id, 2, 0), child_run_id(at_one, 2, 0))
    assert not found.diverged


async def a_rerun_answers_sub_agent_calls_from_the_record(
    wp: Waypoint, engine: AsyncEngine, settings: Settings, run_id: str
) -> None:
    before = await runs_of(engine, settings)
    rerun = await wp.rerun(run_id)
    result = await wp.result(rerun)
    assert result.status == "completed" and result.output == (await wp.result(run_id)).output
    assert sorted(set(await runs_of(engine, settings)) - set(before)) == [(rerun, "research", None)]  # no child ran
    assert await wp.children(rerun) == []
    answers = {(e.step, e.call_index): e.output for e in await wp.effects(run_id)}
    assert {(e.step, e.call_index): e.output for e in await wp.effects(rerun)} == answers

    calls = (await wp.state(rerun, 1)).children
    assert [(c.child_run_id, c.recorded_from, c.outcome) for c in calls] == [
        (None, child_run_id(run_id, 1, i), "ok") for i in range(3)
    ]
    found = await wp.compare(run_id, rerun)
    assert [(p.step, p.call_index, p.same, p.same_answer) for p in found.children] == [
        (1, 0, True, True),
        (1, 1, True, True),
        (1, 2, True, True),
        (2, 0, True, True),
    ]
    assert all(p.b is not None and p.b.child_run_id is None for p in found.children)
    assert not found.diverged
    verdict = await wp.verify(rerun)  # the recorded answers are the source children's outputs
    assert verdict.ok, verdict


async def test_a_rerun_answers_sub_agent_calls_from_the_record_or_runs_them_again_as_its_own(
    wp: Waypoint, engine: AsyncEngine, settings: Settings, api: ApiServer
):
    """One tree for both reruns (a batch picks originals only: the first rerun is not in it)."""
    run_id = await research_run(wp)
    await a_rerun_answers_sub_agent_calls_from_the_record(wp, engine, settings, run_id)

    started = await waypoint_here(settings, "rerun", run_id, "--rerun-children", "--json")
    assert started.code == 0, started.err
    again = json.loads(started.out)["run_id"]
    assert (await wp.result(again)).output == (await wp.result(run_id)).output
    children = await wp.children(again)
    expected = [child_run_id(again, 1, i) for i in range(3)] + [child_run_id(again, 2, 0)]
    assert [c.run_id for c in children] == expected
    assert [c.agent for c in children] == ["note_reader"] * 3 + ["report_writer"]
    assert all(c.status == "completed" and c.root_run_id == again for c in children)

    posted = await api.http.post(f"/v1/runs/{run_id}/rerun", json={"rerun_children": True})
    assert posted.status_code == 201, posted.text
    by_http = posted.json()["run_id"]
    assert (await wp.result(by_http)).status == "completed"
    assert len(await wp.children(by_http)) == 4
    bad = await api.http.post(f"/v1/runs/{run_id}/rerun", json={"rerun_children": "maybe"})
    assert bad.status_code == 422

    batch = await wp.rerun_batch("agent=research", rerun_children=True)
    (item,) = batch.items
    assert item.source_run_id == run_id and item.status == "completed" and not item.diverged
    assert len(await wp.children(item.run_id or "")) == 4

    # compare pairs each child of the original with the rerun's own, by (step, call index)
    shown = await waypoint_here(settings, "compare", run_id, again, "--json")
    pairs = json.loads(shown.out)["children"]
    calls = [(1, 0), (1, 1), (1, 2), (2, 0)]
    assert [(p["step"], p["call_index"], p["a"]["child_run_id"], p["b"]["child_run_id"]) for p in pairs] == [
        (step, index, child_run_id(run_id, step, index), child_run_id(again, step, index)) for step, index in calls
    ]
    assert all(p["same"] and p["same_answer"] and p["same_status"] and not p["shared"] for p in pairs)
    assert all(p["steps_delta"] == 0 and p["a"]["tokens"] > 0 for p in pairs)
    over_http = (await api.http.get(f"/v1/runs/{run_id}/compare/{again}")).json()
    assert over_http["children"] == pairs and over_http["diverged"] is False
    table = await waypoint_here(settings, "compare", run_id, again)
    assert table.code == 0, table.err
    assert "sub-agent calls" in table.out and child_run_id(again, 2, 0) in table.out
    assert "sub-agent calls: 4 paired, 0 differ" in table.out

    rejected = await waypoint_here(settings, "rerun", "run-nobody", "--rerun-children")
    assert "no run 'run-nobody'" in one_line_error(rejected)


async def test_compare_names_children_on_one_side_and_different_answers(
    wp: Waypoint, engine: AsyncEngine, settings: Settings
):
    run_id = await research_run(wp)
    other = await research_run(wp)
    async with engine.begin() as conn:  # one child's answer, changed in the other tree's ledger
        await conn.execute(
            text("UPDATE tool_effects SET output = 'something else' WHERE idempotency_key = :k"),
            {"k": f"{other}:1:1"},
        )
    found = await wp.compare(run_id, other)
    assert [(p.step, p.call_index, p.same_answer, p.same_status) for p in found.children] == [
        (1, 0, True, True),
        (1, 1, False, True),
        (1, 2, True, True),
        (2, 0, True, True),
    ]
    assert found.diverged and found.first_divergence is None  # the steps agree: a child's answer does not
    assert "+something else" in found.children[1].answer_diff
    table = await waypoint_here(settings, "compare", run_id, other)
    assert "same steps and outcome, different sub-agent calls" in table.out
    assert "sub-agent calls: 4 paired, 1 differ" in table.out and "sub-agent call 1.1 answer" in table.out

    alone = await wp.start_run("Read notes/durability.txt and sum it up.", agent="note_reader")
    assert (await wp.result(alone)).status == "completed"
    found = await wp.compare(run_id, alone)
    assert [(p.step, p.call_index, p.a is not None, p.b is None) for p in found.children] == [
        (1, 0, True, True),
        (1, 1, True, True),
        (1, 2, True, True),
        (2, 0, True, True),
    ]
    assert found.diverged
    table = await waypoint_here(settings, "compare", run_id, alone)
    assert "sub-agent calls: 0 paired, 0 differ, 4 only in a" in table.out, table.out


async def test_show_names_children_and_verify_covers_every_run_of_the_tree(
    wp: Waypoint, engine: AsyncEngine, settings: Settings, api: ApiServer
):
    """One tree for both: `show` reads it first, then `verify` checks it and a changed copy of it."""
    run_id = await research_run(wp)
    await show_names_the_children_of_a_step_and_their_answers(wp, settings, api, run_id)
    verdict = await wp.verify(run_id)
    assert verdict.ok, verdict
    assert [v.run_id for v in verdict.below] == [child_run_id(run_id, 1, i) for i in range(3)] + [
        child_run_id(run_id, 2, 0)
    ]
    assert all(v.events > 0 and v.checkpoints == 4 for v in verdict.below[:3])
    ok = await waypoint_here(settings, "verify", run_id)
    assert ok.code == 0 and "in 5 runs" in ok.out, ok.err

    reader = child_run_id(run_id, 1, 1)
    async with engine.begin() as conn:  # a child's log changed behind the trigger's back
        await conn.execute(text("ALTER TABLE events DISABLE TRIGGER events_append_only"))
        await conn.execute(
            text(
                "UPDATE events SET payload = jsonb_set(payload, '{content}', '\"forged\"') WHERE run_id = :r"
                " AND kind = 'model_response' AND step = 3"
            ),
            {"r": reader},
        )
        await conn.execute(text("ALTER TABLE events ENABLE TRIGGER events_append_only"))
        # and another child's answer, no longer the one its caller's ledger holds
        await conn.execute(
            text("UPDATE runs SET output = 'a different answer' WHERE run_id = :r"), {"r": child_run_id(run_id, 2, 0)}
        )
    verdict = await wp.verify(run_id)
    assert not verdict.ok
    assert [v.run_id for v in verdict.broken] == [run_id, reader]
    assert verdict.problems == [
        f"step 2 call 0 (report_writer): the ledger's answer is not the output of its child run "
        f"{child_run_id(run_id, 2, 0)}"
    ]
    assert "content does not match its hash" in verdict.below[1].problems[0]
    assert (await wp.verify(reader)).problems == verdict.below[1].problems  # a child verifies alone too

    bad = await waypoint(settings, "verify", run_id)  # a real process: its exit code, its one line
    line = one_line_error(bad)
    assert line.startswith(f"error: run {run_id} was changed: step 2 call 0 (report_writer)")
    assert "1 more in 2 run(s)" in line
    as_json = json.loads((await waypoint_here(settings, "verify", run_id, "--json")).out)
    assert as_json["ok"] is False and [v["ok"] for v in as_json["below"]] == [True, False, True, True]
    over_http = (await api.http.get(f"/v1/runs/{run_id}/verify")).json()
    assert over_http["ok"] is False and over_http["problems"] == verdict.problems
    assert [v["problems"] for v in over_http["below"]] == [v.problems for v in verdict.below]
