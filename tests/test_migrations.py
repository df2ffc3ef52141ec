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
