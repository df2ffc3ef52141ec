"""`waypoint limits`: the fleet limits this machine reads, and what the shared limiter holds now;
`waypoint fleet`: the fleet over a period (runs, steps, model calls and 429s per key, waits, costs)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect

PeriodOpt = Annotated[str, typer.Option("--period", "-p", help="How far back: 1h, 6h, 24h, 7d or 30d.")]


def register(app: typer.Typer) -> None:
    app.command(name="limits")(limits)
    app.command(name="fleet")(fleet)


FileArg = Annotated[
    Path | None,
    typer.Argument(help="A limits file to check or show in place of WAYPOINT_LIMITS_FILE.", show_default=False),
]
CheckOpt = Annotated[
    bool,
    typer.Option(
        "--check", help="Only check the file as a worker does before it starts; exit 1 if it would refuse it."
    ),
]


@command
async def limits(file: FileArg = None, check: CheckOpt = False, as_json: JsonOpt = False) -> None:
    """Show the limits file (WAYPOINT_LIMITS_FILE, or FILE) and, per model key, the calls in flight and
    waiting, the calls and 429s counted, a cooldown a 429 set and the circuit breaker. The file is
    checked as a worker checks it before it starts: one a worker would refuse is an error here too."""
    from waypoint.app import console as out
    from waypoint.errors import ConfigError
    from waypoint.limits import load_limits

    chosen = load_limits(file) if file is not None else None
    async with await connect() as wp:
        if file is not None or check:  # the file you are about to deploy: refused as a worker refuses it
            found = await wp.limits.check(chosen)
            if check:
                print(f"ok: {found.source or 'no limits file'}: a worker would accept it")
                return
        else:  # the live limiter of the file in use: shown, with what a newly started worker would say
            try:
                await wp.limits.check()
            except ConfigError as exc:
                print(f"warning: a worker started now would refuse it: {exc}", file=sys.stderr)
        report = await wp.limits.report(limits=chosen)
    if as_json:
        out.print_json(report)
        return
    if report.source is None:
        out.console.print("no limits file: set WAYPOINT_LIMITS_FILE to limit model calls across the fleet")
    for table in out.limits_tables(report):
        out.console.print(table)


@command
async def fleet(period: PeriodOpt = "24h", as_json: JsonOpt = False) -> None:
    """Show the fleet over a period: runs by status, steps a minute, model calls and 429s per model key
    (every tenant's, yours beside), runs waiting for capacity or approval, cost per day and agent, the
    slowest and most expensive runs (the viewer's /ui/fleet charts the same)."""
    from waypoint.app import console as out

    async with await connect() as wp:
        stats = await wp.fleet_stats(period)
    if as_json:
        out.print_json(stats)
        return
    for table in out.fleet_tables(stats):
        out.console.print(table)
