"""`waypoint dataset` and `waypoint eval` as a user types them (the CLI a real process; a real worker,
Temporal and Postgres): datasets from runs and from a file, their export read back as the next
version, experiments with a gate that passes and one that fails, a scorer that raises, two
experiments compared, and bad input as one `error:` line each, before anything runs."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.evals_helpers import DEMO_TASK, demo_runs
from tests.helpers import Done, one_line_error, waypoint
from waypoint.client import Waypoint
from waypoint.config import Settings

pytestmark = pytest.mark.postgres

EXPERIMENT_ID = re.compile(r"exp-[0-9a-f]{12}")
CASES = [
    {"id": "greet", "task": "Say hello", "expected_output": "hello", "metadata": {"topic": "greetings"}},
    {"id": "count", "task": "Count the notes", "expected_tools": ["list_files", {"name": "read_file"}]},
]


def experiment_of(done: Done) -> str:
    """The one experiment id the table names."""
    found = set(EXPERIMENT_ID.findall(done.out))
    assert len(found) == 1, done.out
    return found.pop()


@pytest.mark.timeout(180)
async def test_datasets_from_runs_and_from_a_file(
    worker, client: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
):
    wp = Waypoint(client, engine, settings)
    run_ids = await demo_runs(wp, 2)
    cases_file = tmp_path / "cases.jsonl"
    cases_file.write_text("".join(json.dumps(c) + "\n" for c in CASES) + "\n")

    by_ids, by_select, filed = await asyncio.gather(
        waypoint(settings, "dataset", "create", "notes", "--from-runs", "--run", run_ids[0], "--run", run_ids[1]),
        waypoint(settings, "dataset", "create", "picked", "--from-runs", "--select", "agent=demo", "--limit", "1"),
        waypoint(settings, "dataset", "create", "filed", "--from-file", str(cases_file), "--json"),
    )
    assert by_ids.code == 0 and "dataset notes version 1: 2 cases" in by_ids.out, by_ids
    assert by_select.code == 0 and "dataset picked version 1: 1 case " in by_select.out, by_select
    made = json.loads(filed.out)
    assert (made["name"], made["version"], made["cases"], made["source"]) == (
        "filed",
        1,
        2,
        {"kind": "file", "file": "cases.jsonl"},
    )

    listed, shown, exported = await asyncio.gather(
        waypoint(settings, "dataset", "list", "--json"),
        waypoint(settings, "dataset", "show", "notes", "--version", "1"),
        waypoint(settings, "dataset", "export", "filed"),
    )
    rows = {d["name"]: (d["version"], d["cases"]) for d in json.loads(listed.out)}
    assert rows == {"notes": (1, 2), "picked": (1, 1), "filed": (1, 2)}, listed.out
    assert shown.code == 0, shown
    for text in ("version", "1 (of 1)", "source run", *run_ids, DEMO_TASK[:20], "list_files"):
        assert text in shown.out, (text, shown.out)

    # The export is the file's cases; read back, it is the next version with the same cases.
    lines = [json.loads(line) for line in exported.out.splitlines()]
    assert [(c["id"], c["task"]) for c in lines] == [("greet", "Say hello"), ("count", "Count the notes")]
    back = tmp_path / "exported.jsonl"
    back.write_text(exported.out)
    again = await waypoint(settings, "dataset", "create", "filed", "--from-file", str(back))
    assert again.code == 0 and "dataset filed version 2: 2 cases" in again.out, again
    first, second = await wp.evals.cases("filed", version=1), await wp.evals.cases("filed", version=2)
    assert second == first and first[1].expected_tools is not None and first[1].expected_tools[1].name == "read_file"


@pytest.mark.timeout(240)
async def test_experiments_their_gates_errors_and_comparison(worker, client: Client, engine: AsyncEngine, settings):
    wp = Waypoint(client, engine, settings)
    await wp.evals.create_dataset("notes", run_ids=await demo_runs(wp, 2))
    run = ("eval", "notes", "--agent", "demo", "--recorded-tools")
    also_mentions = ("--scorer", "exact", "--scorer", "mentions_report", "--fail-under", "mentions_report=0.9")

    passing, failing, exploding = await asyncio.gather(
        waypoint(settings, *run, "--scorer", "exact", "--fail-under", "exact=0.9"),
        waypoint(settings, *run, *also_mentions),
        waypoint(settings, *run, "--scorer", "exploding"),
    )
    # Every case answers as its source run did: exact passes, and the gate holds.
    assert passing.code == 0, passing
    table = passing.out
    # Two cases, both passed: Wilson's interval of 2 in 2 is [0.342, 1.000].
    assert re.search(r"exact\s+1\.000\s+\[0\.342, 1\.000\]\s+100% \(2\)\s+2\s", table), table
    assert "cases 2 of 2 ended, 0 errored" in table and "latency p50" in table and "tokens" in table, table
    assert "gates passed: exact >= 0.9" in table and "(completed)" in table, table
    exp_pass = experiment_of(passing)
    assert f"waypoint runs --batch {exp_pass}" in table and f"waypoint eval show {exp_pass}" in table, table
    assert f"experiment {exp_pass} started: 2 case run(s)" in passing.err, passing.err

    # The demo's answer does not name its report: the gate fails, its line says by how much.
    assert failing.code == 1, failing
    assert "gate failed: mentions_report is 0.000, under 0.9" in failing.out, failing.out
    assert "Traceback" not in failing.err and "error:" not in failing.err, failing.err
    exp_fail = experiment_of(failing)

    # A scorer that raises errors its cases, with the message; the experiment still completes.
    assert exploding.code == 0, exploding
    assert "(completed)" in exploding.out and "2 errored" in exploding.out, exploding.out
    assert exploding.out.count("the scorer broke on purpose") == 2, exploding.out

    compared, shown, listed = await asyncio.gather(
        waypoint(settings, "eval", "compare", exp_pass, exp_fail),
        waypoint(settings, "eval", "show", exp_fail, "--cases", "--fail-under", "mentions_report=0.9", "--json"),
        waypoint(settings, "eval", "list", "--dataset", "notes"),
    )
    # The two agree on exact case by case: no win, no loss, not significant, no case differs.
    assert compared.code == 0, compared
    assert re.search(r"exact\s+1\.000\s+1\.000\s+\+0\.000.*\s0\s+0\s+2\s+1\s+no", compared.out), compared.out
    assert "every case scored the same in both" in compared.out, compared.out
    # `eval show` finds a finished experiment again, and gates it again (for CI, in JSON too).
    assert shown.code == 1, shown
    report = json.loads(shown.out)
    assert report["experiment"]["experiment_id"] == exp_fail and len(report["results"]) == 2
    assert report["gate"]["passed"] is False and report["gate"]["failures"][0]["scorer"] == "mentions_report"
    for exp in (exp_pass, exp_fail, experiment_of(exploding)):
        assert exp in listed.out, listed.out


@pytest.mark.timeout(120)
async def test_bad_input_is_one_line_before_anything_runs(
    worker, client: Client, engine: AsyncEngine, settings: Settings, tmp_path: Path
):
    wp = Waypoint(client, engine, settings)
    await wp.evals.create_dataset("filed", lines=[json.dumps(c) for c in CASES], source="cases.jsonl")
    files = {"empty.jsonl": "\n", "no-task.jsonl": '{"id": "x"}\n', "not.jsonl": "task: hello\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    run = ("eval", "filed", "--agent", "demo")
    judge = f"judge:rubric={tmp_path / 'missing.md'},model=openai:gpt-4o-mini"
    cases = {
        (*run, "--scorer", "nope"): "unknown scorer 'nope' (known: ",
        ("dataset", "create", "e", "--from-file", str(tmp_path / "empty.jsonl")): "empty.jsonl has no cases",
        ("dataset", "create", "e", "--from-file", str(tmp_path / "no-task.jsonl")): "line 1: the case has no task",
        ("dataset", "create", "e", "--from-file", str(tmp_path / "not.jsonl")): "not.jsonl line 1 is not JSON",
        ("dataset", "create", "e", "--from-file", str(tmp_path / "absent.jsonl")): "no file '",
        ("dataset", "create", "e", "--from-runs"): "--from-runs needs runs",
        ("eval", "nosuch", "--agent", "demo"): "no dataset 'nosuch': list datasets with `waypoint dataset list`",
        (*run, "--recorded-tools"): "has no recorded run, so --recorded-tools cannot answer its tools",
        (*run, "--fail-under", "exact=2"): "cannot read --fail-under 'exact=2': write SCORER=THRESHOLD",
        (*run, "--scorer", "exact", "--fail-under", "trajectory=0.5"): "--fail-under names trajectory",
        (*run, "--scorer", judge): f"no file '{tmp_path / 'missing.md'}': give rubric= the path of a file",
        ("eval", "show", "exp-000000000000"): "no experiment 'exp-000000000000'",
        ("eval", "notes"): "Missing option '--agent'",
    }
    done = await asyncio.gather(*(waypoint(settings, *args) for args in cases))
    for (args, message), answer in zip(cases.items(), done, strict=True):
        assert message in one_line_error(answer), (args, answer.err)
    assert await wp.evals.experiments() == [] and [d.name for d in await wp.evals.datasets()] == ["filed"]
