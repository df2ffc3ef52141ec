"""Connections and migrations for the Postgres mirror."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, make_url, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from waypoint.config import Settings
from waypoint.errors import ConfigError, InvalidInput, Unavailable, WaypointError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# The newest migration's revision. Starting a worker or the demo compares the database against it
# without importing Alembic or parsing every migration file (about a second on 2 cores);
# tests/test_migrations.py checks it is Alembic's head, so a new migration cannot leave it behind.
SCHEMA_HEAD = "0025"


def async_url(url: str) -> URL:
    """Accept any `postgresql://` URL and pick the asyncpg driver."""
    try:
        parsed = make_url(url)
    except Exception:
        raise ConfigError(f"not a database URL: {url!r} (expected postgresql://user:pass@host:port/db)") from None
    if parsed.get_backend_name() not in ("postgresql", "postgres"):
        raise ConfigError(f"Waypoint needs PostgreSQL, got {parsed.get_backend_name()!r} in the database URL")
    return parsed.set(drivername="postgresql+asyncpg")


def create_engine(
    url: str, *, pool_size: int = 15, max_overflow: int = 0, statement_timeout_ms: int = 0, **kwargs: Any
) -> AsyncEngine:
    """An engine that survives a Postgres restart: a connection that sat idle in the pool for
    more than IDLE_PING_SECONDS is pinged before it is handed out, and replaced if the server
    dropped it (a query already in flight fails, and the activity's retry policy runs it again).
    A connection back within that half second is not pinged: under load (many steps a second) a ping
    per checkout would be one more round trip on every step's hot path, about 15% of
    record_step's client CPU in benchmarks/checkpoints.py."""
    connect_args: dict[str, Any] = dict(kwargs.pop("connect_args", {}))
    if statement_timeout_ms:
        # Sent in the startup packet, so it also holds behind pgbouncer (no SET per transaction).
        settings = dict(connect_args.get("server_settings", {}))
        settings["statement_timeout"] = str(statement_timeout_ms)
        connect_args["server_settings"] = settings
    engine = create_async_engine(
        async_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        connect_args=connect_args,
        **kwargs,
    )
    _ping_when_idle(engine)
    return engine


# Like the "alive bypass window" of JDBC pools: a connection used this recently is taken as alive.
IDLE_PING_SECONDS = 0.5


def _ping_when_idle(engine: AsyncEngine) -> None:
    pool = engine.sync_engine.pool

    @event.listens_for(pool, "checkin")
    def checkin(dbapi_connection: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    @event.listens_for(pool, "checkout")
    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since <= IDLE_PING_SECONDS:
            return
        try:
            dbapi_connection.ping()
        except Exception as exc:  # the pool discards it and checks out (or opens) another
            raise DisconnectionError(f"pooled connection was dropped by the server: {exc}") from exc


def database_error(exc: BaseException) -> WaypointError | None:
    """What a failure of the database itself means for a user, or None when it is not one (a bug).
    The one translation the shells (CLI, HTTP) apply to whatever a store call raised."""
    if isinstance(exc, OSError):  # refused, no such socket, unknown host: asyncpg raises these as they are
        reason = exc.strerror or str(exc) or type(exc).__name__
        return Unavailable(
            f"cannot reach Postgres ({reason}): start the embedded stack with `waypoint dev`, or check "
            "WAYPOINT_DATABASE_URL and that its server runs"
        )
    if isinstance(exc, OperationalError | InterfaceError) or (
        isinstance(exc, DBAPIError) and (exc.connection_invalidated or is_outage(exc))
    ):
        return Unavailable(f"Postgres dropped the connection ({_first_line(exc)}): try again when it is back")
    if isinstance(exc, ProgrammingError) and "does not exist" in _first_line(exc):
        return ConfigError(f"the database has no Waypoint schema ({_first_line(exc)}): run `waypoint migrate`")
    # SQLSTATE class 22, a data exception (a value out of a column's range, a NUL in a text): no retry heals it.
    if isinstance(exc, DBAPIError) and str(getattr(exc.orig, "sqlstate", None) or "").startswith("22"):
        return InvalidInput(f"Postgres refused a value ({_first_line(exc)}): it is out of range for the run's record")
    if isinstance(exc, DBAPIError):
        return ConfigError(f"Postgres refused ({_first_line(exc)}): check WAYPOINT_DATABASE_URL and the role's grants")
    return None


# SQLSTATEs of a server that is going away or not back yet: a connection exception (class 08),
# an administrator or crash shutdown, "the database system is starting up / shutting down" (57P01-03),
# too many connections (53300). A restart or a failover answers these for a few seconds; asyncpg
# raises them as plain errors, which SQLAlchemy wraps as DBAPIError, not OperationalError.
OUTAGE_SQLSTATES = ("08", "57P01", "57P02", "57P03", "53300")


def is_outage(exc: BaseException) -> bool:
    """Whether Postgres refused because it is restarting or full, not because of the request."""
    sqlstate = str(getattr(getattr(exc, "orig", None), "sqlstate", None) or getattr(exc, "sqlstate", None) or "")
    return bool(sqlstate) and sqlstate.startswith(OUTAGE_SQLSTATES)


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    return (str(orig).strip().splitlines() or [type(orig).__name__])[0]


def engine_for(settings: Settings, url: str) -> AsyncEngine:
    """The engine of a long-lived process (worker, CLI), sized and bounded by the settings."""
    return create_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        statement_timeout_ms=settings.db_statement_timeout_ms,
    )


def with_database(url: str, database: str) -> str:
    return async_url(url).set(database=database).render_as_string(hide_password=False)


async def ensure_database(url: str) -> None:
    """Create the URL's database if it does not exist (used for the embedded server and tests)."""
    target = async_url(url)
    admin = create_async_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            exists = await conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": target.database})
            if not exists:
                await conn.execute(text(f'CREATE DATABASE "{target.database}"'))
    finally:
        await admin.dispose()


def _alembic_config(connection: Connection | None = None) -> Config:
    # Alembic is imported when a migration step runs, never by a command that only reads.
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Apply the Alembic migrations up to `revision`; a database already at the head is left as it is
    without loading Alembic."""
    if revision == "head" and await current_revision(engine) == SCHEMA_HEAD:
        return
    from alembic import command

    def upgrade(connection: Connection) -> None:
        command.upgrade(_alembic_config(connection), revision)

    # No transaction around the run: each migration gets its own (transaction_per_migration), and
    # one that needs autocommit (CREATE INDEX CONCURRENTLY) can step out of it with autocommit_block().
    async with engine.connect() as conn:
        await conn.run_sync(upgrade)
        await conn.commit()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The database's schema revision, or None before the first migration."""
    async with engine.connect() as conn:
        if await conn.scalar(text("SELECT to_regclass('alembic_version')")) is None:
            return None
        return await conn.scalar(text("SELECT version_num FROM alembic_version"))


async def schema_revision(engine: AsyncEngine) -> tuple[str | None, str]:
    """(current revision of the database, newest revision this code knows)."""
    return await current_revision(engine), SCHEMA_HEAD


def alembic_head() -> str:
    """The head of the migration scripts, as Alembic reads them (what SCHEMA_HEAD must equal)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_alembic_config()).get_current_head() or ""
