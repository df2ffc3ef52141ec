"""A real MCP server for the tests, written with the `mcp` SDK's own server API.

    python tests/mcp_server.py                 # over stdio (a worker runs it as a child process)
    python tests/mcp_server.py --http PORT     # over streamable HTTP, on 127.0.0.1:PORT

Everything it does is written to files in $MCP_TEST_DIR, so a test can tell what happened in it
even across worker (and server) restarts: `started` (a line per process start), `calls` (a line
per tool execution: tool, idempotency key from `_meta`, arguments), `effects` (a line per
idempotency key: the side effect, applied once per key), `tasks` (a line per task created),
`polls` (a line per tasks/get).

It serves the Tasks extension (io.modelcontextprotocol/tasks, SEP-2663) for `report`: a client that
declares the extension gets a task handle at once and polls `tasks/get`; the work runs in the
background of this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

TASKS = "io.modelcontextprotocol/tasks"
KEY = "waypoint/idempotency-key"
HERE = Path(os.environ.get("MCP_TEST_DIR", "."))


def log(name: str, **fields: Any) -> None:
    HERE.mkdir(parents=True, exist_ok=True)
    with (HERE / name).open("a") as fh:
        fh.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")


def key_of(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    return str(meta.get(KEY, ""))


# --- the Tasks extension (SEP-2663): tasks/get and the task result shape of tools/call ----------


class TaskParams(types.RequestParams):
    task_id: str


TASK_STATE: dict[str, dict[str, Any]] = {}
TASKS_RUNNING: set[asyncio.Task[None]] = set()


def now() -> str:
    return datetime.now(UTC).isoformat()


class Tasks(Extension):
    identifier = TASKS

    def methods(self) -> Sequence[MethodBinding]:
        return [MethodBinding("tasks/get", TaskParams, self.get)]

    async def get(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        task = TASK_STATE.get(params.task_id)
        log("polls", task=params.task_id, known=task is not None)
        if task is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown task {params.task_id}")
        return {"resultType": "complete", **task}

    async def intercept_tool_call(self, params: types.CallToolRequestParams, ctx: Any, call_next: Any) -> Any:
        capabilities = ctx.session.client_capabilities
        declared = capabilities is not None and TASKS in (capabilities.extensions or {})
        if params.name != "report" or not declared:
            return await call_next(ctx)
        task_id = uuid.uuid4().hex
        key = str((params.meta or {}).get(KEY, ""))
        TASK_STATE[task_id] = {
            "taskId": task_id,
            "status": "working",
            "createdAt": now(),
            "lastUpdatedAt": now(),
            "ttlMs": None,
            "pollIntervalMs": 200,
        }
        log("tasks", task=task_id, key=key)

        async def work() -> None:
            text = await report(**(params.arguments or {}))  # noqa: F821 - defined below
            TASK_STATE[task_id].update(
                status="completed",
                lastUpdatedAt=now(),
                result={"content": [{"type": "text", "text": text}], "isError": False},
            )

        TASKS_RUNNING.add(asyncio.get_running_loop().create_task(work()))
        return {"resultType": "task", **TASK_STATE[task_id]}


server = MCPServer("test-tools", instructions="Tools for Waypoint's tests.", extensions=[Tasks()])


@server.tool(annotations=types.ToolAnnotations(read_only_hint=True))
def multiply(a: int, b: int, ctx: Context) -> str:
    """Multiply two integers."""
    log("calls", tool="multiply", key=key_of(ctx), args=[a, b])
    return str(a * b)


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers (its name clashes with the test agents' own `add`)."""
    return str(a + b)


@server.tool()
async def record(text: str, ctx: Context, seconds: float = 0.0) -> str:
    """Apply a side effect once per idempotency key, then work for `seconds` (a call again with the
    same key, the retry of an interrupted one, only finishes)."""
    key = key_of(ctx)
    log("calls", tool="record", key=key, args=[text])
    effects = HERE / "effects"
    done = effects.exists() and any(json.loads(line)["key"] == key for line in effects.read_text().splitlines())
    if not done:
        log("effects", key=key, text=text)
    if seconds and not done:
        (HERE / f"record-running-{text}").touch()
        await asyncio.sleep(seconds)
    return f"recorded {text}"


@server.tool()
def refuse(reason: str) -> str:
    """Always answers with an error result."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def flaky(text: str) -> str:
    """Kills its own server process the first time it is ever called; works after that."""
    marker = HERE / "flaky-crashed"
    if not marker.exists():
        marker.touch()
        print("flaky: crashing on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    return f"flaky did {text}"


@server.tool()
async def dawdle(seconds: float, ctx: Context) -> str:
    """Sleep, then answer."""
    log("calls", tool="dawdle", key=key_of(ctx), args=[seconds])
    await asyncio.sleep(seconds)
    return "done dawdling"


async def report(topic: str, seconds: float = 3.0) -> str:
    """Write a report (slow: a server that supports tasks runs it as one)."""
    await asyncio.sleep(seconds)
    return f"report on {topic}: all good"


server.add_tool(report, name="report")


def main(argv: list[str]) -> None:
    log("started", argv=argv)
    print(f"test MCP server {os.getpid()} starting", file=sys.stderr, flush=True)
    if argv[:1] == ["--http"]:
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(argv[1]), log_level="warning")
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
