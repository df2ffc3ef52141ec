"""`waypoint agents` (the catalog the workers serve, with each agent's current version) and
`waypoint agent-version FINGERPRINT` (what a version a run started with was)."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect


def register(app: typer.Typer) -> None:
    app.command(name="agents")(agents)
    app.command(name="agent-version")(agent_version)


@command
async def agents(as_json: JsonOpt = False) -> None:
    """List the agents the workers serve, each with the fingerprint a fresh run would start with
    (its MCP tools left out: a run lists those when it starts)."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.agents()
    if as_json:
        out.print_json([out.as_json(a) for a in found])
    elif found:
        out.console.print(out.agents_table(found))
    else:
        out.console.print("no agents yet: start a worker (`waypoint dev` or `waypoint worker`)")


@command
async def agent_version(
    fingerprint: Annotated[str, typer.Argument(help="The version's fingerprint, or a prefix of it (4+ hex digits).")],
    as_json: JsonOpt = False,
) -> None:
    """Show an agent version a run started with: instructions, tool schemas, models, MCP tools."""
    from waypoint.app import console as out

    async with await connect() as wp:
        version = await wp.agent_version(fingerprint)
    if as_json:
        out.print_json(out.as_json(version))
    else:
        print(out.agent_version_text(version))
