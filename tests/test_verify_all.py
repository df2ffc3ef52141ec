"""`waypoint verify --all`: every run's Postgres mirror against its Temporal history. Clean runs pass;
each violation, injected behind the append-only triggers' back, is one line and exit code 1."""

from __future__ import annotations

import base64
import json
import os
import uuid

import pytest
from pydantic import SecretStr
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import Done, eventually, one_line_error, waypoint
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.gateway.temporal import connect as connect_temporal
from waypoint.store.hashing import event_hash

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]


async def finished_run(wp: Waypoint) -> str:
    run_id = await wp.start_run("add", agent="calculator")  # 3 steps: add + note, add, the answer
    assert (await wp.result(run_id)).status == "completed"
    return run_id


async def verify_all(settings: Settings, *extra: str) -> Done:
    return await waypoint(settings, "verify", "--all", "--since", "1h", *extra)


def violations(done: Done) -> list[str]:
    """The violation lines, once the summary line is checked."""
    lines = done.out.strip().splitlines()
    assert lines and lines[-1].startswith(("ok:", "violations:")), done.out
    return lines[:-1]


async def retention(engine: AsyncEngine, *statements: tuple[str, dict]) -> None:
    """Delete rows as only the retention path may (the triggers refuse it otherwise)."""
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL waypoint.retention = 'on'"))
        for statement, params in statements:
            await conn.execute(text(statement), params)


async def test_clean_runs_pass(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    done = [await finished_run(wp) for _ in range(2)]
    waiting = await wp.start_run("delete two files", agent="careful")  # live: waits for approval at step 1
    await eventually(lambda: _status(wp, waiting, "waiting_approval"), what="the approval wait")

    ok = await verify_all(settings)
    assert ok.code == 0, (ok.out, ok.err)
    assert violations(ok) == [] and "ok: 3 runs checked, 0 violations" in ok.out
    report = await wp.verify_all("1h")
    assert report.ok and report.runs == 3 and not report.without_history
    # tenant-scoped: a tenant of its own (the shared test database holds other tests' tenants)
    assert (await wp.verify_all(since=None, tenant_id=f"nobody-{uuid.uuid4().hex[:8]}")).runs == 0
    later = await waypoint(settings, "verify", "--all", "--since", "2099-01-01")
    assert later.code == 0 and "0 runs checked" in later.out
    assert done


async def test_a_missing_event_of_a_completed_model_call(
    client: Client, engine: AsyncEngine, settings: Settings, worker
):
    """A tail cut off the log leaves a valid chain and contiguous checkpoints: only the history shows it."""
    wp = Waypoint(client, engine, settings)
    run_id = await finished_run(wp)
    params = {"r": run_id}
    await retention(
        engine,
        (
            "DELETE FROM events WHERE run_id = :r AND seq > "
            "(SELECT last_event_seq FROM checkpoints WHERE run_id = :r AND step = 2)",
            params,
        ),
        ("DELETE FROM checkpoints WHERE run_id = :r AND step = 3", params),
    )
    assert (await wp.verify(run_id)).ok  # the chain alone cannot tell

    bad = await verify_all(settings)
    assert bad.code == 1, (bad.out, bad.err)
    assert violations(bad) == [
        f"run {run_id}: step 3: its model call completed in Temporal, and no model_response event has it"
    ]


async def test_a_missing_tool_result_event(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await finished_run(wp)
    params = {"r": run_id}
    await retention(  # from step 2's tool result on: the tool ran, its effect is in the ledger, no event
        engine,
        (
            "DELETE FROM events WHERE run_id = :r AND seq >= "
            "(SELECT min(seq) FROM events WHERE run_id = :r AND step = 2 AND kind = 'tool_result')",
            params,
        ),
        ("DELETE FROM checkpoints WHERE run_id = :r AND step >= 2", params),
    )
    found = violations(await verify_all(settings))
    assert f"run {run_id}: step 2 call 0: its tool call completed in Temporal, and no tool_result event has it" in found
    assert f"run {run_id}: step 2 call 0: the tool ledger holds its effect, and no tool_result event records it" in (
        found
    )


async def test_a_checkpoint_gap(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await finished_run(wp)
    await retention(engine, ("DELETE FROM checkpoints WHERE run_id = :r AND step = 2", {"r": run_id}))
    bad = await verify_all(settings)
    assert bad.code == 1 and violations(bad) == [f"run {run_id}: checkpoint of step 2 is missing"], bad.out


async def test_a_status_mismatch(client: Client, engine: AsyncEngine, settings: Settings, worker):
    """The row says the run waits for approval; its workflow was terminated behind Waypoint's back."""
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("delete two files", agent="careful")
    await eventually(lambda: _status(wp, run_id, "waiting_approval"), what="the approval wait")
    await client.get_workflow_handle(run_id).terminate(reason="by hand")

    bad = await verify_all(settings)
    assert bad.code == 1, (bad.out, bad.err)
    expected = f"run {run_id}: status waiting_approval in Postgres, and its workflow is TERMINATED in Temporal"
    assert violations(bad) == [expected]  # its unrecorded step 1 was in flight: not a missing event
    report = await wp.verify_all("1h", settle_seconds=0)
    assert [v.line() for v in report.violations] == [expected]


async def test_a_tool_effect_recorded_twice(client: Client, engine: AsyncEngine, settings: Settings, worker):
    """A second tool_result event of one call, appended with a valid hash chain."""
    wp = Waypoint(client, engine, settings)
    run_id = await finished_run(wp)
    async with engine.begin() as conn:
        last = (
            await conn.execute(
                text("SELECT seq, hash FROM events WHERE run_id = :r ORDER BY seq DESC LIMIT 1"), {"r": run_id}
            )
        ).one()
        copy = (
            await conn.execute(
                text("SELECT step, kind, payload FROM events WHERE run_id = :r AND kind = 'tool_result' AND step = 2"),
                {"r": run_id},
            )
        ).one()
        seq = last.seq + 1
        digest = event_hash(last.hash, run_id=run_id, seq=seq, step=copy.step, kind=copy.kind, payload=copy.payload)
        await conn.execute(
            text(
                "INSERT INTO events (run_id, seq, step, kind, payload, prev_hash, hash) "
                "VALUES (:r, :seq, :step, :kind, CAST(:payload AS jsonb), :prev, :hash)"
            ),
            {
                "r": run_id,
                "seq": seq,
                "step": copy.step,
                "kind": copy.kind,
                "payload": json.dumps(copy.payload),
                "prev": last.hash,
                "hash": digest,
            },
        )
    assert (await wp.verify(run_id)).ok  # a valid chain: only the count of results per call shows it
    bad = await verify_all(settings)
    assert bad.code == 1
    assert violations(bad) == [f"run {run_id}: step 2 call 0: 2 tool_result events (one tool effect recorded 2 times)"]


async def test_usage_errors(settings: Settings):
    assert "give a run id, or --all" in one_line_error(await waypoint(settings, "verify"))
    assert "not both" in one_line_error(await waypoint(settings, "verify", "run-x", "--all"))
    assert "--since goes with --all" in one_line_error(await waypoint(settings, "verify", "run-x", "--since", "2h"))
    assert "--since='yesterday'" in one_line_error(await waypoint(settings, "verify", "--all", "--since", "yesterday"))


async def test_http_route(client: Client, engine: AsyncEngine, settings: Settings, worker, api):
    wp = Waypoint(client, engine, settings)
    run_id = await finished_run(wp)
    clean = (await api.http.get("/v1/verify", params={"since": "1h"})).json()
    assert clean["ok"] is True and clean["runs"] == 1 and clean["violations"] == []

    await retention(engine, ("DELETE FROM checkpoints WHERE run_id = :r AND step = 1", {"r": run_id}))
    bad = (await api.http.get("/v1/verify", params={"since": "1h", "limit": 10})).json()
    assert bad["ok"] is False
    assert [v["line"] for v in bad["violations"]] == [f"run {run_id}: checkpoint of step 1 is missing"]

    assert (await api.http.get("/v1/verify", params={"since": "yesterday"})).status_code == 400
    assert (await api.http.get("/v1/verify", params={"limit": 0})).status_code == 422
    schema = (await api.http.get("/openapi.json")).json()
    assert "MirrorReport" in schema["components"]["schemas"]


async def _status(wp: Waypoint, run_id: str, status: str) -> bool:
    try:
        return (await wp.run(run_id)).status == status
    except Exception:
        return False


async def test_runs_written_through_the_payload_codec(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry
):
    """Activity inputs decode with the client's keys; without them, one error naming the setting."""
    key = base64.b64encode(os.urandom(32)).decode()
    enc_settings = settings.model_copy(update={"codec_keys": SecretStr(f"k1:{key}")})
    enc_client = await connect_temporal(enc_settings)
    async with build_worker(enc_client, engine, enc_settings, agents):
        wp = Waypoint(enc_client, engine, enc_settings)
        run_id = await finished_run(wp)
    assert (await wp.verify_all("1h")).ok
    await retention(
        engine,
        ("DELETE FROM events WHERE run_id = :r AND step = 3", {"r": run_id}),
        ("DELETE FROM checkpoints WHERE run_id = :r AND step = 3", {"r": run_id}),
    )
    report = await wp.verify_all("1h")
    missing = f"run {run_id}: step 3: its model call completed in Temporal, and no model_response event has it"
    assert missing in [v.line() for v in report.violations]
    with pytest.raises(ConfigError, match="WAYPOINT_CODEC_KEYS"):
        await Waypoint(client, engine, settings).verify_all("1h")
