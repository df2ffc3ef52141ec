"""The log is append-only and tamper-evident; `verify` names the first broken link."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import waypoint
from waypoint.app.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound

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


async def test_delete_is_the_retention_path(client: Client, engine: AsyncEngine, settings: Settings, worker):
    run_id = await finished_run(client, engine, settings)
    done = await waypoint(settings, "delete", run_id, "--yes")
    assert done.code == 0, done.err
    with pytest.raises(NotFound):
        await Waypoint(client, engine, settings).run(run_id)
    async with engine.connect() as conn:
        left = await conn.scalar(text("SELECT count(*) FROM events WHERE run_id = :r"), {"r": run_id})
    assert left == 0
