"""Reading runs: `runs`, `status`, `history`, `show`, `diff`, `events`, `export`, `trace`, `verify`,
`replay`, and the retention path `delete`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, RunArg, StepArg, command, connect, settings
from waypoint.errors import InvalidInput


def register(app: typer.Typer) -> None:
    for fn in (runs, status, tree, history, show, diff, events, export, trace, verify, replay, delete):
        app.command(name=fn.__name__.rstrip("_"))(fn)


@command
async def runs(
    limit: Annotated[int, typer.Option(help="How many runs, newest first.")] = 20,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    batch: Annotated[
        str | None, typer.Option(help="Only the reruns of this batch (`waypoint rerun --select`).")
    ] = None,
    roots: Annotated[bool, typer.Option("--roots", help="Leave sub-agent runs out.")] = False,
    schedule: Annotated[
        str | None, typer.Option(help="Only the runs this schedule fired (`waypoint cron list`).")
    ] = None,
    fingerprint: Annotated[
        str | None,
        typer.Option(help="Only the runs that started with this agent version (a prefix of its fingerprint)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs from Postgres."""
    from waypoint.app import console as out

    async with await connect() as wp:
        rows = await wp.runs(
            limit=limit, status=status, batch_id=batch, roots=roots, schedule_id=schedule, fingerprint=fingerprint
        )
    if as_json:
        out.print_json([{**out.as_json(r), "status": r.shown_status} for r in rows])
        return
    if rows:
        out.console.print(out.runs_table(rows, wp.tenant()))
    elif status or batch or schedule or fingerprint:
        out.console.print("no run matches: `waypoint runs` lists them all")
    else:
        out.console.print('no runs yet: start one with `waypoint run "<task>"`')


@command
async def status(
    run_id: RunArg,
    follow: Annotated[bool, typer.Option("--follow", help="Show its steps as they land, until it ends.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show one run, its step timeline and, while it runs, its live state (pending approvals)."""
    from waypoint.app import console as out

    if follow:
        from waypoint.app.cli.run import follow_to_end

        async with await connect(temporal=True) as wp:
            await wp.run(run_id)  # unknown or another tenant's: one line, at once
            await follow_to_end(wp, run_id, as_json)
        return
    async with await connect() as wp:
        view = await wp.status(run_id)
        row, live = view.row, view.live
        if view.live_error is not None:  # Temporal unreachable, or the run unreadable: Postgres still answers
            print(f"warning: no live state from Temporal: {view.live_error}", file=sys.stderr)
        lines = await wp.timeline(run_id)
        family = await wp.tree(run_id)
        hooks = await wp.webhook_attempts(run_id) if row.webhook else []
        deliveries = await wp.webhooks.list(run_id=run_id) if row.webhook else []
        hook_line = await wp.webhook_summary(run_id) if row.webhook else None
    if as_json:
        from waypoint.client import node_json

        below = [node_json(n) for n in family.nodes[1:]]
        attempts = [a.to_json() for a in hooks]
        out.print_json(
            {
                **out.as_json(row),
                "status": row.shown_status,
                "timeline": lines,
                "live": live,
                "children": below,
                "budget": family.budget.to_json() if family.budget is not None else None,
                "webhook_attempts": attempts,
                "webhook_deliveries": deliveries,
            }
        )
        return
    out.console.print(out.run_table(row))
    if family.budget is not None:
        out.console.print(out.budget_text(family.budget), highlight=False)
    if hook_line:
        out.console.print(f"webhook: {hook_line}", markup=False, highlight=False)
    if lines:
        out.console.print(out.timeline_table(lines))
    if len(family.nodes) > 1:
        out.console.print(out.tree_table(family))
    for p in live.pending_approvals if live else []:
        out.console.print(
            f"[yellow]waiting for approval:[/yellow] {p.tool}({p.arguments}) call {p.call_id}: "
            f"`waypoint approve {run_id}` or `waypoint deny {run_id}`"
        )


@command
async def tree(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """The run and the sub-agent runs below it: one line per run, each with its id, status, steps,
    tokens and cost, then the tree's totals and its budget pool (used, reserved, left)."""
    from waypoint.app import console as out
    from waypoint.client import tree_json

    async with await connect() as wp:
        found = await wp.tree(run_id)
    if as_json:
        out.print_json(tree_json(found))
        return
    out.console.print(out.tree_table(found))
    if found.budget is not None:
        out.console.print(out.budget_text(found.budget), highlight=False)


@command
async def history(
    run_id: RunArg,
    after_step: Annotated[int, typer.Option(help="Start after this step (keyset pagination).")] = 0,
    limit: Annotated[int, typer.Option(help="Steps per page.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """One line per step: time, action, tools, tokens, duration, status; and the run's lineage."""
    from waypoint.app import console as out

    async with await connect() as wp:
        row = await wp.run(run_id)
        lines = await wp.timeline(run_id, after_step=after_step, limit=limit)
        family = await wp.lineage(run_id)
    nxt = lines[-1].step if len(lines) == limit else None
    if as_json:
        out.print_json(
            {"run_id": run_id, "status": row.status, "lineage": family, "next_after_step": nxt, "steps": lines}
        )
        return
    out.console.print(f"[bold]{run_id}[/bold] ({row.agent}, {out.status_text(row.status)}, {row.steps} steps)")
    for link in family:
        out.console.print(f"  {out.lineage_text(link)}")
    out.console.print(out.timeline_table(lines))
    if nxt is not None:
        out.console.print(f"more: waypoint history {run_id} --after-step {nxt}")


@command
async def show(
    run_id: RunArg,
    step: Annotated[str, typer.Option("--step", help="Step number (0 is the task).")],
    as_json: JsonOpt = False,
) -> None:
    """The state at a step: the working memory, and the step's messages, tool calls and results."""
    from waypoint.app import console as out
    from waypoint.checks import parse_step

    async with await connect() as wp:
        found = await wp.state(run_id, parse_step(step))
    if as_json:
        out.print_json(found)
        return
    where = f" (held by ancestor {found.owner_run_id})" if found.owner_run_id != run_id else ""
    out.console.print(f"[bold]{run_id} at step {found.step}[/bold]{where}, recorded {found.at.isoformat()}")
    request = found.request
    if request is None:
        out.console.print(
            f"working memory: {len(found.messages)} messages ({found.dropped_steps} older steps left the window)"
        )
    else:
        check = "[green]matches[/green]" if request["matches"] else "[red]does not match[/red]"
        out.console.print(
            f"what the model call of step {found.step + 1} received: {len(found.messages)} messages, "
            f"~{request['tokens']} tokens ({check} the hash it recorded)"
        )
        for ref in request["recalled"]:
            out.console.print(f"  recalled: run {ref['run_id']}, step {ref['step']}, {ref['kind']} ({ref['score']})")
    for message in found.messages:
        out.console.print(out.message_text(message), soft_wrap=True)
    if found.events:
        out.console.print("[bold]events of this step[/bold]")
        for event in found.events:
            line = f"  #{event.seq} {event.kind}: {out.event_text(event.kind, event.payload)}"
            out.console.print(line, soft_wrap=True)
    if found.children:
        out.console.print("[bold]sub-agent calls of this step[/bold]")
        for call in found.children:
            out.console.print(f"  call {call.call_index}: {out.agent_call_text(call)}", soft_wrap=True, highlight=False)


@command
async def diff(run_id: RunArg, a: StepArg, b: StepArg, as_json: JsonOpt = False) -> None:
    """What changed in the state between steps A and B: messages added or dropped, fields, tokens."""
    from waypoint.app import console as out
    from waypoint.checks import parse_step

    async with await connect() as wp:
        d = await wp.diff(run_id, parse_step(a), parse_step(b))
    if as_json:
        out.print_json(d)
        return
    out.console.print(f"[bold]{run_id}: step {d.a} -> step {d.b}[/bold]  context ~{d.tokens_a} -> ~{d.tokens_b} tokens")
    for message in d.dropped:
        out.console.print("[red]- [/red]" + out.message_text(message), soft_wrap=True)
    for message in d.added:
        out.console.print("[green]+ [/green]" + out.message_text(message), soft_wrap=True)
    for name, (before, after) in d.changed.items():
        out.console.print(f"[yellow]~ {name}[/yellow]: {before} -> {after}")
    if not (d.added or d.dropped or d.changed):
        out.console.print("no change")


@command
async def events(
    run_id: RunArg,
    kind: Annotated[list[str] | None, typer.Option(help="Only this kind (repeatable).")] = None,
    since_step: Annotated[int, typer.Option(help="From this step on.")] = 0,
    limit: Annotated[int | None, typer.Option(help="At most this many.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's append-only event log."""
    from waypoint.app import console as out

    async with await connect() as wp:
        rows = await wp.events(run_id, kinds=kind, since_step=since_step, limit=limit)
    if as_json:
        out.print_json(rows)
        return
    for e in rows:
        out.console.print(
            f"#{e.seq:<4} step {e.step:<4} {e.created_at.strftime('%H:%M:%S.%f')[:12]}  {e.kind:<20} "
            f"{out.event_text(e.kind, e.payload)}",
            soft_wrap=True,
        )


@command
async def export(
    run_id: RunArg,
    fmt: Annotated[str, typer.Option("--format", help="Only jsonl for now.")] = "jsonl",
    output: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
) -> None:
    """The full transcript (run row, then every event in order) as JSON lines."""
    from waypoint.app import console as out

    if fmt != "jsonl":
        raise InvalidInput(f"unknown format {fmt!r}: use --format jsonl")
    if output is not None and not output.parent.is_dir():
        raise InvalidInput(f"no folder {str(output.parent)!r} for --output: create it, or write elsewhere")
    async with await connect() as wp:
        sink = output.open("w") if output else sys.stdout
        try:
            count = 0
            async for line in wp.export(run_id):
                sink.write(line + "\n")
                count += 1
        finally:
            if output:
                sink.close()
    if output:
        out.console.print(f"wrote {count} lines to {output}")


@command
async def trace(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """The run's trace: its span tree from the local span file, or with an OTLP endpoint its id and UI link."""
    from waypoint.app import console as out
    from waypoint.errors import NotFound
    from waypoint.telemetry import render

    cfg = settings()
    async with await connect() as wp:
        trace_id = await wp.trace_id(run_id)
    if not trace_id:
        raise NotFound(f"run {run_id} has no trace id: it started with tracing off (WAYPOINT_TRACING=false)")
    link = render.ui_link(cfg, trace_id)
    if cfg.otlp_endpoint:
        if as_json:
            out.print_json({"run_id": run_id, "trace_id": trace_id, "url": link})
            return
        out.console.print(f"trace {trace_id}" + (f"  {link}" if link else "  (set WAYPOINT_TRACE_UI_URL for a link)"))
        return
    spans = render.trace_spans(cfg, run_id, trace_id)
    if as_json:
        print(render.as_json(spans))
        return
    out.console.print(render.tree(run_id, trace_id, spans))


@command
async def verify(
    run_id: Annotated[str | None, typer.Argument(help="Run id (or --all).", show_default=False)] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Check every run of the tenant against Temporal (see below).")
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="With --all: only runs started since, an age (2h, 7d) or an ISO time.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Recompute the event hash chain and checkpoint hashes of a run and of every sub-agent run below
    it, and check each sub-agent answer its caller's ledger holds; name the first broken link.

    With --all: every run of the tenant (started since --since) checked against its Temporal history:
    each completed model and tool activity has its event, chains and checkpoints hold, its status
    matches its workflow's, no tool effect is recorded twice. One line per violation
    (`run <id>: <what>`), then a summary; exit 1 if there is any."""
    from waypoint.app import console as out
    from waypoint.gateway.invariants import report_json

    if every and run_id is not None:
        raise InvalidInput("give a run id or --all, not both")
    if not every:
        if run_id is None:
            raise InvalidInput("give a run id, or --all to check every run")
        if since is not None:
            raise InvalidInput("--since goes with --all: `waypoint verify --all --since 2h`")
        await _verify_one(run_id, as_json)
        return
    from waypoint.checks import parse_when

    when = parse_when("--since", since) if since is not None else None  # bad input: before connecting
    async with await connect(temporal=True) as wp:
        report = await wp.verify_all(when, progress=_progress())
    if as_json:
        out.print_json(report_json(report))
    else:
        for violation in report.violations:
            print(violation.line())
        gone = f", {len(report.without_history)} finished without Temporal history" if report.without_history else ""
        print(
            f"{'ok' if report.ok else 'violations'}: {report.runs} runs checked, "
            f"{len(report.violations)} violations{gone} ({report.seconds:.1f} s)"
        )
    sys.stdout.flush()
    if not report.ok:
        raise typer.Exit(1)


def _progress() -> Callable[[int, int], None]:
    """Progress on stderr when there are many runs: every 100 runs, and at the end."""

    def show(done: int, total: int) -> None:
        if total >= 200 and (done % 100 == 0 or done == total):
            print(f"checked {done} of {total} runs", file=sys.stderr, flush=True)

    return show


async def _verify_one(run_id: str, as_json: bool) -> None:
    from waypoint.app import console as out

    async with await connect() as wp:
        verdict = await wp.verify(run_id)
    if as_json:
        out.print_json(verdict)
    elif verdict.ok:
        tree = [verdict, *verdict.below]
        below = f" in {len(tree)} runs (this one and the sub-agent runs below it)" if verdict.below else ""
        events, checkpoints = sum(v.events for v in tree), sum(v.checkpoints for v in tree)
        out.console.print(f"[green]ok[/green]: {events} events and {checkpoints} checkpoints verified{below}")
    if not verdict.ok:
        if not as_json:
            broken = verdict.broken
            first = broken[0]
            count = sum(len(v.problems) for v in broken)
            more = f" ({count - 1} more in {len(broken)} run(s): see --json)" if count > 1 else ""
            print(f"error: run {first.run_id} was changed: {first.problems[0]}{more}", file=sys.stderr)
        raise typer.Exit(1)


@command
async def replay(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Replay the run's Temporal history (every execution) against the current workflow code."""
    from waypoint.app import console as out

    async with await connect() as wp:
        outcomes = await wp.replay(run_id)
    failed = [o for o in outcomes if o.error]
    if as_json:
        out.print_json(outcomes)
    elif not failed:
        out.console.print(f"[green]ok[/green]: {len(outcomes)} execution(s) replay against the current code")
    if failed:
        if not as_json:
            print(
                f"error: execution {failed[0].execution} of {run_id} does not replay: {failed[0].error}",
                file=sys.stderr,
            )
        raise typer.Exit(1)


@command
async def delete(run_id: RunArg, yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False) -> None:
    """Delete a finished run and everything it wrote (the retention path of the append-only log)."""
    from waypoint.app import console as out

    if not yes and not typer.confirm(f"Delete run {run_id} and all its events, checkpoints and tool effects?"):
        raise typer.Exit(1)
    async with await connect() as wp:
        await wp.delete(run_id)
    out.console.print(f"deleted {run_id}")
