"""Starting runs: `run` and `fork`, optionally following them to the end."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from waypoint.app.cli._common import JsonOpt, MemoryOpt, RunArg, command, connect

if TYPE_CHECKING:
    from waypoint.client import Waypoint

FollowOpt = Annotated[bool, typer.Option("--follow", help="Show steps as they land, until the run ends.")]
PriorityOpt = Annotated[
    int | None,
    typer.Option(help="1 (first) to 5 (last); default 3. Busy workers take higher-priority runs' work first."),
]
WebhookOpt = Annotated[
    str | None,
    typer.Option(help="An http(s) URL that gets one signed POST of the run's final state when it ends."),
]


def register(app: typer.Typer) -> None:
    app.command()(run)
    app.command()(fork)


@command
async def run(
    task: Annotated[str, typer.Argument(help="What the agent should do.")],
    agent: Annotated[str, typer.Option(help="Agent name.")] = "demo",
    model: Annotated[str | None, typer.Option(help="Model spec overriding the agent's.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step limit overriding the agent's.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Token budget (input + output).")] = None,
    max_cost: Annotated[float | None, typer.Option(help="Cost budget in USD.")] = None,
    deadline: Annotated[float | None, typer.Option(help="Wall-clock budget in seconds.")] = None,
    priority: PriorityOpt = None,
    webhook: WebhookOpt = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            help="Repeats with this key (within the retention window) print the first run's id, starting none."
        ),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="Start then: an ISO date and time, UTC unless it names its offset."),
    ] = None,
    after: Annotated[str | None, typer.Option("--after", help="Start after this delay: 90s, 30m, 2h, 1d.")] = None,
    thread: Annotated[
        str | None,
        typer.Option(help="Run as this thread's next turn: it goes on from the thread's newest run."),
    ] = None,
    multitask: Annotated[
        str | None,
        typer.Option(
            help="With --thread, what it does while the thread is busy: reject, enqueue, interrupt, rollback."
        ),
    ] = None,
    follow: FollowOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run on the configured Temporal and print its id. With --at or --after it is
    `scheduled` until then (`waypoint cancel ID` before it starts ends it). With --thread it is the
    thread's next turn (`queued` behind a busy run with --multitask enqueue or interrupt)."""
    from waypoint.app import console as out
    from waypoint.checks import check_start_time, iso_time, parse_duration
    from waypoint.client import Turn
    from waypoint.errors import InvalidInput
    from waypoint.types import Budget

    start_at = (
        iso_time("--at", at, "an ISO date and time such as 2026-12-24T09:00 (UTC unless it names its offset)")
        if at is not None
        else None
    )
    delay = parse_duration("--after", after) if after is not None else None
    if (start_at is not None or delay is not None) and follow:
        raise InvalidInput(
            "a delayed run is not followed: `waypoint status ID --follow` once it starts, or drop --follow"
        )
    if thread is None and multitask is not None:
        raise InvalidInput("--multitask says what a turn on a busy thread does: give the thread with --thread")
    if thread is not None and start_at is not None:
        raise InvalidInput("a thread's turn starts --after a delay, not --at a time: use --after")
    starts = check_start_time(start_at, delay)  # refused before connecting: an --at in the past starts nothing
    async with await connect(temporal=True) as wp:
        budget = Budget(max_steps=max_steps, max_tokens=max_tokens, max_cost_usd=max_cost, deadline_seconds=deadline)
        if thread is not None:
            turn = Turn(task, agent, model, budget, priority, after_seconds=delay, webhook=webhook)
            started = await wp.threads.start_turn(thread, turn, multitask, idempotency_key=idempotency_key)
            run_id = started.run_id
        else:
            run_id = await wp.start_run(
                task,
                agent=agent,
                model=model,
                budget=budget,
                priority=priority,
                start_at=starts,
                idempotency_key=idempotency_key,
                webhook=webhook,
            )
        trace = wp.started_trace(run_id)
        if not follow:
            if as_json:
                out.print_json({"run_id": run_id, "trace_id": trace, "start_at": starts})
                return
            print(run_id)  # stdout stays the bare run id, for $(waypoint run ...)
            if starts is not None:
                when = datetime.fromtimestamp(starts, UTC).isoformat(timespec="seconds")
                print(f"scheduled: starts at {when} (waypoint cancel {run_id} to drop it)", file=sys.stderr)
            if trace:
                print(f"trace {trace}", file=sys.stderr)
            return
        if not as_json:
            out.console.print(f"started [bold]{run_id}[/bold]" + (f" trace {trace}" if trace else ""))
        await follow_to_end(wp, run_id, as_json)


@command
async def fork(
    run_id: RunArg,
    step: Annotated[str, typer.Option("--step", help="Fork from the state at this step.")],
    message: Annotated[str | None, typer.Option(help="A user message added to that state.")] = None,
    model: Annotated[str | None, typer.Option(help="Model spec for the new run.")] = None,
    memory: MemoryOpt = "then",
    priority: Annotated[int | None, typer.Option(help="1 (first) to 5 (last); default: the parent's.")] = None,
    webhook: WebhookOpt = None,
    follow: FollowOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a new run from the state of RUN at a step; the parent is untouched."""
    from waypoint.app import console as out
    from waypoint.checks import parse_step

    fork_step = parse_step(step)
    async with await connect(temporal=True) as wp:
        new_id = await wp.fork(
            run_id, fork_step, message=message, model=model, memory=memory, priority=priority, webhook=webhook
        )
        if not follow:
            # the keys of POST /v1/runs/{id}/fork's answer
            started = {"run_id": new_id, "parent_run_id": run_id, "fork_step": fork_step}
            out.print_json(started) if as_json else print(new_id)
            return
        if not as_json:
            out.console.print(f"started [bold]{new_id}[/bold], forked from {run_id} at step {step}")
        await follow_to_end(wp, new_id, as_json)


async def follow_to_end(wp: Waypoint, run_id: str, as_json: bool) -> None:
    """Print steps until the run ends, then its row (with `as_json`, JSON lines throughout: one
    line per step and one per move to another model, then the row on one line); exit code 1 if it
    did not end well."""
    from waypoint.app import console as out
    from waypoint.app.follow import follow
    from waypoint.names import RunStatus

    row = await follow(wp, run_id, as_json_lines=as_json)
    out.print_json_line(row) if as_json else out.console.print(out.run_table(row))
    if RunStatus(row.status).unsuccessful:
        raise typer.Exit(1)
