"""The `waypoint` CLI as a user runs it: a real process, real Temporal, real Postgres."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import cli_env, make_run, step, waypoint
from waypoint.config import Settings
from waypoint.names import RunStatus
from waypoint.store import RunStore

pytestmark = pytest.mark.postgres


async def test_run_follow_then_runs_and_status(settings: Settings, worker):
    done = await waypoint(settings, "run", "add some numbers", "--agent", "calculator", "--follow")
    assert done.code == 0, done.err
    assert "step   1" in done.out and "tools: add, note" in done.out and "step   3" in done.out
    assert "The answer is 15." in done.out
    run_id = done.out.split("started ", 1)[1].split()[0]

    listed = await waypoint(settings, "runs", "--json")
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)
    assert [(r["run_id"], r["status"], r["steps"]) for r in rows] == [(run_id, "completed", 3)]

    shown = await waypoint(settings, "status", run_id, "--json")
    detail = json.loads(shown.out)
    assert detail["status"] == "completed" and detail["agent"] == "calculator"
    assert [line["tools"] for line in detail["timeline"]] == [["add", "note"], ["add"], []]

    table = await waypoint(settings, "status", run_id)
    assert "completed" in table.out and "Step timeline" in table.out


async def test_run_without_follow_prints_the_run_id(settings: Settings, worker, client):
    done = await waypoint(settings, "run", "loop a little", "--agent", "looper", "--max-steps", "2", "--json")
    assert done.code == 0, done.err
    run_id = json.loads(done.out)["run_id"]
    await client.get_workflow_handle(run_id).result()
    status = json.loads((await waypoint(settings, "status", run_id, "--json")).out)
    assert (status["status"], status["steps"]) == ("max_steps", 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "run-does-not-exist"], "no run 'run-does-not-exist'"),
        (["run", "hello", "--agent", "nobody", "--follow"], "unknown agent 'nobody'"),
        (["run", "   "], "the task is empty"),
    ],
)
async def test_bad_input_is_one_line_and_exit_1(settings: Settings, worker, args: list[str], message: str):
    done = await waypoint(settings, *args)
    assert done.code == 1
    assert message in done.err
    assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err


async def test_unreachable_services_name_the_fix(settings: Settings):
    env = cli_env(settings) | {"WAYPOINT_TEMPORAL_ADDRESS": "localhost:1", "WAYPOINT_DATABASE_URL": ""}
    env.pop("WAYPOINT_DATABASE_URL")
    done = await waypoint(settings, "runs", env=env)
    assert done.code == 1 and "waypoint dev" in done.err and "WAYPOINT_DATABASE_URL" in done.err
    env["WAYPOINT_DATABASE_URL"] = settings.database_url or ""
    done = await waypoint(settings, "run", "hi", env=env)
    assert done.code == 1 and "cannot reach Temporal at localhost:1" in done.err
    assert len(done.err.strip().splitlines()) == 1


async def test_tables_at_80_columns_keep_ids_agents_statuses_and_compares_marks(store: RunStore, settings: Settings):
    """What a reader looks for stays whole on an 80-column terminal; the free text gives way."""
    calls = [("add", {"a": 1, "b": 2, "note": "the first of two sums"}, "3"), ("add", {"a": 3, "b": 4}, "7")]
    done = await make_run(store, settings, [step(1, calls)])
    over = await make_run(store, settings, [step(1, calls[1:])])
    await store.log.finish_run(settings.tenant, done, RunStatus.COMPLETED, "3 and 7", None)
    await store.log.finish_run(settings.tenant, over, RunStatus.BUDGET_EXCEEDED, None, "token budget spent")
    env = cli_env(settings) | {"COLUMNS": "80"}

    listed = await waypoint(settings, "runs", env=env)
    for word in (done, over, "calculator", "completed", "budget_exceeded"):
        assert word in listed.out, listed.out
    compared = await waypoint(settings, "compare", done, over, env=env)
    assert re.search(r"^ +1 +≠ +add", compared.out, re.M), compared.out
    assert "completed" in compared.out and "budget_exceeded" in compared.out, compared.out
