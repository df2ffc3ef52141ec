"""The log is append-only and tamper-evident; `verify` names the first broken link."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import one_line_error, waypoint
from waypoint import telemetry
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.store import RunStore
from waypoint.telemetry.spanfile import read_trace, span_file

pytestmark = pytest.mark.postgres


async def finished_run(client: Client, engine: AsyncEngine, settings: Settings) -> str:
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add", agent="calculator")
    await wp.result(run_id)
    return run_id


async def test_update_and_delete_are_refused(client: Client, engine: AsyncEngine, settings: Settings, worker):
    run_id = await finished_run(client, engine, settings)
    for statement in (
        "UPDATE events SET payload = '{}' WHERE run_id = :r",
        "DELETE FROM events WHERE run_id = :r",
        "UPDATE checkpoints SET state = '{}' WHERE run_id = :r",
        "DELETE FROM checkpoints WHERE run_id = :r",
    ):
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(text(statement), {"r": run_id})
    assert (await Waypoint(client, engine, settings).verify(run_id)).ok


async def test_verify_finds_a_row_changed_behind_the_triggers_back(
    client: Client, engine: AsyncEngine, settings: Settings, worker
):
    run_id = await finished_run(client, engine, settings)
    ok = await waypoint(settings, "verify", run_id)
    assert ok.code == 0 and "verified" in ok.out

    async with engine.begin() as conn:
        await conn.execute(text("ALTER TABLE events DISABLE TRIGGER events_append_only"))
        await conn.execute(
            text("UPDATE events SET payload = jsonb_set(payload, '{output}', '\"99\"') WHERE run_id = :r AND seq = 3"),
            {"r": run_id},
        )
        await conn.execute(text("ALTER TABLE events ENABLE TRIGGER events_append_only"))

    verdict = await Waypoint(client, engine, settings).verify(run_id)
    assert not verdict.ok and verdict.problems[0].startswith("event seq 3 (tool_result, step 1)")
    bad = await waypoint(settings, "verify", run_id)
    assert bad.code == 1 and "event seq 3" in bad.err and len(bad.err.strip().splitlines()) == 1


async def test_verify_covers_outputs_stored_in_the_ledger(client: Client, engine: AsyncEngine, settings, worker):
    run_id = await finished_run(client, engine, settings)
    async with engine.begin() as conn:  # the ledger is not append-only: a changed output must still show
        await conn.execute(
            text("UPDATE tool_effects SET output = '99' WHERE idempotency_key = :k"), {"k": f"{run_id}:1:0"}
        )
    verdict = await Waypoint(client, engine, settings).verify(run_id)
    assert not verdict.ok
    assert "tool ledger's output does not match the hash" in verdict.problems[0], verdict.problems


async def test_delete_removes_every_trace_of_a_run(client: Client, engine: AsyncEngine, settings, memory_worker):
    wp, memory = memory_worker
    telemetry.setup(settings)  # spans into the state folder's span file, as on the embedded stack
    try:
        earlier = await wp.start_run("What is the launch code?", agent="scout")
        assert (await wp.result(earlier)).status == "completed"
        run_id = await wp.start_run("What is the launch code?", agent="scout")  # recalls the earlier run
        assert (await wp.result(run_id)).status == "completed"
        async with engine.connect() as conn:
            kept = "SELECT count(*) FROM recalled_texts WHERE run_id = :r"
            assert await conn.scalar(text(kept), {"r": run_id}) > 0
        trace_id = (await wp.run(run_id)).trace_id
        telemetry.current().force_flush()
        spans = span_file(settings.state_dir)
        assert trace_id and read_trace(spans, trace_id)
        assert await memory.list_run(settings.tenant, run_id)

        refused = await waypoint(settings, "--tenant", "someone-else", "delete", run_id, "--yes")
        assert "no run" in one_line_error(refused)
        done = await waypoint(settings, "delete", run_id, "--yes")
        assert done.code == 0, done.err
    finally:
        telemetry.reset()
    with pytest.raises(NotFound):
        await wp.run(run_id)
    async with engine.connect() as conn:
        for table in ("events", "checkpoints", "tool_effects", "recalled_texts", "compactions", "runs"):
            left = await conn.scalar(text(f"SELECT count(*) FROM {table} WHERE run_id = :r"), {"r": run_id})
            assert left == 0, table
    assert await memory.list_run(settings.tenant, run_id) == []  # no episode comes back from recall
    assert not [m for m in await wp.memory_search("launch code ZEBRA-7") if m.run_id == run_id]
    assert read_trace(spans, trace_id) == []


async def test_forget_works_on_episodes_whose_run_is_gone(
    client: Client, engine: AsyncEngine, store: RunStore, memory_worker
):
    wp, memory = memory_worker
    run_id = await wp.start_run("What is the launch code?", agent="scout")
    await wp.result(run_id)
    stored = len(await memory.list_run(wp.settings.tenant, run_id))
    await store.integrity.delete_run(wp.settings.tenant, run_id)  # as a delete before episodes were removed did
    assert await wp.memory_forget(run_id) == stored > 0
    with pytest.raises(NotFound):  # nothing left: neither episodes nor a run
        await wp.memory_forget(run_id)
