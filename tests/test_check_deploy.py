"""The deploy gate: `waypoint check-deploy` replays the open and the last finished runs' histories,
fetched from Temporal, against the workflow code installed where it runs.

The incompatible change is made the way a deploy makes it: a copy of the installed `waypoint`
package whose AgentRunWorkflow gained a timer at the top of its step loop without a patch, on the
import path of the process that runs the command.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

import waypoint as installed
from tests.helpers import Done, cli_env, one_line_error, waypoint
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import InvalidInput

pytestmark = pytest.mark.postgres

LOOP = "            while True:\n                stop = stop_reason("


def changed_code(root: Path) -> Path:
    """A copy of the installed package whose agent run sleeps first thing in each step, unguarded."""
    package = root / "waypoint"
    shutil.copytree(Path(installed.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    source = package / "workflows" / "agent_run.py"
    text = source.read_text()
    assert text.count(LOOP) == 1, "the step loop moved: point LOOP at its first line"
    changed = LOOP.replace("while True:\n", "while True:\n                await workflow.sleep(1)\n", 1)
    source.write_text(text.replace(LOOP, changed))
    return root


async def new_code(settings: Settings, code: Path, *args: str) -> Done:
    """`python -m waypoint ARGS` in the folder of `code`, with it first on the import path: `-m` puts
    the working folder ahead of PYTHONPATH, so it must not be a checkout with a `waypoint/` of its own."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "waypoint",
        *args,
        cwd=code,
        env=cli_env(settings, PYTHONPATH=str(code)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return Done(proc.returncode or 0, out.decode(), err.decode())


async def finished_runs(wp: Waypoint, count: int) -> list[str]:
    run_ids = [await wp.start_run(f"task {i}", agent="teller") for i in range(count)]
    for run_id in run_ids:
        assert (await wp.result(run_id)).status == "completed"
    return run_ids


@pytest.mark.timeout(180)
async def test_the_gate_passes_on_the_installed_code(client: Client, engine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    await finished_runs(wp, 3)
    waiting = await wp.start_run("later", agent="teller", after_seconds=3600)  # open: a durable timer

    check = await wp.check_deploy()
    assert check.ok, check.broken
    assert (check.open, check.finished) == (1, 3)
    assert check.workflow_types == [
        "AgentRunWorkflow",
        "CompactionWorkflow",
        "ExperimentWorkflow",
        "MemoryRequestWorkflow",
        "WebhookDeliveryWorkflow",
    ]
    assert (await wp.check_deploy(finished=1)).finished == 1
    assert (await wp.check_deploy(finished=0, since="1h")).histories == 1

    done = await waypoint(settings, "check-deploy")
    assert done.code == 0, done.err
    assert done.out.startswith("ok: 4 histories replay on this code (1 open, 3 finished)"), done.out
    as_json = json.loads((await waypoint(settings, "check-deploy", "--json", "--finished", "2")).out)
    assert (as_json["ok"], as_json["open"], as_json["finished"], as_json["broken"]) == (True, 1, 2, [])
    await wp.cancel(waiting)


@pytest.mark.timeout(180)
async def test_the_gate_catches_an_unpatched_change(client: Client, engine, settings: Settings, worker, tmp_path: Path):
    wp = Waypoint(client, engine, settings)
    run_ids = await finished_runs(wp, 2)
    code = changed_code(tmp_path / "new-code")

    done = await new_code(settings, code, "check-deploy")
    assert done.code == 1, (done.out, done.err)
    line = done.err.strip().splitlines()[-1]
    assert line.startswith("error: finished run "), line
    assert any(f"run {run_id} (execution " in line for run_id in run_ids), line
    assert " would not replay at event " in line and "Nondeterminism" in line, line
    # What changed and how to guard it, in words, before Temporal's own.
    assert "this code no longer calls workflow.patched(" in line and "deprecate_patch" in line, line
    assert "(1 more: see --json)" in line, line

    as_json = await new_code(settings, code, "check-deploy", "--json")
    report = json.loads(as_json.out)
    assert as_json.code == 1 and report["ok"] is False and report["finished"] == 2
    assert sorted(b["workflow_id"] for b in report["broken"]) == sorted(run_ids)
    # Where the recorded history has the marker of a patch the changed code no longer reaches.
    for broken in report["broken"]:
        history = await client.get_workflow_handle(broken["workflow_id"]).fetch_history()
        (event,) = [e for e in history.events if e.event_id == broken["event_id"]]
        assert event.HasField("marker_recorded_event_attributes"), event
    assert all("patch marker encountered for change" in b["error"] for b in report["broken"]), report["broken"]
    assert all(b["advice"].startswith("this code no longer calls workflow.patched(") for b in report["broken"])

    # The same runs replay on the installed code: it is the change the gate caught.
    assert (await wp.check_deploy()).ok


async def test_bad_input_is_one_line(settings: Settings, client: Client, engine):
    line = one_line_error(await waypoint(settings, "check-deploy", "--finished", "-1"))
    assert "finished must be a whole number from 0" in line
    line = one_line_error(await waypoint(settings, "check-deploy", "--since", "yesterday-ish"))
    assert "since='yesterday-ish'" in line
    with pytest.raises(InvalidInput):
        await Waypoint(client, engine, settings).check_deploy(finished=10**9)
