"""Rerunning and comparing runs: `rerun RUN` (the run again with a new model or agent, tools answered
from the record), `compare RUN_A RUN_B` (two runs step by step)."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, RunArg, command, connect


def register(app: typer.Typer) -> None:
    app.command(name="rerun")(rerun)
    app.command(name="compare")(compare)


@command
async def rerun(
    run_id: RunArg,
    from_step: Annotated[str, typer.Option("--from-step", help="Start from the state at this step.")] = "0",
    model: Annotated[str | None, typer.Option(help="Model spec (default: the run's own).")] = None,
    agent: Annotated[str | None, typer.Option(help="Agent name (default: the run's own).")] = None,
    tools: Annotated[
        str, typer.Option(help="recorded: answer matching calls from the run's ledger; live: run every tool.")
    ] = "recorded",
    follow: Annotated[bool, typer.Option("--follow", help="Show its steps as they land, then compare.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Run RUN again with a change (model, agent), as a new run; the original is untouched."""
    from waypoint.app import console as out
    from waypoint.app.cli.run import follow_to_end
    from waypoint.store.travel import parse_step

    step = parse_step(from_step)
    async with await connect(temporal=True) as wp:
        new_id = await wp.rerun(run_id, from_step=step, model=model, agent=agent, tools=tools)
        if not follow:
            out.print_json({"run_id": new_id, "parent": run_id, "from_step": step}) if as_json else print(new_id)
            return
        if not as_json:
            out.console.print(f"started [bold]{new_id}[/bold], a rerun of {run_id} from step {step}")
        try:
            await follow_to_end(wp, new_id, as_json)
        finally:
            if not as_json:
                found = await wp.compare(run_id, new_id)
                out.console.print(out.comparison_summary(found), highlight=False)


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
