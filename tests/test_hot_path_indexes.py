"""Every statement a run's steps send to Postgres reads the tables that grow with the fleet through an
index, as the planner would run it on a big database (issue 43).

A step's statements are captured as the store sends them (a `before_cursor_execute` listener while
real runs go through the defaults' path: memory on, a worker as `waypoint worker` runs it), so a new
statement on the hot path is covered without touching this file. Each is then explained with the
parameters it was sent with (the custom plan) and as the generic plan a connection may switch to once
it has run a prepared statement five times (a plan made for any parameters keeps its choice until the
next ANALYZE). The window read's plain join scanned all of `events` once per step in the benchmark,
in both plans, while the table held up to about 25,000 rows.
The tables are filled with a few thousand rows of finished runs and analyzed first, so the planner
chooses as it would on a fleet's database, not on a handful of rows where a scan is the right plan.
Not seen here: the statements inside the budget functions (PL/pgSQL), and the ones of triggers.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio.client import Client

from waypoint.agents import AgentRegistry
from waypoint.app.worker import run_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.store.db import create_engine

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

# Finished runs of another tenant: 3,000 runs (each with its budget pool, a compaction and an agent
# version), the first 60 of them with the history of 50 steps (150 events each: 9,000 events, 3,060
# checkpoints, 3,000 ledger rows, 1,080 recalled texts). Enough pages that a scan costs the planner
# more than an index probe; fewer would not be a fleet (a table of a few pages is best scanned). The
# old window read scanned `events` with these tables and a window of 30 steps (up to about 25,000
# events with windows of 50 steps).
FLEET_RUNS = 3_000
FILLER_RUNS = 60
WINDOW_STEPS = 30  # the looper's steps: its last window read asks for 31 ranges

FILL = [
    """INSERT INTO runs (run_id, tenant_id, agent, task, model, status, max_steps, steps, root_run_id, remembered_step)
       SELECT 'fill-' || g, 'filler', 'calculator', 'x', 'scripted', 'completed', 30, 20, 'fill-' || g, 20
       FROM generate_series(1, :fleet) g""",
    """INSERT INTO events (run_id, seq, step, kind, payload, prev_hash, hash)
       SELECT 'fill-' || g, s, (s + 1) / 3, CASE s % 3 WHEN 0 THEN 'tool_result' ELSE 'model_response' END,
              jsonb_build_object('idempotency_key', concat_ws(chr(58), 'fill-' || g, (s + 1) / 3, 0),
                                 'content', repeat('y', 200)),
              NULL, md5(g || '.' || s)
       FROM generate_series(1, :n) g, generate_series(1, 150) s""",
    """INSERT INTO checkpoints (run_id, step, state, last_event_seq, state_hash, schema_version)
       SELECT 'fill-' || g, s, '{"schema": 2, "segments": [], "dropped_steps": 0, "pinned": []}', 3 * s, 'h', 2
       FROM generate_series(1, :n) g, generate_series(0, 50) s""",
    """INSERT INTO tool_effects (idempotency_key, run_id, step, call_index, tool, arguments, output, outcome,
                                duration_ms, attempt)
       SELECT concat_ws(chr(58), 'fill-' || g, s, 0), 'fill-' || g, s, 0, 'add', '{}', repeat('o', 100), 'ok', 1, 1
       FROM generate_series(1, :n) g, generate_series(1, 50) s""",
    """INSERT INTO recalled_texts (run_id, sha256, text)
       SELECT 'fill-' || g, md5(g || '.' || s), 'r' FROM generate_series(1, :n) g, generate_series(1, 18) s""",
    """INSERT INTO budget_pools (root_run_id, tenant_id)
       SELECT 'fill-' || g, 'filler' FROM generate_series(1, :fleet) g""",
    """INSERT INTO compactions (run_id, tenant_id, first_seq, last_seq, first_step, last_step, tokens_before,
                               tokens_after, summary, structured, pinned, pruned, method)
       SELECT 'fill-' || g, 'filler', 2, 30, 1, 10, 1000, 100, 's', '{}', '[]', '[]', 'extractive'
       FROM generate_series(1, :fleet) g""",
    """INSERT INTO agent_versions (tenant_id, fingerprint, agent, instructions)
       SELECT 'filler', md5(g::text), 'calculator', 'x' FROM generate_series(1, :fleet) g""",
    # every start and every decision of the fleet's runs is an audited action, in ten tenants' chains
    """INSERT INTO audit_log (tenant_id, seq, actor, role, surface, action, outcome, hash)
       SELECT 'filler-' || (g % 10), g, 'local', 'admin', 'python', 'run.start', 'ok', md5(g::text)
       FROM generate_series(1, 3 * :fleet) g""",
]
# Tables whose rows stay bounded by the work in flight or by the agents registered, whatever the
# fleet's history: a scan of a few rows is the right plan there.
BOUNDED = {
    "alembic_version",
    "agents",
    "scorers",
    "budget_reservations",
    "capacity_leases",
    "capacity_waiters",
    "capacity_requests",
    "model_key_health",
}
Captured = dict[str, Any]  # statement text -> the parameters it was last sent with (the longest window)


@pytest.fixture
async def big_engine(fresh_database: str) -> AsyncIterator[AsyncEngine]:
    """A database of its own, with a fleet's worth of finished runs in it, analyzed."""
    engine = create_engine(fresh_database)
    async with engine.begin() as conn:
        for statement in FILL:
            await conn.execute(text(statement), {"n": FILLER_RUNS, "fleet": FLEET_RUNS})
    async with engine.connect() as conn:
        await (await conn.execution_options(isolation_level="AUTOCOMMIT")).execute(text("ANALYZE"))
    yield engine
    await engine.dispose()


@pytest.fixture
def captured(big_engine: AsyncEngine) -> Iterator[Captured]:
    found: Captured = {}

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().split(None, 1)[0].upper() in {"SELECT", "WITH", "INSERT", "UPDATE", "DELETE"}:
            found[statement] = parameters[0] if executemany else parameters

    event.listen(big_engine.sync_engine, "before_cursor_execute", capture)
    yield found
    event.remove(big_engine.sync_engine, "before_cursor_execute", capture)


def scans(plan: dict[str, Any]) -> list[str]:
    """The tables a plan reads in full (Seq Scan nodes, at any depth)."""
    found = [plan["Relation Name"]] if plan.get("Node Type") == "Seq Scan" else []
    return found + [t for child in plan.get("Plans", []) for t in scans(child)]


def literal(value: Any, pg_type: str) -> str:
    """`value` as a SQL literal of `pg_type` (what EXECUTE of a prepared statement takes)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return str(value)
    if isinstance(value, list | tuple) and pg_type.endswith("[]"):
        items = ("NULL" if v is None else '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in value)
        text_ = "{" + ",".join(items) + "}"
    elif isinstance(value, dict | list | tuple):
        text_ = json.dumps(value)
    elif isinstance(value, date | datetime):
        text_ = value.isoformat()
    else:
        text_ = str(value)
    return "'" + text_.replace("'", "''") + "'"


async def explain(conn: AsyncConnection, statement: str, parameters: Any, *, generic: bool) -> dict[str, Any]:
    """The plan of `statement`: with `parameters` in it (the custom plan a connection uses for its
    first five runs of a prepared statement), or the generic plan it may switch to after them, as
    EXECUTE of a prepared statement shows it with `plan_cache_mode = force_generic_plan`."""
    if not generic:
        raw = (await conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters)).scalar()
    else:
        await conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
        await conn.exec_driver_sql(f"PREPARE hot AS {statement}")
        try:
            types = await conn.scalar(
                text("SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'hot'")
            )
            args = ", ".join(literal(v, t) for v, t in zip(parameters, types or [], strict=True))
            raw = (
                await conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) EXECUTE hot{f'({args})' if args else ''}")
            ).scalar()
        finally:
            await conn.exec_driver_sql("DEALLOCATE hot")
            await conn.exec_driver_sql("RESET plan_cache_mode")
    return (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]  # type: ignore[no-any-return]


async def test_the_hot_path_reads_growing_tables_through_indexes(
    client: Client, big_engine: AsyncEngine, captured: Captured, settings: Settings, agents: AgentRegistry
):
    settings = settings.model_copy(update={"database_url": str(big_engine.url)})
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.create_task(run_worker(client, big_engine, settings, stop, ready.set, agents))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        wp = Waypoint(client, big_engine, settings)
        runs = [
            await wp.start_run("add things", agent="calculator"),
            await wp.start_run("loop", agent="looper", max_steps=WINDOW_STEPS),
        ]
        results = [await wp.result(run_id) for run_id in runs]
    finally:
        stop.set()
        await worker
    assert results[0].status == "completed" and results[1].steps == WINDOW_STEPS
    statements = dict(captured)
    # The step's own writes and reads are among them (so the capture saw the hot path).
    assert any("INSERT INTO events" in s for s in statements)
    assert any("FROM events" in s and "unnest" in s for s in statements)  # the window's read

    async with big_engine.connect() as conn:
        full_reads, generic_params = [], 0
        for statement, parameters in statements.items():
            for generic in (False, True):
                plan = await explain(conn, statement, parameters, generic=generic)
                generic_params += generic and "$1" in json.dumps(plan)
                for table in scans(plan):
                    if table not in BOUNDED:
                        kind = "generic" if generic else "custom"
                        full_reads.append(f"{table} ({kind} plan): {' '.join(statement.split())[:300]}")
    # A table that grows with the fleet and shows here wants an index (or a query that uses one); a
    # table that does not grow belongs in BOUNDED.
    assert not full_reads, "\n".join(full_reads)
    assert generic_params > 10  # the generic plans were generic (their conditions name parameters)
