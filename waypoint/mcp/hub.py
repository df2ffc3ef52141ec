"""A worker's MCP side: one session per server per process, the tools each run recorded, calls.

    hub = MCPHub(store)                                   # built once per worker process
    tools = await hub.discover(agent.name, agent.mcp, own)  # start_run: list every server's tools
    text, is_error = await hub.call(server, tool, args, key=..., ...)   # run_tool
    await hub.close()                                     # worker shutdown: stdio servers stop

Sessions open on first use and are kept: a stdio server is a child process of the worker, started
once and started again when it died (the call that found it dead fails; its retry gets a fresh
one). HTTP sessions need no worker affinity: any worker opens its own.

The SDK is imported when the worker is built if its agents use MCP servers (`warm`), else when the
first session opens, so a worker whose agents use none never loads it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from waypoint.errors import MCPCallFailed, MCPStartFailed
from waypoint.mcp.servers import MCPServer
from waypoint.mcp.tools import MCPTool, check_names, result_text, tools_of

if TYPE_CHECKING:
    from waypoint.mcp.session import MCPSession, TaskState

log = logging.getLogger("waypoint.mcp")

# The key under which `tools/call` carries the call's idempotency key in `_meta`.
IDEMPOTENCY_META_KEY = "waypoint/idempotency-key"
# Runs whose recorded tools a worker keeps in memory (they never change, so the cache is exact).
RECORDED_RUNS = 1_024
# Polling a task: at the server's pollIntervalMs, within these bounds.
MIN_POLL_SECONDS = 0.1
MAX_POLL_SECONDS = 5.0


class RecordedTools(Protocol):
    async def recorded_mcp_tools(self, tenant_id: str, run_id: str) -> list[dict[str, Any]]: ...


class MCPHub:
    def __init__(self, store: RecordedTools | None = None):
        self.store = store
        self._sessions: dict[MCPServer, MCPSession] = {}
        self._locks: dict[MCPServer, asyncio.Lock] = {}
        self._recorded: OrderedDict[tuple[str, str], dict[str, MCPTool]] = OrderedDict()
        self._closed = False

    def warm(self) -> None:
        """Import the SDK now, at worker start, for a worker whose agents use MCP servers: the first
        session must not import it on the event loop inside a tool call, where on a loaded machine it
        held the loop past the call's heartbeat timeout."""
        import waypoint.mcp.session  # noqa: F401

    # --- sessions ----------------------------------------------------------------------------------

    async def session(self, server: MCPServer) -> MCPSession:
        """The live session of `server`, opened (or opened again, if it died) on demand."""
        if self._closed:
            raise MCPCallFailed(f"MCP server {server.name!r}: this worker is shutting down")
        found = self._sessions.get(server)
        if found is not None and found.alive:
            return found
        async with self._locks.setdefault(server, asyncio.Lock()):
            found = self._sessions.get(server)
            if found is not None and found.alive:
                return found
            if found is not None:
                log.warning("MCP server %s died: starting a new session", server.name)
                await found.close()
            from waypoint.mcp.session import MCPSession

            session = MCPSession(server)
            await session.open()
            if self._closed:  # the worker began to stop while the server started
                await session.close()
                raise MCPCallFailed(f"MCP server {server.name!r}: this worker is shutting down")
            self._sessions[server] = session
            return session

    async def close(self) -> None:
        """Close every session (stdio servers are stopped); later calls fail with a clear reason."""
        self._closed = True
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    # --- a run's tools -----------------------------------------------------------------------------

    async def discover(self, agent: str, servers: Sequence[MCPServer], own: Sequence[str]) -> list[MCPTool]:
        """Every tool the servers list now, named as the run will know them. A server that does not
        answer fails the start (MCPStartFailed, with its command or URL and stderr tail); two tools
        with one name fail it too (ConfigError), unless a namespace tells them apart."""

        async def listed(server: MCPServer) -> list[MCPTool]:
            try:
                session = await self.session(server)
                return tools_of(server, await session.list_tools())
            except MCPCallFailed as exc:
                raise MCPStartFailed(
                    f"agent {agent!r} cannot start: {exc}. Check that the server runs and answers MCP "
                    "(for stdio, run its command by hand)"
                ) from None

        found = [tool for tools in await asyncio.gather(*(listed(s) for s in servers)) for tool in tools]
        check_names(agent, own, found)
        return found

    async def recorded(self, tenant_id: str, run_id: str) -> dict[str, MCPTool]:
        """The MCP tools run `run_id` recorded when it started, by the name the model knows."""
        key = (tenant_id, run_id)
        found = self._recorded.get(key)
        if found is None:
            if self.store is None:
                return {}
            rows = await self.store.recorded_mcp_tools(tenant_id, run_id)
            found = {t.name: t for t in map(MCPTool.of, rows)}
            self._recorded[key] = found
            while len(self._recorded) > RECORDED_RUNS:
                self._recorded.popitem(last=False)
        else:
            self._recorded.move_to_end(key)
        return found

    # --- calls -------------------------------------------------------------------------------------

    async def call(
        self,
        server: MCPServer,
        tool: MCPTool,
        arguments: dict[str, Any],
        *,
        key: str,
        timeout: float,
        task_id: str | None = None,
        on_task: Callable[[str | None], Awaitable[None]] | None = None,
    ) -> tuple[str, bool]:
        """Call the tool; its answer as (text for the model, is it an error result). The idempotency
        key rides in `_meta`. A server that makes a task of the call is polled until the task ends;
        `on_task` hears the task id first (to keep it durably), and a caller that kept one passes it
        back as `task_id` to resume polling instead of calling again. No answer: MCPCallFailed."""
        deadline = time.monotonic() + timeout
        session = await self.session(server)
        if task_id is not None:
            resumed = await self._resume(session, task_id, deadline)
            if resumed is not None:
                return resumed
            log.info("MCP task %s of %s is gone or ended without a result: calling again", task_id, key)
        from waypoint.mcp.session import TaskHandle

        answer = await session.call_tool(
            tool.remote, arguments, meta={IDEMPOTENCY_META_KEY: key}, timeout=max(deadline - time.monotonic(), 0.1)
        )
        if not isinstance(answer, TaskHandle):
            return result_text(answer)
        if on_task is not None:
            await on_task(answer.task_id)
        return await self._wait(session, answer.task_id, answer.poll_interval_ms, deadline)

    async def _resume(self, session: MCPSession, task_id: str, deadline: float) -> tuple[str, bool] | None:
        """Poll a task an earlier attempt started; None when there is nothing to resume (the task is
        unknown or expired, or it failed or was cancelled): then a new call is the retry."""
        try:
            state = await session.get_task(task_id)
        except MCPCallFailed:
            if not session.alive:
                raise
            return None
        if state.status in ("failed", "cancelled"):
            return None
        return await self._wait(session, task_id, None, deadline, first=state)

    async def _wait(
        self,
        session: MCPSession,
        task_id: str,
        interval_ms: int | None,
        deadline: float,
        *,
        first: TaskState | None = None,
    ) -> tuple[str, bool]:
        state = first or await session.get_task(task_id)
        while True:
            if state.status == "completed":
                return result_text(state.result or {})
            if state.status in ("failed", "cancelled"):
                error = state.error or {}
                why = error.get("message") or state.status_message or state.status
                code = f" (JSON-RPC error {error['code']})" if "code" in error else ""
                raise MCPCallFailed(f"MCP server {session.server.name!r}: task {task_id} {state.status}: {why}{code}")
            if state.status == "input_required":
                raise MCPCallFailed(
                    f"MCP server {session.server.name!r}: task {task_id} asks for input, which Waypoint "
                    "cannot give a tool yet; make the tool work without elicitation"
                )
            interval = (state.poll_interval_ms or interval_ms or 1_000) / 1000
            wait = min(max(interval, MIN_POLL_SECONDS), MAX_POLL_SECONDS)
            if time.monotonic() + wait > deadline:
                raise MCPCallFailed(
                    f"MCP server {session.server.name!r}: task {task_id} still {state.status} at the "
                    "tool's timeout; raise it with MCPServer(..., timeout=...) or timeouts={...}"
                )
            await asyncio.sleep(wait)
            state = await session.get_task(task_id)
