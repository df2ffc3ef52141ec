"""Rerunning and comparing runs: `rerun RUN` (the run again with a new model, agent or instructions,
tools answered from the record), `compare RUN_A RUN_B` (two runs step by step)."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, MemoryOpt, command, connect, fail


def register(app: typer.Typer) -> None:
    app.command(name="rerun")(rerun)
    app.command(name="compare")(compare)


@command
async def rerun(
    run_id: Annotated[str | None, typer.Argument(help="Run id (or --select for many).", show_default=False)] = None,
    from_step: Annotated[str, typer.Option("--from-step", help="Start from the state at this step.")] = "0",
    model: Annotated[str | None, typer.Option(help="Model spec (default: the run's own).")] = None,
    agent: Annotated[str | None, typer.Option(help="Agent name (default: the run's own).")] = None,
    instructions: Annotated[
        str | None,
        typer.Option(help="A text file: the system prompt, in place of the agent's own.", show_default=False),
    ] = None,
    tools: Annotated[
        str, typer.Option(help="recorded: answer matching calls from the run's ledger; live: run every tool.")
    ] = "recorded",
    memory: MemoryOpt = "then",
    rerun_children: Annotated[
        bool,
        typer.Option(
            "--rerun-children",
            help="Run its sub-agents again, as new runs of the rerun (else their recorded answers answer).",
        ),
    ] = False,
    select: Annotated[
        str | None, typer.Option(help='Rerun many runs: "status=completed agent=X since=7d".', show_default=False)
    ] = None,
    limit: Annotated[int, typer.Option(help="With --select: at most this many runs, newest first.")] = 20,
    concurrency: Annotated[int, typer.Option(help="With --select: reruns at a time.")] = 4,
    follow: Annotated[bool, typer.Option("--follow", help="Show its steps as they land, then compare.")] = False,
    priority: Annotated[
        int | None, typer.Option(help="1 (first) to 5 (last); default: the original's.", show_default=False)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run RUN again with a change (model, agent, instructions), as a new run; the original is untouched."""
    from waypoint.app import console as out
    from waypoint.app.cli.run import follow_to_end
    from waypoint.checks import parse_step, read_instructions

    step = parse_step(from_step)
    if (run_id is None) == (select is None):
        raise fail("name one run, or pick many with --select (not both)")
    text = read_instructions(instructions) if instructions is not None else None
    if select is not None:
        await rerun_batch(
            select, step, model, agent, text, tools, memory, limit, concurrency, as_json, rerun_children, priority
        )
        return
    assert run_id is not None
    async with await connect(temporal=True) as wp:
        new_id = await wp.rerun(
            run_id,
            from_step=step,
            model=model,
            agent=agent,
            tools=tools,
            instructions=text,
            memory=memory,
            rerun_children=rerun_children,
            priority=priority,
        )
        if not follow:
            # the keys of POST /v1/runs/{id}/rerun's answer
            started = {"run_id": new_id, "parent_run_id": run_id, "from_step": step}
            out.print_json(started) if as_json else print(new_id)
            return
        if not as_json:
            out.console.print(f"started [bold]{new_id}[/bold], a rerun of {run_id} from step {step}")
        try:
            await follow_to_end(wp, new_id, as_json)
        finally:
            if not as_json:
                found = await wp.compare(run_id, new_id)
                out.console.print(out.comparison_summary(found), highlight=False)


async def rerun_batch(
    select: str,
    step: int,
    model: str | None,
    agent: str | None,
    instructions: str | None,
    tools: str,
    memory: str,
    limit: int,
    concurrency: int,
    as_json: bool,
    rerun_children: bool = False,
    priority: int | None = None,
) -> None:
    """Many reruns with one change: a progress bar, then the summary table."""
    from rich.progress import Progress

    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        with Progress(console=out.err_console, transient=True, disable=as_json) as progress:
            task = progress.add_task("rerunning", total=None)

            def done(_: object) -> None:
                progress.advance(task)

            report = await wp.rerun_batch(
                select,
                limit=limit,
                concurrency=concurrency,
                from_step=step,
                model=model,
                agent=agent,
                tools=tools,
                instructions=instructions,
                memory=memory,
                on_done=done,
                rerun_children=rerun_children,
                priority=priority,
            )
    if as_json:
        out.print_json(report)
        return
    out.console.print(out.batch_table(report))
    out.console.print(out.batch_summary(report), highlight=False)


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
        if found.children:
            out.console.print(out.children_table(found))
        for line in out.comparison_diffs(found):
            out.console.print(line, highlight=False)
        out.console.print(out.comparison_summary(found), highlight=False)
    if fail_on_divergence and found.diverged:
        raise typer.Exit(1)
