"""Evaluations over HTTP (a real uvicorn, worker, Temporal and Postgres): datasets from recorded runs
and from cases, an experiment started and followed to its end, its report, gate, comparison and
NDJSON export; a finished experiment's cancel is 409, another tenant's things are 404, and a bad
body is one error that names the fix."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.conftest import ApiServer
from tests.evals_helpers import DEMO_TASK, demo_runs
from tests.helpers import eventually
from waypoint.client import Waypoint

pytestmark = pytest.mark.postgres

SCORERS = ["exact", {"name": "trajectory", "args": {"mode": "subset"}}, "mentions_report"]


async def finished(api: ApiServer, experiment_id: str) -> dict[str, Any]:
    """GET /v1/experiments/{id}, polled until the experiment is no longer running."""

    async def ended() -> dict[str, Any] | None:
        report: dict[str, Any] = (await api.http.get(f"/v1/experiments/{experiment_id}")).json()
        return report if report["experiment"]["status"] != "running" else None

    return await eventually(ended, timeout=120, interval=0.3, what=f"the end of {experiment_id}")


async def started(api: ApiServer, **body: Any) -> str:
    r = await api.http.post("/v1/experiments", json={"agent": "demo", "recorded_tools": True, **body})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "running" and r.headers["location"] == f"/v1/experiments/{r.json()['experiment_id']}"
    experiment_id: str = r.json()["experiment_id"]
    return experiment_id


@pytest.mark.timeout(240)
async def test_datasets_and_experiments_over_http(
    api: ApiServer, client: Client, engine: AsyncEngine, settings, worker
):
    wp = Waypoint(client, engine, settings)
    run_ids = await demo_runs(wp, 2)
    http = api.http

    made = await http.post("/v1/datasets", json={"name": "notes", "from_runs": {"run_ids": run_ids}})
    assert made.status_code == 201, made.text
    assert made.json()["version"] == 1 and made.json()["cases"] == 2 and made.json()["source"]["kind"] == "runs"
    assert made.headers["location"] == "/v1/datasets/notes?version=1"
    again = await http.post("/v1/datasets", json={"name": "notes", "from_runs": {"select": "agent=demo", "limit": 1}})
    assert again.status_code == 201 and again.json()["version"] == 2 and again.json()["cases"] == 1

    listed = (await http.get("/v1/datasets")).json()["datasets"]
    assert [(d["name"], d["version"], d["versions"]) for d in listed if d["name"] == "notes"] == [("notes", 2, 2)]
    assert (await http.get("/v1/datasets/notes", params={"version": 1})).json()["cases"] == 2
    cases = (await http.get("/v1/datasets/notes/cases", params={"version": 1})).json()
    assert cases["version"] == 1 and [c["source_run_id"] for c in cases["cases"]] == run_ids
    assert cases["cases"][0]["task"].startswith(DEMO_TASK)

    exported = await http.get("/v1/datasets/notes/export", params={"version": 1})
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/x-ndjson")
    assert 'filename="notes-v1.jsonl"' in exported.headers["content-disposition"]
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [line["id"] for line in lines] == run_ids and all(line["expected_tools"] for line in lines)

    # from cases: the exported lines read back as a dataset of their own
    written = [{k: v for k, v in line.items() if k != "source_run_id"} for line in lines]
    copied = await http.post("/v1/datasets", json={"name": "notes-copy", "cases": written})
    assert copied.status_code == 201, copied.text
    assert copied.json()["cases"] == 2 and copied.json()["source"] == {"kind": "file", "file": "cases"}

    first = await started(api, dataset="notes", version=1, scorers=SCORERS, concurrency=2)
    report = await finished(api, first)
    assert report["experiment"]["status"] == "completed" and report["experiment"]["done"] == 2
    assert report["experiment"]["dataset"] == "notes" and report["experiment"]["dataset_version"] == 1
    summary = {s["scorer"]: s for s in report["summary"]["scorers"]}
    assert list(summary) == ["exact", "trajectory", "mentions_report"]
    assert summary["trajectory"]["mean"] == 1.0 and summary["trajectory"]["n"] == 2
    assert summary["exact"]["mean"] == 1.0 and summary["exact"]["ci_high"] == 1.0
    # Every case passed: Wilson's interval of a proportion still leaves room below (it never says "surely 1").
    assert 0 < summary["exact"]["ci_low"] < 1 and summary["exact"]["ci_method"] == "wilson"
    assert summary["mentions_report"]["mean"] == 0.0 and summary["mentions_report"]["pass_rate"] == 0.0
    assert report["summary"]["cases"] == 2 and report["summary"]["errored"] == 0
    results = report["results"]
    assert sorted(r["case_id"] for r in results) == sorted(run_ids)
    assert all(r["status"] == "scored" and r["run_status"] == "completed" for r in results)
    assert all(r["scores"]["trajectory"]["passed"] is True for r in results)
    only_cases = (await http.get(f"/v1/experiments/{first}/cases")).json()
    assert only_cases["status"] == "completed" and only_cases["results"] == results

    # the gate CI reads: passed, or the scorers under their thresholds
    gated = (await http.get(f"/v1/experiments/{first}", params={"fail_under": "trajectory=0.9"})).json()
    assert gated["gate"] == {"passed": True, "finished": True, "failures": []}
    gates = [("fail_under", "trajectory=0.5"), ("fail_under", "mentions_report=0.5")]
    failing = (await http.get(f"/v1/experiments/{first}", params=gates)).json()["gate"]
    assert failing["passed"] is False and [f["scorer"] for f in failing["failures"]] == ["mentions_report"]
    assert failing["failures"][0]["message"] == "mentions_report is 0.000, under 0.5"
    bad = await http.get(f"/v1/experiments/{first}", params={"fail_under": "exact=1.1"})
    assert bad.status_code == 400 and "write SCORER=THRESHOLD" in bad.json()["error"]["message"]
    unknown = await http.get(f"/v1/experiments/{first}", params={"fail_under": "judge=0.5"})
    assert unknown.status_code == 400 and "no scorer of" in unknown.json()["error"]["message"]

    # rescoring: a new experiment over the same runs, then compared with the first
    rescored = await http.post(f"/v1/experiments/{first}/rescore", json={"scorers": ["trajectory:mode=in_order"]})
    assert rescored.status_code == 201, rescored.text
    second = rescored.json()["experiment_id"]
    assert rescored.json()["rescored_from"] == first
    assert (await finished(api, second))["experiment"]["status"] == "completed"
    compared = await http.get(f"/v1/experiments/{first}/compare/{second}")
    assert compared.status_code == 200, compared.text
    delta = compared.json()["scorers"]
    assert [d["scorer"] for d in delta] == ["trajectory"] and delta[0]["n"] == 2
    assert compared.json()["a"]["experiment_id"] == first and compared.json()["b"]["experiment_id"] == second
    assert {c["index"] for c in compared.json()["cases"]} == {0, 1}

    mine = (await http.get("/v1/experiments", params={"dataset": "notes"})).json()["experiments"]
    assert [e["experiment_id"] for e in mine] == [second, first]
    assert (await http.get("/v1/experiments", params={"dataset": "notes-copy"})).json()["experiments"] == []

    ended = await http.post(f"/v1/experiments/{first}/cancel")
    assert ended.status_code == 409 and ended.json()["error"] == {
        "code": "conflict",
        "message": f"experiment {first} is completed already",
    }

    # another tenant reaches none of it: 404, as for what does not exist
    key_b, _ = await wp.keys.create("tenant-b-evals", "b")
    async with httpx.AsyncClient(base_url=api.url, headers=api.headers(key_b), timeout=60) as b:
        for method, path, body in [
            ("GET", "/v1/datasets/notes", None),
            ("GET", "/v1/datasets/notes/cases", None),
            ("GET", "/v1/datasets/notes/export", None),
            ("GET", f"/v1/experiments/{first}", None),
            ("GET", f"/v1/experiments/{first}/cases", None),
            ("GET", f"/v1/experiments/{first}/compare/{second}", None),
            ("POST", f"/v1/experiments/{first}/cancel", None),
            ("POST", f"/v1/experiments/{first}/rescore", {"scorers": ["exact"]}),
            ("POST", "/v1/experiments", {"dataset": "notes", "agent": "demo"}),
        ]:
            r = await b.request(method, path, json=body)
            assert r.status_code == 404, (method, path, r.text)
            assert r.json()["error"]["code"] == "not_found", (method, path, r.text)
        assert (await b.get("/v1/datasets")).json()["datasets"] == []
        assert (await b.get("/v1/experiments")).json()["experiments"] == []
        foreign = await b.post("/v1/datasets", json={"name": "stolen", "from_runs": {"run_ids": run_ids[:1]}})
        assert foreign.status_code == 404 and run_ids[0] in foreign.json()["error"]["message"]


async def error_of(api: ApiServer, path: str, body: Any) -> tuple[int, str]:
    r = await api.http.post(path, json=body)
    assert r.headers["content-type"] == "application/json", r.text
    return r.status_code, r.json()["error"]["message"]


@pytest.mark.timeout(120)
async def test_bad_bodies_are_one_error_naming_the_fix(api: ApiServer, worker):
    assert await error_of(api, "/v1/datasets", {"name": "x", "cases": []}) == (
        400,
        'cases is empty: give at least one case, each with a "task"',
    )
    assert await error_of(api, "/v1/datasets", {"name": "x", "cases": [{"task": "a"}, {"expected_output": "4"}]}) == (
        400,
        'cases line 2: the case has no task: give each case a "task" (the text its run gets)',
    )
    status, message = await error_of(api, "/v1/datasets", {"name": "x"})
    assert status == 400 and message.startswith("give from_runs or cases, one of them")
    status, message = await error_of(api, "/v1/datasets", {"name": "x", "from_runs": {}})
    assert status == 400 and "give select" in message
    status, message = await error_of(api, "/v1/datasets", {"name": "no spaces", "cases": [{"task": "a"}]})
    assert status == 400 and message.startswith("invalid dataset name 'no spaces'")

    made = await api.http.post(
        "/v1/datasets", json={"name": "plain", "cases": [{"task": "say hi", "expected_output": "hi"}]}
    )
    assert made.status_code == 201, made.text
    status, message = await error_of(api, "/v1/experiments", {"dataset": "plain", "agent": "demo", "scorers": ["nope"]})
    assert status == 400 and message.startswith("unknown scorer 'nope' (known: ")  # bad input, not a lookup
    assert "exact" in message and "mentions_report" in message  # the built-in scorers and the worker's own
    assert "an @scorer function in a module of the worker's WAYPOINT_AGENTS" in message
    status, message = await error_of(
        api, "/v1/experiments", {"dataset": "plain", "agent": "demo", "scorers": [{"name": "cost"}]}
    )
    assert (status, message) == (400, "scorer cost needs max: e.g. cost:max=0.05")
    status, message = await error_of(
        api, "/v1/experiments", {"dataset": "plain", "agent": "demo", "recorded_tools": True}
    )
    assert status == 400 and "drop --recorded-tools" in message
    status, message = await error_of(api, "/v1/experiments", {"dataset": "plain", "agent": "demo", "repeat": 0})
    assert status == 422 and message.startswith("the request does not fit this endpoint: repeat:")
    status, message = await error_of(api, "/v1/experiments", {"dataset": "missing", "agent": "demo"})
    assert status == 404 and "missing" in message
    assert (await api.http.get("/v1/experiments", params={"dataset": "plain"})).json()["experiments"] == []
