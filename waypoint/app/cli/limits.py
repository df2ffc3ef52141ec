"""`waypoint limits`: the fleet limits this machine reads, and what the shared limiter holds now."""

from __future__ import annotations

import typer

from waypoint.app.cli._common import JsonOpt, command, connect


def register(app: typer.Typer) -> None:
    app.command(name="limits")(limits)


@command
async def limits(as_json: JsonOpt = False) -> None:
    """Show the limits file (WAYPOINT_LIMITS_FILE) and, per model key, the calls in flight and waiting,
    the calls and 429s counted, a cooldown a 429 set and the circuit breaker."""
    from waypoint.app import console as out

    async with await connect() as wp:
        report = await wp.limits.report()
    if as_json:
        out.print_json(report)
        return
    if report.source is None:
        out.console.print("no limits file: set WAYPOINT_LIMITS_FILE to limit model calls across the fleet")
    for table in out.limits_tables(report):
        out.console.print(table)
