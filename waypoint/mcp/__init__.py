"""MCP: tools from any Model Context Protocol server, as durable tool calls of a run.

    from waypoint import Agent
    from waypoint.mcp import MCPServer

    Agent(name="ops", instructions="...", mcp=[MCPServer.stdio("python", ["-m", "ops_tools"])])

- `servers.py`: `MCPServer`, how an agent reaches a server (stdio child process or streamable HTTP).
- `tools.py`: `MCPTool`, a tool as a run records it when it starts; naming, argument checks, results.
- `hub.py`: `MCPHub`, a worker's sessions (one per server per process), listing, calling, tasks.
- `session.py`: one connection through the `mcp` SDK (imported only when a session opens).

The Temporal side (heartbeats, the ledger, retries) is in `activities/`; Waypoint as an MCP server
(`waypoint mcp`) is in `waypoint/app/mcp_server.py`.
"""

from waypoint.mcp.hub import IDEMPOTENCY_META_KEY, MCPHub
from waypoint.mcp.servers import MCPServer
from waypoint.mcp.tools import MCPTool

__all__ = ["IDEMPOTENCY_META_KEY", "MCPHub", "MCPServer", "MCPTool"]
