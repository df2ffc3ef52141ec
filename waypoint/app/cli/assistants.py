"""`waypoint assistants list|show|versions`: the Agent Protocol's assistants, read-only (they are
created and changed through the Agent Protocol's /assistants, or `wp.assistants` in Python)."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect

assistants_app = typer.Typer(
    no_args_is_help=True, help="Agent Protocol assistants (read-only): the agents' own, then the tenant's."
)
AssistantArg = Annotated[str, typer.Argument(help="Assistant id.", show_default=False)]


def register(app: typer.Typer) -> None:
    assistants_app.command(name="list")(list_assistants)
    assistants_app.command(name="show")(show)
    assistants_app.command(name="versions")(versions)
    app.add_typer(assistants_app, name="assistants")


@command
async def list_assistants(
    graph: Annotated[str | None, typer.Option(help="Only assistants of this agent (graph id).")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """The agents (their built-in assistants), then the tenant's assistants, newest first."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.assistants.search(graph_id=graph, limit=limit)
    if as_json:
        out.print_json(found)
        return
    out.console.print(out.assistants_table(found))


@command
async def show(
    assistant_id: AssistantArg,
    version: Annotated[int | None, typer.Option(help="This version (default: the current one).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """One assistant: its graph, version, config, context and metadata."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.assistants.get(assistant_id, version=version)
    if as_json:
        out.print_json(found)
        return
    out.console.print(out.assistant_table(found))


@command
async def versions(assistant_id: AssistantArg, as_json: JsonOpt = False) -> None:
    """Every version of the assistant, newest first."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.assistants.versions(assistant_id, limit=1000)
    if as_json:
        out.print_json(found)
        return
    out.console.print(out.assistants_table(found))
