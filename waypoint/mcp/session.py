"""One live connection to one MCP server, through the `mcp` SDK's `Client`.

The SDK's client is an async context manager that runs its transport in task groups: it must be
entered and left by one task, and a transport that breaks cancels that task. So each session
has an owner task of its own that enters the client, waits until the session is closed, and
leaves it; activities on any task send requests through it concurrently. A stdio server is a
child process of this worker (its stderr goes to a file whose tail names what went wrong); an
HTTP server is reached over streamable HTTP, with the configured headers.

Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663): SDK 2.3 has no Tasks
implementation, only the extension seam. The session declares the extension with a result claim
for the `task` result shape, receives a `CreateTaskResult` from `tools/call` as it is
(`allow_claimed=True`), and polls `tasks/get` itself, so the caller can keep the task id
durably and resume polling after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from waypoint.errors import MCPCallFailed
from waypoint.mcp.servers import MCPServer
from waypoint.telemetry.redact import redact_text

log = logging.getLogger("waypoint.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# How much of a stdio server's stderr an error message quotes.
STDERR_TAIL_CHARS = 1_500
# A single tasks/get request (the task itself may run for hours).
POLL_REQUEST_TIMEOUT = 30.0
CLOSE_TIMEOUT = 10.0


class CreatedTask(types.Result):
    """The `task` result shape of `tools/call` (SEP-2663 `CreateTaskResult`)."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str = "working"
    status_message: str | None = None
    poll_interval_ms: int | None = None


class TaskParams(types.RequestParams):
    task_id: str


class GetTaskRequest(types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"  # SEP-2663: tasks/* carry the task id in the Mcp-Name header


class TaskState(types.Result):
    """A `tasks/get` answer: the task's status, and its result (completed) or error (failed)."""

    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


async def _not_resolved_here(created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    raise RuntimeError("waypoint polls MCP tasks itself: call session.call_tool(..., allow_claimed=True)")


class TasksSupport(ClientExtension):
    """Declares the Tasks extension, so a server may answer `tools/call` with a task."""

    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_not_resolved_here)]


@dataclass(frozen=True)
class TaskHandle:
    task_id: str
    poll_interval_ms: int | None = None


class MCPSession:
    def __init__(self, server: MCPServer):
        self.server = server
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._dead = False
        self._stderr: Path | None = None

    # --- life --------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Start (or reach) the server and wait until it answered the handshake; MCPCallFailed names
        the command or URL and what went wrong (for stdio, the tail of the server's stderr)."""
        self._owner = asyncio.create_task(self._own(), name=f"mcp session {self.server.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready.wait()), self.server.connect_timeout)
        except TimeoutError:
            error = self._error(f"did not answer within {self.server.connect_timeout:g} s")
            await self.close()
            raise error from None
        if self._client is None:
            failure = _innermost(self._failure)
            closed = isinstance(failure, MCPError) and failure.code == types.CONNECTION_CLOSED
            why = "it closed the connection before answering initialize" if closed else _describe(failure)
            error = self._error(why)
            await self.close()
            raise error

    async def _own(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = Client(
                    await self._transport(stack),
                    extensions=[TasksSupport()],
                    cache=None,
                    client_info=types.Implementation(name="waypoint", version="1"),
                )
                await stack.enter_async_context(client)
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except BaseException as exc:  # the transport broke, or the server never answered
            self._failure = exc
            if isinstance(exc, asyncio.CancelledError) and not self._closing.is_set():
                log.warning("MCP server %s: the connection ended", self.server.name)
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %s: %s", self.server.name, _describe(exc))
        finally:
            self._dead = True
            self._client = None
            self._ready.set()

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        server = self.server
        if server.transport == "stdio":
            fd, name = tempfile.mkstemp(prefix=f"waypoint-mcp-{server.name}-", suffix=".stderr")
            os.close(fd)
            self._stderr = Path(name)
            errlog = stack.enter_context(open(name, "a", encoding="utf-8"))  # O_APPEND: the tail stays readable
            params = StdioServerParameters(
                command=server.command or "", args=list(server.args), env=dict(server.env) or None, cwd=server.cwd
            )
            return stdio_client(params, errlog=errlog)
        import httpx2  # the SDK's HTTP client

        http = httpx2.AsyncClient(
            headers=dict(server.headers), timeout=httpx2.Timeout(30.0, read=max(server.timeout, 300.0))
        )
        await stack.enter_async_context(http)
        return streamable_http_client(server.url or "", http_client=http)

    @property
    def alive(self) -> bool:
        return self._client is not None and not self._dead and self._owner is not None and not self._owner.done()

    async def close(self) -> None:
        """Leave the session: a stdio server's stdin is closed, then it is stopped (SIGTERM, SIGKILL)."""
        self._closing.set()
        owner = self._owner
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(owner), CLOSE_TIMEOUT)
            except TimeoutError:
                owner.cancel()
                with contextlib.suppress(BaseException):
                    await owner
            except BaseException:  # closing never fails: the owner task logged what went wrong
                pass
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.unlink()

    # --- requests ----------------------------------------------------------------------------------

    def _connected(self) -> Client:
        if self._client is None or not self.alive:
            raise self._error("the connection is closed")
        return self._client

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists now (all pages), as wire dicts."""
        client = self._connected()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            for _ in range(100):
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                tools += [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in page.tools]
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:
            raise self._failed(exc, "tools/list") from exc
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], *, meta: dict[str, Any], timeout: float
    ) -> dict[str, Any] | TaskHandle:
        """The tool's `CallToolResult` (wire dict), or the handle of the task the server made of it."""
        client = self._connected()
        for relisted in (False, True):
            try:
                result = await client.session.call_tool(
                    name,
                    arguments,
                    read_timeout_seconds=timeout,
                    meta=cast(types.RequestParamsMeta, meta),
                    allow_claimed=True,
                )
                break
            except MCPError as exc:
                # 2026-07-28: a tool whose schema mirrors arguments into headers must be listed by this
                # session first (or listed again, if it changed); the spec's recovery is to re-list once.
                if exc.code != types.HEADER_MISMATCH or relisted:
                    raise self._failed(exc, f"tools/call {name}") from exc
                await self.list_tools()
            except Exception as exc:
                raise self._failed(exc, f"tools/call {name}") from exc
        if isinstance(result, CreatedTask):
            return TaskHandle(result.task_id, result.poll_interval_ms)
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def get_task(self, task_id: str) -> TaskState:
        client = self._connected()
        try:
            return await client.session.send_request(
                GetTaskRequest(params=TaskParams(task_id=task_id)),
                TaskState,
                request_read_timeout_seconds=POLL_REQUEST_TIMEOUT,
            )
        except Exception as exc:
            raise self._failed(exc, f"tasks/get {task_id}") from exc

    # --- errors ------------------------------------------------------------------------------------

    def _failed(self, error: BaseException, what: str) -> MCPCallFailed:
        """An exception of a request as MCPCallFailed; a broken connection marks the session dead, so
        the next attempt gets a fresh one (a stdio server is started again)."""
        exc = _innermost(error) or error
        broken = isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | OSError) or (
            isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED
        )
        if not isinstance(exc, MCPError) or broken:
            self._dead = True
        if isinstance(exc, MCPError) and exc.code == types.REQUEST_TIMEOUT:
            return self._error(f"{what} timed out ({exc.message})", tail=False)
        if broken:
            return self._error(f"{what}: the server went away ({_describe(exc)})")
        if isinstance(exc, MCPError):
            return self._error(f"{what} failed: JSON-RPC error {exc.code}: {exc.message}", tail=False)
        return self._error(f"{what} failed: {_describe(exc)}")

    def _error(self, what: str, *, tail: bool = True) -> MCPCallFailed:
        kind = "command" if self.server.transport == "stdio" else "URL"
        message = f"MCP server {self.server.name!r} ({kind} {self.server.where}): {what}"
        stderr = self.stderr_tail() if tail else ""
        if stderr:
            message += f"; its stderr ends with: {stderr}"
        # It goes to the run's error, Temporal and logs: an argument or a line of stderr may hold a key.
        return MCPCallFailed(redact_text(message))

    def stderr_tail(self, chars: int = STDERR_TAIL_CHARS) -> str:
        """The last lines a stdio server wrote to its stderr (empty for HTTP servers)."""
        if self._stderr is None:
            return ""
        try:
            with self._stderr.open("rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - chars))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())


def _innermost(exc: BaseException | None) -> BaseException | None:
    """The exception a task group wrapped (anyio raises groups of one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException | None) -> str:
    """The innermost useful message of an exception."""
    exc = _innermost(exc)
    if exc is None:
        return "the connection ended before the handshake"
    if isinstance(exc, MCPError):
        return f"JSON-RPC error {exc.code}: {exc.message}"
    if isinstance(exc, asyncio.CancelledError):
        return "the connection ended"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
