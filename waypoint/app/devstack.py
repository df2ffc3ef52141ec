"""What `waypoint dev` and `waypoint worker` do behind the CLI, and the pieces the demos share:
starting the embedded stack, preparing its database, spawning worker processes."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.agents import AgentRegistry
from waypoint.app import console as out
from waypoint.app.embedded import EmbeddedStack, StackInfo
from waypoint.app.loop import run
from waypoint.app.worker import load_agents, run_worker, stop_event, versioning
from waypoint.client import Waypoint, database_url
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.errors import WaypointError
from waypoint.gateway.temporal import connect
from waypoint.store.db import create_engine, engine_for, ensure_database, migrate


async def prepare_database(url: str) -> AsyncEngine:
    """Create the database if needed and apply migrations; returns an engine on it."""
    try:
        await ensure_database(url)
        engine = create_engine(url)
        await migrate(engine)
    except OSError as exc:
        raise WaypointError(f"cannot reach Postgres ({exc}): check WAYPOINT_DATABASE_URL") from None
    return engine


def start_stack(settings: Settings, *, ui: bool, worker: bool) -> tuple[EmbeddedStack, Settings]:
    stack = EmbeddedStack(
        Path(settings.state_dir),
        temporal_port=settings.temporal_port,
        ui_port=settings.temporal_ui_port if ui else None,
        namespace=settings.temporal_namespace,
        postgres=settings.database_url is None,
    )
    with out.console.status("starting Temporal and Postgres..."):
        info = stack.start(worker=worker)
    return stack, with_stack(settings, info)


def with_stack(settings: Settings, info: StackInfo) -> Settings:
    return settings.model_copy(
        update={
            "database_url": settings.database_url or info.database_url,
            "temporal_address": info.temporal_address,
        }
    )


def serve(settings: Settings, *, worker: bool) -> None:
    # A bad agent module, or a port the API cannot have, fails here, before anything starts or
    # anything says it did.
    agents = load_agents(settings) if worker else None
    api = api_socket(settings.api_port, explicit="api_port" in settings.model_fields_set)
    try:
        stack, cfg = start_stack(settings, ui=True, worker=worker)
    except BaseException:
        api.close()
        raise
    try:
        run(_serve(cfg, stack.info, agents, api))  # a worker left behind does not hold it open
    finally:
        with out.console.status("stopping..."):
            stack.stop()
        out.console.print("stack stopped")


LOOPBACK = "127.0.0.1"


def api_socket(port: int, *, explicit: bool) -> socket.socket:
    """The socket of dev's HTTP API on the loopback address. A port the user set (WAYPOINT_API_PORT:
    `explicit`) that is taken is an error naming it; the default port, taken, gives a free one, so a
    second `waypoint dev` just works (its table prints the URL)."""
    from waypoint.app.http.server import listen_on

    fix = "set WAYPOINT_API_PORT to a free port (or stop what holds it)"
    return listen_on(LOOPBACK, port, port_fix=fix, or_free=not explicit)


async def _serve(
    settings: Settings, info: StackInfo | None, agents: AgentRegistry | None, api_sock: socket.socket
) -> None:
    stop = stop_event()
    seed_workspace(settings.resolved_workspace)  # so `waypoint run --agent demo` has notes to read
    engine = await prepare_database(settings.database_url or "")
    api: tuple[Any, asyncio.Task[None]] | None = None
    try:
        client = await connect(settings)
        here = f"running here, agents: {', '.join(agents.names())}" if agents else "none (start `waypoint worker`)"
        api, api_text = await _start_api(settings, Waypoint(client, engine, settings), api_sock)
        out.console.print(out.endpoints_table(settings, info, here, api_text))
        from waypoint.gateway.schedule import apply_schedule

        outcome = await apply_schedule(client, settings)
        out.console.print(
            f"compaction schedule {settings.compaction_schedule_id} {outcome} "
            f"(every {settings.compaction_interval_seconds:g} s; `waypoint compaction show`)"
        )
        # Said once the worker has registered its agents and polls: a run typed after it is known.
        if agents is not None:
            await run_worker(client, engine, settings, stop, ready=say_ready, agents=agents)
        else:
            say_ready()
            await stop.wait()
    finally:
        if api is not None:
            from waypoint.app.http.server import stop_api

            await stop_api(*api)
        await engine.dispose()


DEV_READY_LINE = "Ctrl-C stops everything."


def say_ready() -> None:
    out.console.print(DEV_READY_LINE)


async def _start_api(
    settings: Settings, wp: Waypoint, sock: socket.socket
) -> tuple[tuple[Any, asyncio.Task[None]] | None, str]:
    """The HTTP API in this process, on `sock` (see `api_socket`), without keys: on the loopback
    address only. If it fails to start, the rest of the stack runs on, and the table says why."""
    from waypoint.app.http.server import api_server, start_api, url_of

    port = sock.getsockname()[1]
    server = api_server(settings, host=LOOPBACK, port=port, auth=False, waypoint=wp)
    try:
        task = await start_api(server, sock)
    except WaypointError as exc:
        return None, f"not started: {exc}"
    url = url_of(server)
    text = f"{url} (viewer {url}/ui, docs {url}/docs); auth off: no API key needed, loopback only"
    if port != settings.api_port:
        text += f"; port {settings.api_port} is in use, so this free one (WAYPOINT_API_PORT sets it)"
    return (server, task), text


async def worker_main(settings: Settings) -> None:
    versioned = versioning(settings).get("deployment_config")  # a bad version stops it before anything starts
    version = (
        f"; deployment version {versioned.version.to_canonical_string()} ({settings.worker_versioning})"
        if versioned
        else ""
    )
    agents = load_agents(settings)
    engine = engine_for(settings, database_url(settings))
    try:
        client = await connect(settings)

        def ready() -> None:
            # spawn_worker() waits for this line.
            print(
                f"{READY_LINE}: polling {settings.task_queue} on {settings.temporal_address}; "
                f"agents: {', '.join(agents.names())}{version}",
                flush=True,
            )

        await run_worker(client, engine, settings, stop_event(), ready, agents=agents)
    finally:
        await engine.dispose()


READY_LINE = "worker ready"


def spawn_worker(env: dict[str, str], *, timeout: float = 60.0) -> subprocess.Popen[str]:
    """Start a worker process (`waypoint worker`) with `env`, and return once it polls."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "waypoint", "worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:  # the process ended
            break
        lines.append(line)
        if line.startswith(READY_LINE):
            # Keep draining its output, so a chatty worker never blocks on a full pipe.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
    proc.kill()
    raise WaypointError(f"the worker did not start: {''.join(lines[-5:]).strip() or 'no output'}")
