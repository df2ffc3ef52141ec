"""Waypoint's own HTTP API against a real uvicorn, a real worker and Postgres: every endpoint,
its errors as JSON with stable codes, and API keys (`waypoint keys ...`)."""

from __future__ import annotations

import json
import sys

import httpx
import pytest

from tests.conftest import ApiServer
from tests.helpers import eventually, finished, waypoint
from waypoint.config import Settings

pytestmark = pytest.mark.postgres


def error_of(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) >= {"code", "message"} and error["message"]
    return error


async def test_every_read_and_write_of_a_run(api: ApiServer, memory_worker, settings: Settings):
    # A memory worker polls, as with `waypoint dev`: without one, each compaction pass below waits
    # 10 s for it (memory_timeout_seconds) before it reports the episodes not stored.
    http = api.http
    started = await http.post("/v1/runs", json={"task": "add", "agent": "calculator", "max_steps": 10})
    assert started.status_code == 201 and started.headers["location"] == f"/v1/runs/{started.json()['run_id']}"
    run_id = started.json()["run_id"]
    row = await finished(api, run_id)
    assert (row["status"], row["steps"], row["output"], row["live"]) == ("completed", 3, "The answer is 15.", None)
    assert row["tenant_id"] == settings.tenant  # from the key

    other = (await http.post("/v1/runs", json={"task": "add again", "agent": "calculator"})).json()["run_id"]
    await finished(api, other)
    page1 = (await http.get("/v1/runs", params={"limit": 1})).json()
    page2 = (await http.get("/v1/runs", params={"limit": 1, "cursor": page1["next_cursor"]})).json()
    assert [r["run_id"] for r in page1["runs"] + page2["runs"]] == [other, run_id]  # newest first, keyset
    filtered = (await http.get("/v1/runs", params={"status": "completed", "agent": "calculator"})).json()
    assert {r["run_id"] for r in filtered["runs"]} == {run_id, other} and filtered["next_cursor"] is None

    steps = (await http.get(f"/v1/runs/{run_id}/steps", params={"limit": 2})).json()
    assert [s["step"] for s in steps["steps"]] == [1, 2] and steps["next_after_step"] == 2
    rest = (await http.get(f"/v1/runs/{run_id}/steps", params={"after_step": 2})).json()
    assert [(s["step"], s["action"]) for s in rest["steps"]] == [(3, "answer")]

    state = (await http.get(f"/v1/runs/{run_id}/steps/2/state")).json()
    assert state["step"] == 2 and state["messages"][1] == {"role": "user", "content": "add"}
    assert [e["kind"] for e in state["events"]] == ["model_response", "tool_result"]
    diff = (await http.get(f"/v1/runs/{run_id}/diff", params={"a": 1, "b": 3})).json()
    assert diff["added"][-1]["content"] == "The answer is 15." and diff["tokens_b"] > diff["tokens_a"]

    events = (await http.get(f"/v1/runs/{run_id}/events", params={"limit": 3})).json()
    assert [e["seq"] for e in events["events"]] == [1, 2, 3] and events["next_after_seq"] == 3
    more = (await http.get(f"/v1/runs/{run_id}/events", params={"after_seq": 3})).json()
    assert [e["seq"] for e in more["events"]] == [4, 5, 6, 7, 8]
    kinds = await http.get(f"/v1/runs/{run_id}/events", params=[("kind", "tool_result"), ("kind", "run_finished")])
    assert [e["kind"] for e in kinds.json()["events"]] == ["tool_result"] * 3 + ["run_finished"]

    export = await http.get(f"/v1/runs/{run_id}/export")
    assert export.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in export.text.splitlines()]
    assert lines[0]["type"] == "run" and [x["seq"] for x in lines[1:]] == list(range(1, 9))

    assert (await http.get(f"/v1/runs/{run_id}/verify")).json()["ok"] is True
    replay = (await http.get(f"/v1/runs/{run_id}/replay")).json()
    assert replay["ok"] is True and len(replay["executions"]) == 1
    assert set((await http.get(f"/v1/runs/{run_id}/trace")).json()) == {"run_id", "trace_id", "url"}
    assert (await http.get(f"/v1/runs/{run_id}/compactions")).json()["compactions"] == []
    compacted = (await http.post(f"/v1/runs/{run_id}/compact")).json()
    assert compacted["selected"] == 1
    assert (await http.post("/v1/compact")).status_code == 200  # the tenant's runs past the threshold: none
    listed = (await http.get("/v1/compactions")).json()["compactions"]
    assert {c["run_id"] for c in listed} <= {run_id, other}

    forked = await http.post(f"/v1/runs/{run_id}/fork", json={"step": 2, "message": "once more"})
    assert forked.status_code == 201
    fork_id = forked.json()["run_id"]
    fork_row = await finished(api, fork_id)
    assert (fork_row["parent_run_id"], fork_row["fork_step"], fork_row["status"]) == (run_id, 2, "completed")
    lineage = (await http.get(f"/v1/runs/{run_id}/lineage")).json()["lineage"]
    assert lineage == [{"run_id": fork_id, "forked_at": 2, "relation": "fork", "lineage_kind": "fork"}]
    # the CLI answers with the same names
    cli = json.loads((await waypoint(settings, "fork", run_id, "--step", "2", "--json")).out)
    assert cli.keys() == forked.json().keys() and (cli["parent_run_id"], cli["fork_step"]) == (run_id, 2)
    await finished(api, cli["run_id"])
    assert (await http.delete(f"/v1/runs/{cli['run_id']}")).status_code == 204

    agents = (await http.get("/v1/agents")).json()["agents"]
    assert "calculator" in {a["name"] for a in agents}
    calculator = (await http.get("/v1/agents/calculator")).json()
    assert calculator["tools"][0]["parameters"]["required"] == ["a", "b"]

    error_of(await http.delete(f"/v1/runs/{run_id}"), 409)  # it has a fork: delete that first
    assert (await http.delete(f"/v1/runs/{fork_id}")).status_code == 204
    assert (await http.delete(f"/v1/runs/{run_id}")).status_code == 204
    assert error_of(await http.get(f"/v1/runs/{run_id}"), 404)["code"] == "not_found"


async def test_messages_to_a_running_run(api: ApiServer, worker):
    http = api.http
    run_id = (await http.post("/v1/runs", json={"task": "count", "agent": "listener"})).json()["run_id"]

    async def stepped() -> bool:
        return (await http.get(f"/v1/runs/{run_id}")).json()["steps"] >= 1

    await eventually(stepped)
    live = (await http.get(f"/v1/runs/{run_id}")).json()["live"]
    assert live["status"] == "running" and live["step"] >= 1
    assert error_of(await http.post(f"/v1/runs/{run_id}/resume"), 409)["code"] == "conflict"  # not paused
    # the answer shows the run as it is: still running until its current step ends
    assert (await http.post(f"/v1/runs/{run_id}/pause")).json()["status"] == "running"

    async def paused() -> bool:
        return (await http.get(f"/v1/runs/{run_id}")).json()["status"] == "paused"

    await eventually(paused)
    assert error_of(await http.post(f"/v1/runs/{run_id}/send", json={"text": " "}), 400)["code"] == "invalid_input"
    # paused, so nothing reads the message yet: it waits in the queue
    assert (await http.post(f"/v1/runs/{run_id}/send", json={"text": "stop now"})).json()["queued_messages"] == 1
    assert (await http.post(f"/v1/runs/{run_id}/resume")).json()["status"] == "running"
    row = await finished(api, run_id)
    assert row["output"] == "heard: stop now"
    assert error_of(await http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "late"}), 409)["code"] == "conflict"

    careful = (await http.post("/v1/runs", json={"task": "delete two files", "agent": "careful"})).json()["run_id"]

    def waiting(step: int):
        async def probe() -> list | None:
            row = (await http.get(f"/v1/runs/{careful}")).json()
            pending = (row.get("live") or {}).get("pending_approvals") or []
            return pending if row["status"] == "waiting_approval" and pending and pending[0]["step"] == step else None

        return probe

    pending = await eventually(waiting(1))
    assert [p["tool"] for p in pending] == ["delete_file"]
    assert (await http.post(f"/v1/runs/{careful}/approve", json={"call_id": pending[0]["call_id"]})).status_code == 200
    await eventually(waiting(2))
    assert (await http.post(f"/v1/runs/{careful}/deny", json={"reason": "keep b"})).status_code == 200
    row = await finished(api, careful)
    assert "denied" in row["output"] and "keep b" in row["output"]

    looping = (await http.post("/v1/runs", json={"task": "loop", "agent": "listener"})).json()["run_id"]
    await eventually(lambda: _has_row(api, looping))
    assert (await http.post(f"/v1/runs/{looping}/cancel", json={"reason": "enough"})).status_code == 200
    row = await finished(api, looping)
    assert (row["status"], row["error"]) == ("cancelled", "enough")


async def _has_row(api: ApiServer, run_id: str) -> bool:
    return (await api.http.get(f"/v1/runs/{run_id}")).status_code == 200


async def test_bad_requests_get_json_errors_with_stable_codes(api: ApiServer, worker, settings: Settings):
    http = api.http
    assert error_of(await http.get("/v1/runs/run-nope"), 404)["code"] == "not_found"
    assert "waypoint runs" in error_of(await http.get("/v1/runs/run-nope/events"), 404)["message"]
    bad = await http.post("/v1/runs", content=b'{"task": ', headers={"content-type": "application/json"})
    assert error_of(bad, 400)["code"] == "bad_json"
    # a body the parser cannot read at all: the error says what is wrong with it, and the limit
    json_type = {"content-type": "application/json"}
    latin = error_of(await http.post("/v1/runs", content=b'{"task": "caf\xe9"}', headers=json_type), 400)
    assert latin["code"] == "bad_json" and "not UTF-8 (byte 0xe9 at offset 13)" in latin["message"]
    deep = error_of(await http.post("/v1/runs", content=b"[" * 5000 + b"]" * 5000, headers=json_type), 400)
    assert deep["code"] == "bad_json" and "nests arrays and objects deeper" in deep["message"]
    assert f"fewer than {sys.getrecursionlimit()} levels" in deep["message"]
    # JSON sent as something else: 415 naming the header that makes it JSON, on every face of the API
    for path in ("/v1/runs", "/threads"):
        plain = await http.post(path, content=b'{"task": "x"}', headers={"content-type": "text/plain"})
        refused = error_of(plain, 415)
        assert refused["code"] == "unsupported_media_type" and "`Content-Type: application/json`" in refused["message"]
        assert "came as text/plain" in refused["message"]
    assert "no Content-Type" in error_of(await http.post("/v1/runs", content=b'{"task": "x"}'), 415)["message"]
    # a browser's preflight from a page no setting lets in: the JSON error, naming the setting
    preflight = {"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "POST"}
    cors = error_of(await http.options("/v1/runs", headers=preflight), 403)
    assert cors["code"] == "cross_origin" and "WAYPOINT_API_CORS_ORIGINS" in cors["message"]
    assert "http://elsewhere.example" in cors["message"]
    assert error_of(await http.post("/v1/runs", json={"agent": "calculator"}), 422)["code"] == "invalid_body"
    assert error_of(await http.post("/v1/runs", json={"task": "x", "max_steps": 0}), 422)["code"] == "invalid_body"
    assert error_of(await http.post("/v1/runs", json={"task": "   "}), 400)["code"] == "invalid_input"
    unknown = error_of(await http.post("/v1/runs", json={"task": "x", "agent": "nobody"}), 404)
    assert unknown["code"] == "unknown_agent" and "WAYPOINT_AGENTS" in unknown["message"]
    spec = error_of(await http.post("/v1/runs", json={"task": "x", "agent": "calculator", "model": "gpt"}), 400)
    assert "openai:<model>" in spec["message"]
    assert error_of(await http.get("/v1/runs", params={"cursor": "!!"}), 400)["code"] == "invalid_input"
    assert error_of(await http.get("/v1/runs", params={"status": "sleeping"}), 422)["code"] == "invalid_body"
    assert error_of(await http.get("/v1/nothing-here"), 404)["code"] == "route_not_found"
    assert error_of(await http.put("/v1/runs"), 405)["code"] == "method_not_allowed"

    big = {"task": "x" * (settings.api_max_body_bytes + 1)}
    assert error_of(await http.post("/v1/runs", json=big), 413)["code"] == "body_too_large"

    async def chunks():  # no Content-Length: counted as it streams in
        for _ in range(settings.api_max_body_bytes // 65536 + 2):
            yield b" " * 65536

    assert error_of(await http.post("/v1/runs", content=chunks()), 413)["code"] == "body_too_large"

    run_id = (await http.post("/v1/runs", json={"task": "add", "agent": "calculator"})).json()["run_id"]
    row = await finished(api, run_id)
    assert error_of(await http.get(f"/v1/runs/{run_id}/steps/99/state"), 404)["code"] == "not_found"
    assert error_of(await http.get(f"/v1/runs/{run_id}/steps/-1/state"), 400)["code"] == "invalid_input"
    assert (
        error_of(await http.get(f"/v1/runs/{run_id}/diff", params={"a": "x", "b": 1}), 400)["code"] == "invalid_input"
    )
    assert row["status"] == "completed"
    assert (await http.get("/healthz", headers={"Authorization": ""})).json() == {"ok": True}
    assert (await http.get("/openapi.json")).json()["info"]["title"] == "Waypoint"


async def test_what_the_store_cannot_hold_is_refused_where_it_enters(api: ApiServer, worker):
    http = api.http
    too_big = {"max_steps": 3_000_000_000, "max_tokens": 2**63, "deadline_seconds": 1e12}
    for name, value in too_big.items():
        body = {"task": "add", "agent": "calculator", name: value}
        assert "at most" in error_of(await http.post("/v1/runs", json=body), 400)["message"], name
    for raw in (b'{"task": "\\udb0c_", "agent": "calculator"}', b'{"task": "add", "max_cost_usd": Infinity}'):
        error_of(await http.post("/v1/runs", content=raw, headers={"content-type": "application/json"}), 400)
    assert (await http.get("/v1/runs")).json()["runs"] == []  # nothing started
    for params in ({"run_id": "run-\x00"}, {"text": "a\x00b"}):
        assert "NUL" in error_of(await http.get("/v1/runs", params=params), 400)["message"]

    run_id = (await http.post("/v1/runs", json={"task": "add", "agent": "calculator"})).json()["run_id"]
    await finished(api, run_id)
    error_of(await http.get(f"/v1/runs/{run_id}/events", params={"after_seq": 3_000_000_000}), 400)
    error_of(await http.get(f"/v1/runs/{run_id}/steps/3000000000/state"), 400)
    error_of(await http.post(f"/v1/runs/{run_id}/fork", json={"step": 1, "message": "a\x00"}), 400)


async def test_keys_no_key_a_wrong_key_and_a_revoked_key_are_401(api: ApiServer, settings: Settings):
    raw = httpx.AsyncClient(base_url=api.url)
    async with raw:
        for headers in ({}, {"Authorization": "Bearer wp_not-a-key"}, {"Authorization": "Basic abc"}):
            r = await raw.get("/v1/runs", headers=headers)
            assert error_of(r, 401)["code"] == "unauthorized" and r.headers["www-authenticate"] == "Bearer"

        made = await waypoint(settings, "keys", "create", "--tenant", "acme", "--name", "ci")
        assert made.code == 0, made.err
        key = made.out.strip()
        assert key.startswith("wp_") and "not shown again" in made.err
        assert (await raw.get("/v1/runs", headers={"Authorization": f"Bearer {key}"})).json() == {
            "runs": [],
            "next_cursor": None,
        }
        assert (await raw.get("/v1/runs", headers={"X-Api-Key": key})).status_code == 200  # LangGraph's header

        listed = json.loads((await waypoint(settings, "keys", "list", "--tenant", "acme", "--json")).out)
        assert [(k["tenant_id"], k["name"], k["revoked_at"]) for k in listed] == [("acme", "ci", None)]
        assert key not in json.dumps(listed) and key.startswith(listed[0]["prefix"])
        revoked = await waypoint(settings, "keys", "revoke", listed[0]["prefix"])
        assert revoked.code == 0 and "revoked" in revoked.out
        assert error_of(await raw.get("/v1/runs", headers={"Authorization": f"Bearer {key}"}), 401)

    bad = await waypoint(settings, "keys", "create", "--tenant", "no spaces")
    assert bad.code == 1 and bad.err.startswith("error: invalid tenant id")
    missing = await waypoint(settings, "keys", "revoke", "999999")
    assert missing.code == 1 and "waypoint keys list" in missing.err


async def test_runs_list_filters_by_time_and_text_and_pages_every_sort(api: ApiServer, engine):
    """GET /v1/runs: since/until (an age or an ISO time), text, run ids, and each sort paged one run
    at a time gives the same order as one page: the keyset (sort value, run_id) skips and repeats nothing."""
    import uuid
    from datetime import datetime, timedelta

    from waypoint.names import RunSort, RunStatus
    from waypoint.store import RunStore
    from waypoint.store.steps import NewRun
    from waypoint.types import ModelTurn, RunPlan, StepRecord, Usage

    store = RunStore(engine)
    tenant, marker = api.settings.tenant, uuid.uuid4().hex[:8]
    made = []
    for i, (steps, tokens, cost) in enumerate([(3, 50, 0.5), (1, 50, 0.25), (2, 400, 0.25), (0, 0, 0)]):
        run_id = f"run-{marker}{i}"
        plan = RunPlan(model="m", max_steps=10)
        await store.steps.create_run(NewRun(run_id, tenant, "calculator", f"sorted {marker} {i}", "I.", plan))
        for n in range(1, steps + 1):
            turn = ModelTurn(model="m", content="x", usage=Usage(tokens // steps, 0), cost_usd=cost / steps)
            await store.steps.record_step(StepRecord(run_id, tenant, n, turn))
        if i < 3:
            await store.log.finish_run(tenant, run_id, RunStatus.COMPLETED, "done", None)
        made.append(run_id)

    async def listed(**params) -> dict:
        r = await api.http.get("/v1/runs", params={"text": marker, **params})
        assert r.status_code == 200, r.text
        return r.json()

    rows = {r["run_id"]: r for r in (await listed(limit=100))["runs"]}
    # Each run's row was written after the one before committed, so Postgres's clock tells them apart.
    created = [datetime.fromisoformat(rows[r]["created_at"]) for r in made]
    assert created == sorted(set(created)), created
    assert list(rows) == made[::-1]  # newest first by default

    def duration(r: dict) -> float:
        end = datetime.fromisoformat(r["finished_at"] or r["updated_at"])
        return (end - datetime.fromisoformat(r["created_at"])) // timedelta(milliseconds=1)

    values = {
        RunSort.NEWEST: lambda r: (-datetime.fromisoformat(r["created_at"]).timestamp(), r["run_id"]),
        RunSort.OLDEST: lambda r: (datetime.fromisoformat(r["created_at"]).timestamp(), r["run_id"]),
        RunSort.TOKENS: lambda r: (-(r["input_tokens"] + r["output_tokens"]), r["run_id"]),
        RunSort.COST: lambda r: (-r["cost_usd"], r["run_id"]),
        RunSort.STEPS: lambda r: (-r["steps"], r["run_id"]),
        RunSort.DURATION: lambda r: (-duration(r), r["run_id"]),
    }
    for sort, key in values.items():
        whole = [r["run_id"] for r in (await listed(sort=sort.value, limit=100))["runs"]]
        if sort != RunSort.DURATION:  # the live run's duration grows between the two reads
            assert whole == [r["run_id"] for r in sorted(rows.values(), key=key)], sort
        paged, cursor = [], None
        while True:
            page = await listed(sort=sort.value, limit=1, **({"cursor": cursor} if cursor else {}))
            paged += [r["run_id"] for r in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(paged) == sorted(made) and (sort == RunSort.DURATION or paged == whole), (sort, paged, whole)
    assert [r["run_id"] for r in (await listed(sort="tokens", limit=100))["runs"]][:1] == [made[2]]  # 400 tokens

    middle = rows[made[2]]["created_at"]
    assert [r["run_id"] for r in (await listed(since=middle))["runs"]] == [made[3], made[2]]
    assert [r["run_id"] for r in (await listed(until=middle))["runs"]] == [made[1], made[0]]
    assert len((await listed(since="1h"))["runs"]) == 4 and (await listed(until="1h"))["runs"] == []
    assert (await listed(since="2000-01-01", until="2000-01-02"))["runs"] == []
    picked = await api.http.get("/v1/runs", params=[("run_id", made[0]), ("run_id", made[3])])
    assert {r["run_id"] for r in picked.json()["runs"]} == {made[0], made[3]}

    bad = error_of(await api.http.get("/v1/runs", params={"since": "yesterday"}), 400)
    assert "write an age such as 1h or 7d, or an ISO date" in bad["message"]
    cursor = (await listed(sort="tokens", limit=1))["next_cursor"]
    wrong = error_of(await api.http.get("/v1/runs", params={"sort": "cost", "cursor": cursor}), 400)
    assert "with the same sort" in wrong["message"]
    assert (await api.http.get("/v1/runs", params={"sort": "random"})).status_code == 422
