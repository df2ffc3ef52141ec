"""Comparing runs: `compare RUN_A RUN_B`, step by step (for a rerun against the run it reran)."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect


def register(app: typer.Typer) -> None:
    app.command(name="compare")(compare)


@command
async def compare(
    run_a: Annotated[str, typer.Argument(help="The first run id (say, the original).", show_default=False)],
    run_b: Annotated[str, typer.Argument(help="The second run id (say, its rerun).", show_default=False)],
    fail_on_divergence: Annotated[
        bool, typer.Option("--fail-on-divergence", help="Exit 1 when the runs diverge (for CI).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Two runs side by side: tool calls, answers, tokens, cost, model time, outcome; the first divergence."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.compare(run_a, run_b)
    if as_json:
        out.print_json(found)
    else:
        out.console.print(out.comparison_table(found))
        for line in out.comparison_diffs(found):
            out.console.print(line, highlight=False)
        out.console.print(out.comparison_summary(found), highlight=False)
    if fail_on_divergence and found.diverged:
        raise typer.Exit(1)
