"""Compaction: `waypoint compaction apply|show` (its Schedule on Temporal) and `waypoint compact`.

`waypoint schedule apply|show`, the old name, still works for one release: hidden from the help, it
says on stderr that it is deprecated (`cron` is what schedules agents).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect

compaction_app = typer.Typer(no_args_is_help=True, help="Compaction's Schedule on Temporal: apply it, show it.")


def _deprecated() -> None:
    print(
        "warning: `waypoint schedule` is deprecated and will be removed: use `waypoint compaction` "
        "(`waypoint cron` schedules agents)",
        file=sys.stderr,
    )


deprecated_app = typer.Typer(
    no_args_is_help=True, hidden=True, help="Deprecated: `waypoint compaction`.", callback=_deprecated
)


def register(app: typer.Typer) -> None:
    app.add_typer(compaction_app, name="compaction")
    app.add_typer(deprecated_app, name="schedule")
    app.command()(compact)


@compaction_app.command(name="apply")
@deprecated_app.command(name="apply", hidden=True)
@command
async def schedule_apply(as_json: JsonOpt = False) -> None:
    """Create the compaction Schedule, or update it if its settings changed (idempotent)."""
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        outcome = await wp.apply_compaction_schedule()
        cfg = wp.settings
    if as_json:
        out.print_json({"schedule_id": cfg.compaction_schedule_id, "outcome": outcome})
    else:
        out.console.print(
            f"schedule {cfg.compaction_schedule_id} {outcome}: a compaction pass every "
            f"{cfg.compaction_interval_seconds:g} s, overlapping passes skipped"
        )


@compaction_app.command(name="show")
@deprecated_app.command(name="show", hidden=True)
@command
async def schedule_show(as_json: JsonOpt = False) -> None:
    """Show the compaction Schedule and the results of its last passes."""
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        found = await wp.compaction_schedule()
    if as_json:
        out.print_json(found)
        return
    every = ", ".join(f"{s:g} s" for s in found.every_seconds)
    state = "paused" if found.paused else "active"
    upcoming = ", ".join(t.isoformat() for t in found.next_runs) or "-"
    out.console.print(
        f"[bold]{found.id}[/bold] ({state}): {found.workflow} every {every} on {found.task_queue}, "
        f"overlap {found.overlap}; {found.actions_taken} passes started, "
        f"{found.skipped_overlaps} skipped; next: {upcoming}"
    )
    rows = []
    for p in found.last_passes:
        tokens = f"{p.tokens_before:,} -> {p.tokens_after:,}" if p.tokens_before is not None else ""
        memory = p.memory_error or (f"{p.episodes_saved} saved" if p.episodes_saved is not None else "")
        selected = "" if p.selected is None else str(p.selected)
        compacted = "" if p.compacted is None else str(p.compacted)
        at = p.at.strftime("%Y-%m-%d %H:%M:%S")
        rows.append((at, p.status, selected, compacted, tokens, "; ".join(p.failed), memory))
    names = ("started", "status", "selected", "compacted", "tokens", "failed", "memory")
    out.console.print(out.columns("last passes", names, rows, wrap="failed") if rows else "no pass has run yet")


@command
async def compact(
    run_id: Annotated[
        str | None, typer.Argument(help="Run id; without it, every run of the tenant past the threshold.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a compaction pass now and print what it did (exit code 1 if a run could not be compacted)."""
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        report = await wp.compact(run_id)
    if as_json:
        out.print_json({**out.as_json(report), "failed": len(report.failed)})
    else:
        rows = []
        for r in report.results:
            outcome = f"[red]{r.error}[/red]" if r.error else ("compacted" if r.created else "nothing new")
            tokens = f"{r.tokens_before:,} -> {r.tokens_after:,}" if r.created else ""
            rows.append((r.run_id, f"#{r.first_seq}-#{r.last_seq}" if r.created else "", tokens, r.method, outcome))
        title = f"compaction: {report.selected} run(s) selected"
        out.console.print(out.columns(title, ("run id", "range", "tokens", "method", "outcome"), rows, wrap="outcome"))
        if report.memory_error:
            out.console.print(f"[yellow]{report.memory_error}[/yellow]")
    if report.failed:
        raise typer.Exit(1)
