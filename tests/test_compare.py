"""`compare`: two runs step by step, through the Python API, the CLI and the HTTP API, with runs
written by the real store. It finds the first step that differs (tool name, canonical arguments,
answer text), sums the deltas, exits 1 with --fail-on-divergence, and never shows another
tenant's run."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ApiServer
from tests.helpers import make_run, one_line_error, step, waypoint
from waypoint.calls import canonical_arguments
from waypoint.client import Waypoint
from waypoint.store import RunStore
from waypoint.types import ModelTurn, Usage

pytestmark = pytest.mark.postgres


def answer(n: int, text: str, tokens: int = 10):
    turn = ModelTurn(model="m", content=text, tool_calls=[], usage=Usage(input_tokens=tokens, output_tokens=tokens))
    return turn, [], []


ORIGINAL = [
    step(1, [("add", {"a": 1, "b": 2}, "3")]),
    step(2, [("add", {"a": 3, "b": 4}, "7")]),
    answer(3, "The sums are 3 and 7."),
]
SAME_BUT_REORDERED_KEYS = [
    step(1, [("add", {"b": 2, "a": 1}, "3")]),
    step(2, [("add", {"b": 4, "a": 3}, "7")]),
    answer(3, "The sums are 3 and 7."),
]
DIVERGES_AT_2 = [
    step(1, [("add", {"a": 1, "b": 2}, "3")]),
    step(2, [("add", {"a": 3, "b": 5}, "8")]),
    step(3, [("add", {"a": 8, "b": 1}, "9")]),
    answer(4, "The sums are 3 and 8.", tokens=25),
]


def test_canonical_arguments_ignore_key_order_and_spacing():
    assert canonical_arguments('{"b": 2, "a": 1}') == canonical_arguments('{"a":1,"b":2}') == '{"a":1,"b":2}'
    assert canonical_arguments("not json") == "not json"


async def test_compare_finds_the_first_divergence_and_the_deltas(store: RunStore, settings, engine):
    a = await make_run(store, settings, ORIGINAL)
    same = await make_run(store, settings, SAME_BUT_REORDERED_KEYS)
    other = await make_run(store, settings, DIVERGES_AT_2)
    wp = Waypoint(None, engine, settings)

    found = await wp.compare(a, same)
    assert found.first_divergence is None and all(s.same for s in found.steps)
    assert [s.step for s in found.steps] == [1, 2, 3]

    found = await wp.compare(a, other)
    assert found.first_divergence == 2
    assert [s.same for s in found.steps] == [True, False, False, False]
    two = found.steps[1]
    assert two.a is not None and two.b is not None
    assert two.a.calls[0].arguments == '{"a":3,"b":4}' and two.b.calls[0].arguments == '{"a":3,"b":5}'
    assert found.steps[3].a is None  # the original answered at step 3, the other still called tools
    assert found.steps[2].answer_diff == ["@@ -1 +0,0 @@", "-The sums are 3 and 7."]
    assert found.steps_delta == 1
    assert found.input_tokens_delta == 15 and found.output_tokens_delta == 15
    assert found.diverged


async def test_the_cli_prints_the_table_and_fails_on_divergence(store: RunStore, settings):
    a = await make_run(store, settings, ORIGINAL)
    same = await make_run(store, settings, SAME_BUT_REORDERED_KEYS)
    other = await make_run(store, settings, DIVERGES_AT_2)

    done = await waypoint(settings, "compare", a, other)
    assert done.code == 0, done.err
    assert "first divergence at step 2" in done.out and "steps +1" in done.out
    assert "≠" in done.out and 'add({"a":3,"b":5})' in done.out

    assert (await waypoint(settings, "compare", a, other, "--fail-on-divergence")).code == 1
    done = await waypoint(settings, "compare", a, same, "--fail-on-divergence", "--json")
    assert done.code == 0, done.err
    data = json.loads(done.out)
    assert data["diverged"] is False and data["first_divergence"] is None
    assert [s["same"] for s in data["steps"]] == [True, True, True]

    error = one_line_error(await waypoint(settings, "compare", a, "run-nope"))
    assert "no run 'run-nope'" in error and "waypoint runs" in error
    error = one_line_error(await waypoint(settings, "--tenant", "tenant-b", "compare", a, same))
    assert "not found" in error or "no run" in error


async def test_compare_reads_a_forks_inherited_steps(store: RunStore, settings, engine):
    """A fork from step 2 compares with its parent step by step: steps 1-2 are the parent's own."""
    from waypoint.store.steps import NewRun
    from waypoint.types import ForkOrigin, RunPlan, StepRecord

    parent = await make_run(store, settings, ORIGINAL)
    child = "run-fork-" + parent[-8:]
    plan = RunPlan(model="scripted", max_steps=50, start_step=2)
    await store.steps.create_run(
        NewRun(child, settings.tenant, "calculator", "t", "i", plan, fork=ForkOrigin(parent, 2, None))
    )
    turn, _, _ = answer(3, "The sums are 3 and 7!")
    await store.steps.record_step(StepRecord(child, settings.tenant, 3, turn, []))
    wp = Waypoint(None, engine, settings)
    found = await wp.compare(parent, child)
    assert [s.step for s in found.steps] == [1, 2, 3]
    assert found.first_divergence == 3 and found.steps[0].same and found.steps[1].same
    assert found.steps[2].answer_diff == ["@@ -1 +1 @@", "-The sums are 3 and 7.", "+The sums are 3 and 7!"]


async def test_http_compare_and_another_tenant(api: ApiServer, store: RunStore, settings):
    a = await make_run(store, settings, ORIGINAL)
    other = await make_run(store, settings, DIVERGES_AT_2)
    r = await api.http.get(f"/v1/runs/{a}/compare/{other}")
    assert r.status_code == 200, r.text
    assert r.json()["first_divergence"] == 2 and r.json()["diverged"] is True

    key_b, _ = await store.keys.create_key("tenant-b", "b")
    r = await api.http.get(f"/v1/runs/{a}/compare/{other}", headers={"Authorization": f"Bearer {key_b}"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
