"""Sub-agents on the real stack: child runs started by tool calls, checked row by row in Postgres."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.ports import reserve_port
from waypoint.agents import AgentRegistry
from waypoint.app.client import Waypoint
from waypoint.app.worker import build_worker
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.demo_research import RESEARCH_TASK, research
from waypoint.names import child_run_id
from waypoint.store.schema import runs, tool_effects

pytestmark = pytest.mark.postgres


async def test_research_demo_fans_out_to_three_children_and_writes_the_report(
    client: Client, engine: AsyncEngine, settings: Settings
):
    seed_workspace(settings.resolved_workspace)
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, AgentRegistry([research])):
        run_id = await wp.start_run(RESEARCH_TASK, agent="research")
        result = await wp.result(run_id)
    assert result.status == "completed", result
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
