"""`waypoint mcp`: Waypoint itself as an MCP server, for assistants (Claude Desktop, IDEs, agents)."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import command, settings


def register(app: typer.Typer) -> None:
    app.command(name="mcp")(mcp)


@command
async def mcp(
    transport: Annotated[str, typer.Option(help="stdio (the assistant runs this command) or http.")] = "stdio",
    host: Annotated[str, typer.Option(help="Address to listen on (http).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (http).")] = 8766,
) -> None:
    """Serve the tenant's runs over MCP: list, status and timeline, step state, diff, memory search (and
    start, send, approve, deny, cancel, fork with WAYPOINT_MCP_WRITE=true) until stopped."""
    from waypoint.errors import InvalidInput

    if transport not in ("stdio", "http"):
        raise InvalidInput(f"--transport is stdio or http, not {transport!r}")
    from waypoint.app.mcp_server import serve

    await serve(settings(), "http" if transport == "http" else "stdio", host=host, port=port)
