"""The Alembic migrations and the SQLAlchemy tables the code queries describe the same schema."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.store.db import SCHEMA_HEAD, alembic_head, migrate, schema_revision
from waypoint.store.schema import metadata

pytestmark = pytest.mark.postgres


async def test_migrated_database_matches_the_table_definitions(engine: AsyncEngine):
    def diff(connection):
        return compare_metadata(MigrationContext.configure(connection), metadata)

    async with engine.connect() as conn:
        changes = await conn.run_sync(diff)
    # server-side index differences are reported as ("add_index"/"remove_index", ...): indexes live in the migration
    assert [c for c in changes if not (isinstance(c, tuple) and c[0] in ("add_index", "remove_index"))] == []
    current, head = await schema_revision(engine)
    assert current == head


def test_the_schema_head_constant_is_alembics_head():
    """Workers and the demo compare the database against SCHEMA_HEAD without loading Alembic: a new
    migration that forgot to move it would let a worker start on an old schema."""
    assert SCHEMA_HEAD == alembic_head()


async def test_migrate_goes_to_alembic_only_when_the_schema_is_behind(engine: AsyncEngine, monkeypatch):
    """The fast path skips Alembic at the head, and only there: a database one revision behind
    is handed to Alembic's upgrade."""
    from alembic import command
    from sqlalchemy import text

    asked: list[str] = []
    monkeypatch.setattr(command, "upgrade", lambda cfg, revision: asked.append(revision))
    await migrate(engine)
    assert asked == []
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = 'older'"))
    try:
        await migrate(engine)
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": SCHEMA_HEAD})
    assert asked == ["head"]


async def test_a_migration_can_run_in_autocommit(engine: AsyncEngine):
    """0005 builds its index CONCURRENTLY, which Postgres refuses inside a transaction: a valid
    index proves the migration ran in autocommit and completed."""
    from sqlalchemy import text

    async with engine.connect() as conn:
        valid = await conn.scalar(
            text(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = 'runs_trace_id_idx'"
            )
        )
    assert valid is True


async def test_0018_gives_runs_from_before_no_fingerprint_and_indexes_the_filter(fresh_database: str):
    """Runs started before agent versions keep their rows with no fingerprint (call_model then offers
    the worker's tools); the filter's index serves prefixes; the downgrade drops what 0018 added."""
    from alembic import command
    from sqlalchemy import text

    from waypoint.store.db import _alembic_config, create_engine

    engine = create_engine(fresh_database)  # its own database: it goes down a revision and back

    async def alembic(step, revision: str) -> None:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: step(_alembic_config(c), revision))
            await conn.commit()

    await alembic(command.downgrade, "0017")
    try:
        async with engine.begin() as conn:
            assert await conn.scalar(text("SELECT to_regclass('agent_versions')")) is None
            await conn.execute(
                text(
                    "INSERT INTO runs (run_id, tenant_id, agent, task, model, status, max_steps) "
                    "VALUES ('run-before', 't', 'a', 'x', 'scripted', 'completed', 3)"
                )
            )
    finally:
        await alembic(command.upgrade, "head")
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT agent_fingerprint FROM runs WHERE run_id = 'run-before'")) is None
        index = await conn.scalar(text("SELECT indexdef FROM pg_indexes WHERE indexname = 'runs_agent_fingerprint'"))
        keys = await conn.scalar(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'agent_versions_pkey'")
        )
    await alembic(command.downgrade, "0017")  # and the downgrade undoes it all
    async with engine.connect() as conn:
        gone = await conn.scalar(text("SELECT to_regclass('agent_versions')"))
    await engine.dispose()
    assert "text_pattern_ops" in index and "tenant_id" in index
    assert keys == "PRIMARY KEY (tenant_id, fingerprint)"
    assert gone is None


async def test_0022_gives_runs_that_failed_over_before_it_their_models_from_their_events(fresh_database: str):
    """A run that failed over (and back) before 0022 gets the model it was on last and the models it
    was on, in order of first use, from its `model_failover` events; a run that never did keeps both
    null (it reads as on its `model`); the downgrade drops both columns."""
    from alembic import command
    from sqlalchemy import text

    from waypoint.store.db import _alembic_config, create_engine

    engine = create_engine(fresh_database)

    async def alembic(step, revision: str) -> None:
        async with engine.connect() as conn:
            await conn.run_sync(lambda c: step(_alembic_config(c), revision))
            await conn.commit()

    run = (
        "INSERT INTO runs (run_id, tenant_id, agent, task, model, status, max_steps) "
        "VALUES (:id, 't', 'a', 'x', :m, 'completed', 3)"
    )
    move = (
        "INSERT INTO events (run_id, seq, step, kind, payload, hash) "
        "VALUES ('run-moved', :seq, :seq, 'model_failover', CAST(:payload AS jsonb), :hash)"
    )
    await alembic(command.downgrade, "0021")
    try:
        async with engine.begin() as conn:
            await conn.execute(text(run), [{"id": "run-moved", "m": "openai:a"}, {"id": "run-stayed", "m": "openai:a"}])
            for seq, (frm, to) in enumerate(
                (("openai:a", "openai:b"), ("openai:b", "openai:c"), ("openai:c", "openai:a")), 1
            ):
                payload = f'{{"from": "{frm}", "to": "{to}"}}'
                await conn.execute(text(move), {"seq": seq, "payload": payload, "hash": f"h{seq}"})
    finally:
        await alembic(command.upgrade, "head")
    async with engine.connect() as conn:
        found = {
            r.run_id: (r.current_model, r.models_used)
            for r in await conn.execute(text("SELECT run_id, current_model, models_used FROM runs"))
        }
    await alembic(command.downgrade, "0021")
    async with engine.connect() as conn:
        columns = set(
            await conn.scalars(text("SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"))
        )
    await engine.dispose()
    assert found == {"run-moved": ("openai:a", ["openai:a", "openai:b", "openai:c"]), "run-stayed": (None, None)}
    assert not {"current_model", "models_used"} & columns
