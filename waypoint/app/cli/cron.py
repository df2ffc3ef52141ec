"""Scheduled agents: `waypoint cron create|list|show|update|pause|resume|trigger|delete` (Temporal
Schedules that start runs; `waypoint runs --schedule ID` lists the runs one fired)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect

if TYPE_CHECKING:
    from waypoint.store.schedules import ScheduleRow

cron_app = typer.Typer(no_args_is_help=True, help="Scheduled agents: runs Temporal starts on a schedule.")
ScheduleArg = Annotated[str, typer.Argument(help="Schedule id (`waypoint cron list`).", show_default=False)]


def register(app: typer.Typer) -> None:
    app.add_typer(cron_app, name="cron")


def _print(row: ScheduleRow, as_json: bool, said: str | None = None) -> None:
    from waypoint.app import console as out

    if as_json:
        out.print_json(row)
    elif said is not None:
        out.console.print(said)
    else:
        out.console.print(out.schedule_table(row))


@cron_app.command(name="create")
@command
async def cron_create(
    agent: Annotated[str, typer.Option(help="Agent to run (`waypoint agents` lists them).")],
    task: Annotated[str, typer.Option(help="What each run should do.")],
    every: Annotated[str | None, typer.Option(help="Fire every this long: 30s, 10m, 1h, 1d.")] = None,
    cron: Annotated[
        str | None, typer.Option(help="Fire on a cron expression: five fields ('0 9 * * mon-fri') or @daily.")
    ] = None,
    tz: Annotated[str, typer.Option(help="Time zone of --cron (an IANA name).")] = "UTC",
    overlap: Annotated[
        str,
        typer.Option(
            help="When the last fired run still runs: skip this fire, buffer_one (start after it), "
            "allow_all (start alongside) or cancel_other (cancel it)."
        ),
    ] = "skip",
    catchup: Annotated[
        str, typer.Option(help="After an outage, fire times missed within this long still fire.")
    ] = "60s",
    jitter: Annotated[str, typer.Option(help="Delay each fire by a random time up to this long.")] = "0s",
    until: Annotated[
        str | None, typer.Option(help="No fire after this: a duration from now (30d) or an ISO date or time.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model spec of each run (default: the agent's).")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step budget of each run.")] = None,
    priority: Annotated[int | None, typer.Option(help="Priority of each run: 1 (first) to 5 (last).")] = None,
    webhook: Annotated[str | None, typer.Option(help="Post each run's end to this URL.")] = None,
    schedule_id: Annotated[str | None, typer.Option("--id", help="The schedule's id (default: sched-...).")] = None,
    paused: Annotated[bool, typer.Option("--paused", help="Create it paused.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create a scheduled agent (exactly one of --every or --cron); prints its id."""
    from waypoint.app.cli._common import fail
    from waypoint.checks import parse_duration, parse_until

    if (every is None) == (cron is None):
        raise fail("give exactly one of --every (e.g. 1h) or --cron (e.g. '0 9 * * *')")
    seconds = parse_duration("--every", every) if every is not None else None
    catchup_seconds, jitter_seconds = parse_duration("--catchup", catchup), parse_duration("--jitter", jitter)
    end_at = parse_until("--until", until) if until is not None else None
    async with await connect() as wp:  # Temporal on first use: bad input is refused before
        row = await wp.schedules.create(
            agent=agent,
            task=task,
            every=seconds,
            cron=cron,
            tz=tz,
            overlap=overlap,
            catchup_seconds=catchup_seconds,
            jitter_seconds=jitter_seconds,
            end_at=end_at,
            model=model,
            max_steps=max_steps,
            priority=priority,
            webhook=webhook,
            schedule_id=schedule_id,
            paused=paused,
        )
    _print(row, as_json, row.schedule_id)


@cron_app.command(name="list")
@command
async def cron_list(
    agent: Annotated[str | None, typer.Option(help="Only the schedules of this agent.")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """List the tenant's schedules: when each fires next, paused or not, its last run."""
    from waypoint.app import console as out

    async with await connect() as wp:
        rows = await wp.schedules.list(agent=agent, limit=limit)
    if as_json:
        out.print_json(rows)
    elif rows:
        out.console.print(out.schedules_table(rows, wp.tenant()))
    else:
        out.console.print('no schedules: create one with `waypoint cron create --agent A --task "..." --every 1h`')


@cron_app.command(name="show")
@command
async def cron_show(schedule_id: ScheduleArg, as_json: JsonOpt = False) -> None:
    """One schedule: its spec, next fire times and the last runs it fired."""
    async with await connect() as wp:
        _print(await wp.schedules.get(schedule_id), as_json)


CLEARABLE = ("until", "model", "max-steps", "priority", "webhook")


@cron_app.command(name="update")
@command
async def cron_update(
    schedule_id: ScheduleArg,
    task: Annotated[str | None, typer.Option(help="What each run should do.")] = None,
    every: Annotated[str | None, typer.Option(help="Fire every this long (replaces a cron): 30s, 10m, 1h.")] = None,
    cron: Annotated[str | None, typer.Option(help="Fire on a cron expression (replaces an interval).")] = None,
    tz: Annotated[str | None, typer.Option(help="Time zone of the cron expression (an IANA name).")] = None,
    overlap: Annotated[
        str | None, typer.Option(help="skip, buffer_one, allow_all or cancel_other (see `cron create`).")
    ] = None,
    catchup: Annotated[
        str | None, typer.Option(help="After an outage, missed fires within this long still fire.")
    ] = None,
    jitter: Annotated[str | None, typer.Option(help="Delay each fire by a random time up to this long.")] = None,
    until: Annotated[str | None, typer.Option(help="No fire after this: a duration from now or an ISO date.")] = None,
    model: Annotated[str | None, typer.Option(help="Model spec of each run.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step budget of each run.")] = None,
    priority: Annotated[int | None, typer.Option(help="Priority of each run: 1 (first) to 5 (last).")] = None,
    webhook: Annotated[str | None, typer.Option(help="Post each run's end to this URL.")] = None,
    clear: Annotated[
        list[str] | None,
        typer.Option(help=f"Clear a setting (repeatable): {', '.join(CLEARABLE)}.", show_default=False),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a schedule: what you give changes, the rest stays (paused stays paused)."""
    from waypoint.app import console as out
    from waypoint.app.cli._common import fail
    from waypoint.checks import parse_duration, parse_until

    cleared = set(clear or [])
    unknown = sorted(cleared - set(CLEARABLE))
    if unknown:
        raise fail(f"--clear takes {', '.join(CLEARABLE)}, not {', '.join(unknown)}")
    given = {"until": until, "model": model, "max-steps": max_steps, "priority": priority, "webhook": webhook}
    both = sorted(name for name in cleared if given[name] is not None)
    if both:
        raise fail(f"--{both[0]} and --clear {both[0]} contradict each other: give one")
    changes: dict[str, object] = {}
    for name, field, value in (
        ("until", "end_at", parse_until("--until", until) if until is not None else None),
        ("model", "model", model),
        ("max-steps", "max_steps", max_steps),
        ("priority", "priority", priority),
        ("webhook", "webhook", webhook),
    ):
        if name in cleared:
            changes[field] = None
        elif value is not None:
            changes[field] = value
    async with await connect() as wp:
        row = await wp.schedules.update(
            schedule_id,
            task=task,
            every=parse_duration("--every", every) if every is not None else None,
            cron=cron,
            tz=tz,
            overlap=overlap,
            catchup_seconds=parse_duration("--catchup", catchup) if catchup is not None else None,
            jitter_seconds=parse_duration("--jitter", jitter) if jitter is not None else None,
            **changes,  # type: ignore[arg-type]
        )
    _print(row, as_json, f"{schedule_id} updated: fires {out.schedule_spec_text(row.spec)}")


@cron_app.command(name="pause")
@command
async def cron_pause(
    schedule_id: ScheduleArg,
    note: Annotated[str | None, typer.Option(help="Why (shown with the schedule).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop firing until resumed (a run already fired goes on)."""
    async with await connect() as wp:
        _print(await wp.schedules.pause(schedule_id, note=note), as_json, f"{schedule_id} paused")


@cron_app.command(name="resume")
@command
async def cron_resume(schedule_id: ScheduleArg, as_json: JsonOpt = False) -> None:
    """Fire again on schedule."""
    async with await connect() as wp:
        _print(await wp.schedules.resume(schedule_id), as_json, f"{schedule_id} resumed")


@cron_app.command(name="trigger")
@command
async def cron_trigger(schedule_id: ScheduleArg, as_json: JsonOpt = False) -> None:
    """Fire now (under the schedule's overlap policy); `waypoint runs --schedule ID` shows the run."""
    async with await connect() as wp:
        row = await wp.schedules.trigger(schedule_id)
    _print(row, as_json, f"{schedule_id} fired: `waypoint runs --schedule {schedule_id}` lists its runs")


@cron_app.command(name="delete")
@command
async def cron_delete(schedule_id: ScheduleArg, as_json: JsonOpt = False) -> None:
    """Delete the schedule (the runs it fired stay)."""
    from waypoint.app import console as out

    async with await connect() as wp:
        await wp.schedules.delete(schedule_id)
    if as_json:
        out.print_json({"schedule_id": schedule_id, "deleted": True})
    else:
        out.console.print(f"{schedule_id} deleted")
