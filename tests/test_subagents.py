"""Sub-agents on the real stack: child runs started by tool calls, checked row by row in Postgres."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import eventually, one_line_error, research_run, waypoint
from tests.ports import reserve_port
from tests.run_history import done_while_paused
from waypoint import Agent, ScriptedModel, ScriptedTurn, tool
from waypoint.activities.checkpoints import CheckpointActivities
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.demo_research import RESEARCH_TASK, research
from waypoint.errors import Conflict, NotFound
from waypoint.names import EventKind, RunStatus, child_run_id
from waypoint.store import RunStore
from waypoint.store.schema import events, runs, tool_effects
from waypoint.types import Budget, ParentRef, StartRunInput

pytestmark = pytest.mark.postgres


async def test_research_demo_fans_out_to_three_children_and_writes_the_report(
    client: Client, engine: AsyncEngine, settings: Settings
):
    wp, run_id = await research_run(client, engine, settings)
    result = await wp.result(run_id)
    assert result.output.startswith("3 sub-agents read the notes at once")
    report = (settings.resolved_workspace / "research.md").read_text()
    assert "notes/durability.txt (" in report and "Sources: 3 notes." in report

    async with engine.connect() as conn:
        rows = (
            (await conn.execute(select(runs).where(runs.c.root_run_id == run_id).order_by(runs.c.run_id)))
            .mappings()
            .all()
        )
        query = select(tool_effects).where(tool_effects.c.run_id == run_id).order_by("step", "call_index")
        ledger = (await conn.execute(query)).mappings().all()
    by_id = {r["run_id"]: r for r in rows}
    readers = [child_run_id(run_id, 1, i) for i in range(3)]
    writer = child_run_id(run_id, 2, 0)
    assert set(by_id) == {run_id, *readers, writer}
    for i, child in enumerate(readers):
        row = by_id[child]
        assert (row["caller_run_id"], row["caller_step"], row["caller_call_index"]) == (run_id, 1, i)
        assert row["agent"] == "note_reader" and row["status"] == "completed" and row["steps"] == 3
    assert by_id[run_id]["caller_run_id"] is None
    # each child's answer is the call's result in the parent's ledger
    assert [(e["step"], e["tool"], e["outcome"]) for e in ledger] == [
        (1, "note_reader", "ok"),
        (1, "note_reader", "ok"),
        (1, "note_reader", "ok"),
        (2, "report_writer", "ok"),
    ]
    assert ledger[0]["output"] == by_id[readers[0]]["output"]


README = (Path(__file__).parent.parent / "README.md").read_text()


def test_the_research_demo_runs_as_the_quick_start_shows(tmp_path: Path):
    """The quick start's sub-agents command, typed in a shell on a fresh folder: the tree it prints has
    one line per run, each with its run id, and the report is written."""
    quick = README.split("## Quick start", 1)[1].split("A lead agent that hands work to sub-agents", 1)[1]
    command = quick.split("```bash\n", 1)[1].split("```", 1)[0].strip()
    assert command == "waypoint demo --agent research"
    env = Settings(temporal_address=f"localhost:{reserve_port()}").child_environment(
        COLUMNS="200", WAYPOINT_API_PORT=str(reserve_port())
    )
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split("started ", 1)[1].split(":", 1)[0].strip()
    tree_lines = [line for line in done.stdout.splitlines() if f"{run_id}." in line and "completed" in line]
    children = [line.split()[1] for line in tree_lines if line.strip().startswith("└")]
    assert children == [f"{run_id}.1.0", f"{run_id}.1.1", f"{run_id}.1.2", f"{run_id}.2.0"], done.stdout
    assert "5 runs" in done.stdout
    report = (tmp_path / ".waypoint" / "workspace" / "research.md").read_text()
    assert report.count("- notes/") == 3


# --- lifecycle: approvals, pause, cancel, the CLI ------------------------------------------------------


@tool(requires_approval=True)
def launch(target: str) -> str:
    """Launch something (a human must approve)."""
    return f"launched {target}"


@tool
async def slow_step(n: int) -> str:
    """Work for a while."""
    await asyncio.sleep(0.4)
    return f"worked {n}"


gated_child = Agent(
    name="gated_child",
    description="Launches what it is told to, once a human approves.",
    instructions="Launch the target with launch, then say so.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("launch", {"target": "probe"})]), ScriptedTurn(content="launched")]),
    tools=(launch,),
    memory=False,
)
slow_child = Agent(
    name="slow_child",
    description="Works slowly, step by step.",
    instructions="Work.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("slow_step", {"n": i})]) for i in range(30)]),
    tools=(slow_step,),
    max_steps=30,
    memory=False,
)
lead = Agent(
    name="lifecycle_lead",
    instructions="Hand the work to your sub-agents.",
    model=ScriptedModel(
        [
            lambda messages: ScriptedTurn(tool_calls=[(str(messages[1]["content"]), {"task": "go"})] * 2),
            lambda messages: ScriptedTurn(
                content="children said: " + " | ".join(str(m["content"]) for m in messages if m["role"] == "tool")
            ),
        ]
    ),
    agents=(gated_child, slow_child),
    memory=False,
)


@pytest.fixture
async def lifecycle(client: Client, engine: AsyncEngine, settings: Settings):
    async with build_worker(client, engine, settings, AgentRegistry([lead])):
        yield Waypoint(client, engine, settings)


async def status_of(wp: Waypoint, run_id: str) -> str:
    return (await wp.run(run_id)).status


async def test_a_childs_approval_shows_on_its_caller_and_approve_on_the_callers_id_reaches_it(lifecycle, engine):
    wp = lifecycle
    run_id = await wp.start_run("gated_child", agent="lifecycle_lead")
    children = [child_run_id(run_id, 1, 0), child_run_id(run_id, 1, 1)]
    await eventually(
        lambda: all_of(wp, children, RunStatus.WAITING_APPROVAL), what="both children waiting for approval"
    )
    assert await status_of(wp, run_id) == RunStatus.WAITING_APPROVAL  # mirrored on the caller
    async with engine.connect() as conn:
        details = await conn.scalars(
            select(events.c.payload).where(events.c.run_id == run_id, events.c.kind == EventKind.STATUS_CHANGED)
        )
        waiting = [p["waiting_run_id"] for p in details if p.get("waiting_run_id")]
    assert waiting and waiting[0] in children
    with pytest.raises(Conflict, match="2 runs below .* wait for approval"):
        await wp.approve(run_id)  # two wait: name one
    await wp.approve(children[0])
    await eventually(lambda: all_of(wp, children[:1], RunStatus.COMPLETED), what="the first child completing")
    assert await status_of(wp, run_id) == RunStatus.WAITING_APPROVAL  # the other still waits
    await wp.deny(run_id, reason="not this one")  # one waits now: the caller's id reaches it
    result = await wp.result(run_id)
    assert result.status == RunStatus.COMPLETED
    assert result.output == "children said: launched | launched"  # the denied child answered after the denial
    effects = await wp.effects(children[1])
    assert [(e.tool, e.outcome) for e in effects] == []  # the denied call never ran
    assert [(e.tool, e.outcome) for e in await wp.effects(children[0])] == [("launch", "ok")]


async def all_of(wp: Waypoint, run_ids: list[str], status: RunStatus) -> bool:
    for run_id in run_ids:
        try:
            if await status_of(wp, run_id) != status:
                return False
        except NotFound:
            return False
    return True


async def test_pause_and_resume_reach_the_children_and_cancel_ends_them(lifecycle):
    wp = lifecycle
    run_id = await wp.start_run("slow_child", agent="lifecycle_lead")
    children = [child_run_id(run_id, 1, 0), child_run_id(run_id, 1, 1)]
    await eventually(lambda: all_of(wp, children, RunStatus.RUNNING), what="both children running")
    await wp.pause(run_id)
    await eventually(lambda: all_of(wp, children, RunStatus.PAUSED), what="both children paused")
    # The caller waits on a tree that holds still: it is paused too, not `running` (issue 41), on its
    # row and in its live state, though the step it paused in has not ended.
    await eventually(lambda: all_of(wp, [run_id], RunStatus.PAUSED), what="the caller paused with its children")
    assert (await wp.progress(run_id)).status == RunStatus.PAUSED and (await wp.run(run_id)).steps == 0
    paused_at = [(await wp.run(c)).steps for c in children]
    await wp.resume(run_id)
    assert [await done_while_paused(wp.client, c) for c in children] == [[], []]  # no step while paused
    assert await done_while_paused(wp.client, run_id) == []  # the caller wrote its pause, then held still
    await eventually(lambda: all_of(wp, [run_id], RunStatus.RUNNING), what="the caller running again")
    await eventually(lambda: all_of(wp, children, RunStatus.RUNNING), what="both children running again")
    await eventually(
        lambda: steps_past(wp, children, paused_at), what="the children making steps again after the resume"
    )
    await wp.cancel(run_id, "enough")
    result = await wp.result(run_id)
    assert result.status == RunStatus.CANCELLED and result.error == "enough"
    # The parent asked its children to cancel at once and waited for their ends: each recorded its own.
    for child in children:
        row = await wp.run(child)
        assert row.status == RunStatus.CANCELLED, row
        assert row.error == f"its caller {run_id} was cancelled: enough"


async def test_a_caller_paused_over_children_waiting_for_approval_shows_their_wait_again_when_resumed(lifecycle):
    """Issue 41: a caller whose children wait for a human shows `paused` once paused, and their wait,
    not `running`, once resumed. The children, paused while they waited, are resumed with it: once
    approved, they finish."""
    wp = lifecycle
    run_id = await wp.start_run("gated_child", agent="lifecycle_lead")
    children = [child_run_id(run_id, 1, 0), child_run_id(run_id, 1, 1)]
    tree = [run_id, *children]
    await eventually(lambda: all_of(wp, tree, RunStatus.WAITING_APPROVAL), what="the tree waiting for approval")
    await wp.pause(run_id)
    await eventually(lambda: all_of(wp, [run_id], RunStatus.PAUSED), what="the caller paused")
    assert await all_of(wp, children, RunStatus.WAITING_APPROVAL)  # a human is still asked
    await wp.resume(run_id)
    await eventually(
        lambda: all_of(wp, [run_id], RunStatus.WAITING_APPROVAL), what="the caller showing its children's wait again"
    )
    for child in children:
        await wp.approve(child)
    await eventually(lambda: all_of(wp, children, RunStatus.COMPLETED), what="the approved children finishing")
    result = await wp.result(run_id)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "children said: launched | launched")


async def steps_past(wp: Waypoint, run_ids: list[str], before: list[int]) -> bool:
    now = [(await wp.run(r)).steps for r in run_ids]
    return all(n > b for n, b in zip(now, before, strict=True))


async def test_tree_on_the_cli_prints_a_line_per_run_and_refuses_an_unknown_id(
    client: Client, engine: AsyncEngine, settings: Settings
):
    _, run_id = await research_run(client, engine, settings)
    done = await waypoint(settings, "tree", run_id, "--json")
    assert done.code == 0, done.err
    tree = json.loads(done.out)
    rows = {r["run_id"]: r for r in tree["nodes"]}
    assert list(rows) == [run_id, *(child_run_id(run_id, 1, i) for i in range(3)), child_run_id(run_id, 2, 0)]
    assert [r["depth"] for r in tree["nodes"]] == [0, 1, 1, 1, 1]
    assert tree["totals"]["runs"] == 5 and tree["totals"]["steps"] == sum(r["steps"] for r in tree["nodes"])
    assert rows[child_run_id(run_id, 2, 0)]["caller_step"] == 2
    text = await waypoint(settings, "tree", run_id)
    assert sum(1 for line in text.out.splitlines() if f"{run_id}." in line) == 4
    status = await waypoint(settings, "status", child_run_id(run_id, 1, 2))
    assert "started by" in status.out and f"{run_id} (step 1, call 2)" in status.out
    listed = [r["run_id"] for r in json.loads((await waypoint(settings, "runs", "--roots", "--json")).out)]
    assert run_id in listed and not any(r.startswith(f"{run_id}.") for r in listed)
    error = one_line_error(await waypoint(settings, "tree", "no-such-run"))
    assert "no run 'no-such-run'" in error


def test_caps_and_budgets_a_sub_agent_run_is_planned_with(monkeypatch: pytest.MonkeyPatch):
    """The settings cap a run's sub-agents at once (per tenant where set); a sub-agent run's budget is
    the smaller of its caller's remainder and its agent's own."""
    monkeypatch.setenv("WAYPOINT_MAX_PARALLEL_AGENTS", "5")
    monkeypatch.setenv("WAYPOINT_TENANT_PARALLEL_AGENTS", '{"acme": 2}')
    capped = replace(research, max_tokens=900, max_parallel_agents=8)
    acts = CheckpointActivities(RunStore(create_engine_stub()), AgentRegistry([capped]), settings=Settings())
    start = StartRunInput("r", "acme", "research", "t", None, Budget())
    assert acts.plan(start).max_parallel_agents == 2
    assert acts.plan(replace(start, tenant_id="other")).max_parallel_agents == 5
    assert acts.plan(start).agents == ["note_reader", "report_writer"] and acts.plan(start).depth == 0
    as_child = replace(
        start, budget=Budget(max_tokens=400, deadline_seconds=30), parent=ParentRef("p", 1, 0, "p", depth=2)
    )
    plan = acts.plan(as_child)
    assert (plan.max_tokens, plan.deadline_seconds, plan.depth) == (400, 30, 2)
    assert acts.plan(replace(as_child, budget=Budget(max_tokens=5000))).max_tokens == 900  # its agent's is smaller
    assert acts.plan(replace(start, budget=Budget(max_tokens=5000))).max_tokens == 5000  # a root's own replaces it


def create_engine_stub():  # the plan reads no row
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none")


async def test_a_sub_agent_runs_last_step_reaches_memory_with_the_next_compaction_pass(
    client: Client, engine: AsyncEngine, settings: Settings
):
    """Its caller waits for its end, so a sub-agent run does not store its last step on the way out
    (one remote activity less between its answer and its caller); the compaction pass stores it."""
    from waypoint.app.worker import build_memory_worker
    from waypoint.gateway.schedule import compact_now
    from waypoint.memory import open_store

    seed_workspace(settings.resolved_workspace)
    agents = AgentRegistry([research])
    store = open_store(settings)
    try:
        async with (
            build_worker(client, engine, settings, agents, memory=True),
            build_memory_worker(client, engine, settings, agents, store),
        ):
            wp = Waypoint(client, engine, settings.model_copy(update={"memory": True}))
            run_id = await wp.start_run(RESEARCH_TASK, agent="research")
            assert (await wp.result(run_id)).status == "completed"
            children = (await wp.tree(run_id)).nodes[1:]
            assert [(n.run.remembered_step, n.run.steps) for n in children] == [(2, 3), (2, 3), (2, 3), (1, 2)]
            assert (await wp.run(run_id)).remembered_step == 3  # a root stores its last step itself
            report = await compact_now(client, settings, tenant_id=settings.tenant)
            assert report.memory_error is None
            for node in children:
                assert (await wp.run(node.run.run_id)).remembered_step == node.run.steps
                episodes = await store.list_run(settings.tenant, node.run.run_id)
                assert node.run.steps in {e.step for e in episodes if e.kind == "step"}
    finally:
        await store.close()
