"""`waypoint memory search|show|forget`: long-term (episodic) memory, through the memory worker."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, RunArg, command, connect

memory_app = typer.Typer(no_args_is_help=True, help="Long-term (episodic) memory, through the memory worker.")


def register(app: typer.Typer) -> None:
    app.add_typer(memory_app, name="memory")


@memory_app.command(name="search")
@command
async def memory_search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    agent: Annotated[str | None, typer.Option(help="Only this agent's memories.")] = None,
    run: Annotated[str | None, typer.Option(help="Only this run's memories.")] = None,
    k: Annotated[int, typer.Option("-k", help="How many.")] = 5,
    as_json: JsonOpt = False,
) -> None:
    """Search the tenant's long-term memory by similarity (re-ranked by recency and importance)."""
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        found = await wp.memory_search(query, k=k, agent=agent, run_id=run)
    if as_json:
        out.print_json(found)
        return
    rows = [(f"{m.score:.3f}", m.run_id, str(m.step), m.kind, m.text) for m in found]
    out.console.print(
        out.columns(None, ("score", "run", "step", "kind", "text"), rows, wrap="text") if rows else "nothing found"
    )


@memory_app.command(name="show")
@command
async def memory_show(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Every episode a run left in long-term memory."""
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        found = await wp.memory_show(run_id)
    if as_json:
        out.print_json(found)
        return
    rows = [(str(m.step), m.kind, f"{m.importance:.2f}", m.text) for m in found]
    table = out.columns(f"memories of {run_id}", ("step", "kind", "importance", "text"), rows, wrap="text")
    out.console.print(table if rows else f"run {run_id} has no memories")


@memory_app.command(name="forget")
@command
async def memory_forget(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Delete a run's memories (this tenant's only). The run's event log is kept."""
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        deleted = await wp.memory_forget(run_id)
    if as_json:
        out.print_json({"run_id": run_id, "deleted": deleted})
    else:
        out.console.print(f"forgot {deleted} memories of {run_id}")
