"""Running the API: uvicorn on the configured address, in its own process or inside `waypoint dev`."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
from collections.abc import Iterator

import uvicorn

from waypoint.app.http.app import create_app
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import ConfigError, InvalidInput, WaypointError

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiServer(uvicorn.Server):
    """uvicorn's server without its own signal handling: the process that runs it (`serve`, `dev`, a
    test) owns SIGINT and SIGTERM and stops it with `stop_api`."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


STOP_GRACE_SECONDS = 5
# Past its grace, a stop that still waits is forced, and past this again, its task is cancelled.
STOP_FORCE_SECONDS = 10


def api_server(
    settings: Settings, *, host: str, port: int, auth: bool = True, waypoint: Waypoint | None = None
) -> uvicorn.Server:
    """A uvicorn server of the API (not started). Auth can be off on a loopback address only."""
    if not auth and not is_loopback(host):
        raise InvalidInput(
            f"the API runs without keys on loopback addresses only, not on {host}: drop the address or turn auth on"
        )
    app = create_app(settings, auth=auth, waypoint=waypoint)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        access_log=False,
        # A browser following a live run keeps its stream open: on stop, give open requests this
        # long, then close them (a client resumes with Last-Event-ID), so stopping never hangs.
        timeout_graceful_shutdown=STOP_GRACE_SECONDS,
    )
    return ApiServer(config)


PORT_FIX = "pass --port or set WAYPOINT_API_PORT"
HOST_FIX = "pass --host or set WAYPOINT_API_HOST"


def listen_on(
    host: str, port: int, *, port_fix: str = PORT_FIX, host_fix: str = HOST_FIX, or_free: bool = False
) -> socket.socket:
    """A socket bound to host:port for `start_api`, or a ConfigError naming the fix. Bound here,
    not by uvicorn: its bind failure is a log line of its own and a SystemExit(3). `or_free`: a
    port in use gives a free one instead."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cannot listen on {host!r} ({getattr(exc, 'strerror', exc)}): {host_fix}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE and or_free:
            return listen_on(host, 0, port_fix=port_fix, host_fix=host_fix)
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} is in use on {host}: {port_fix}") from None
        fix = port_fix if exc.errno == errno.EACCES else host_fix
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}): {fix}") from None
    return sock


async def start_api(server: uvicorn.Server, sock: socket.socket | None = None) -> asyncio.Task[None]:
    """Start the server on this event loop, on `sock` (default: bound to its configured address
    by `listen_on`); returns once it listens (or raises why it could not)."""
    if sock is None:
        sock = listen_on(server.config.host, server.config.port)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            exc = task.exception() if not task.cancelled() else None
            sock.close()
            where = f"{server.config.host}:{server.config.port}"
            raise WaypointError(f"the HTTP API could not start on {where} ({exc or 'it stopped'})")
        await asyncio.sleep(0.02)
    return task


async def stop_api(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    """Stop the server: open live streams end cleanly first (each client gets the end of its stream
    and resumes with Last-Event-ID elsewhere), then uvicorn closes. sse-starlette ends its streams
    on its own flag, which it sets from uvicorn's signal handler, and ApiServer installs none: set it
    for the stop, and clear it after, so a later server in this process streams again."""
    from sse_starlette.sse import AppStatus

    server.should_exit = True
    AppStatus.should_exit = True
    try:
        done, _ = await asyncio.wait({task}, timeout=STOP_GRACE_SECONDS + STOP_FORCE_SECONDS)
        if not done:  # something holds the stop past its grace (a stream, the app's shutdown): cut it
            log.warning(
                "the HTTP API did not stop within %g s: its open connections and tasks are cut",
                STOP_GRACE_SECONDS + STOP_FORCE_SECONDS,
            )
            server.force_exit = True
            done, _ = await asyncio.wait({task}, timeout=STOP_FORCE_SECONDS)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return
        await task  # its own failure, if it failed
    finally:
        AppStatus.should_exit = False


def url_of(server: uvicorn.Server) -> str:
    host = server.config.host
    port = server.servers[0].sockets[0].getsockname()[1] if server.servers else server.config.port
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
