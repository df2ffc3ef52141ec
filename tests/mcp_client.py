"""`waypoint mcp` as an MCP client sees it: the server over stdio (the SDK's own client), a tool's
result or error, and the names of the tools that read and that act."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp import Client, StdioServerParameters

from tests.helpers import cli_env
from waypoint.config import Settings

READ_TOOLS = {
    "list_runs",
    "run_status",
    "run_tree",
    "step_state",
    "diff_steps",
    "search_memory",
    "fleet_limits",
    "fleet",
    "run_timeline",
    "verify_runs",
    "list_schedules",
    "list_assistants",
    "list_datasets",
    "list_experiments",
    "experiment",
    "compare_experiments",
    "list_webhook_deliveries",
    "audit_log",
}
WRITE_TOOLS = {"start_run", "send_message", "approve", "deny", "cancel_run", "fork_run"}
WRITE_TOOLS |= {"create_schedule", "change_schedule", "start_experiment", "redeliver_webhook"}


@asynccontextmanager
async def over_stdio(settings: Settings, **env: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "waypoint", "mcp"], env=cli_env(settings, **env))
    async with Client(params) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    return json.loads(text)


async def error_of(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text  # type: ignore[union-attr]
