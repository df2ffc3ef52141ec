"""Agents that use the MCP test server (tests/mcp_server.py) over stdio and streamable HTTP, and
what the tests need to run that server and read what happened in it.

A worker process loads this module with WAYPOINT_AGENTS=tests.mcp_agents: MCP_TEST_DIR names the
folder the test server writes to, MCP_TEST_HTTP_URL the URL of its HTTP instance.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.ports import reserve_port
from waypoint import Agent, ScriptedModel, ScriptedTurn
from waypoint.mcp import MCPServer

SERVER_SCRIPT = str(Path(__file__).with_name("mcp_server.py"))


def stdio_server(folder: Path | str, **options: Any) -> MCPServer:
    options.setdefault("name", "local")
    return MCPServer.stdio(sys.executable, [SERVER_SCRIPT], env={"MCP_TEST_DIR": str(folder)}, **options)


def http_server(url: str, **options: Any) -> MCPServer:
    options.setdefault("name", "web")
    return MCPServer.http(url, **options)


@contextmanager
def serving_http(folder: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server over streamable HTTP in a process of its own, on a free port: (URL, process)."""
    port = reserve_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER_SCRIPT, "--http", str(port)],
        env={**os.environ, "MCP_TEST_DIR": str(folder)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "the HTTP MCP test server exited"
                assert time.monotonic() < deadline, "the HTTP MCP test server did not listen"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def lines(folder: Path, name: str) -> list[dict[str, Any]]:
    """What the test server wrote to one of its files (`started`, `calls`, `effects`, `tasks`, `polls`)."""
    path = folder / name
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _last_tool_output(messages: list[Any]) -> ScriptedTurn:
    return ScriptedTurn(content=f"tool said: {[m for m in messages if m['role'] == 'tool'][-1]['content']}")


_FOLDER = os.environ.get("MCP_TEST_DIR")
_URL = os.environ.get("MCP_TEST_HTTP_URL")

if _FOLDER:
    mcp_crashy = Agent(
        name="mcp_crashy",
        instructions="Records a line through an MCP tool, slowly.",
        model=ScriptedModel(
            [ScriptedTurn(tool_calls=[("local_record", {"text": "one", "seconds": 3})]), _last_tool_output]
        ),
        mcp=[stdio_server(_FOLDER, namespace="local", timeout=30)],
    )

if _URL:
    mcp_tasker = Agent(
        name="mcp_tasker",
        instructions="Asks an MCP server for a long report.",
        model=ScriptedModel([ScriptedTurn(tool_calls=[("report", {"topic": "q3", "seconds": 5})]), _last_tool_output]),
        mcp=[http_server(_URL, timeout=60)],
    )
