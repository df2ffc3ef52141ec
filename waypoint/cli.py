"""The `waypoint` command line.

Every command turns a WaypointError into one red line on stderr and exit code 1.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich import box
from rich.table import Table

from waypoint import console as out
from waypoint.config import Settings
from waypoint.errors import WaypointError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable, time-travelling LLM agent runs on Temporal.",
)

T = TypeVar("T")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
_overrides: dict[str, Any] = {}


@app.callback()
def _global(
    state_dir: Annotated[Path | None, typer.Option(help="State folder (WAYPOINT_STATE_DIR).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant id (WAYPOINT_TENANT).")] = None,
) -> None:
    if state_dir is not None:
        _overrides["state_dir"] = state_dir
    if tenant is not None:
        _overrides["tenant"] = tenant


def settings(**extra: Any) -> Settings:
    try:
        return Settings(**{**_overrides, **extra})
    except Exception as exc:  # pydantic's ValidationError, flattened to one line
        raise WaypointError("invalid configuration: " + " ".join(str(exc).split())) from None


def fail(message: str) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(1)


def command(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async command; a WaypointError becomes one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return asyncio.run(fn(*args, **kwargs))
        except WaypointError as exc:
            raise fail(str(exc)) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    return wrapper


# --- the embedded stack --------------------------------------------------------------------------


def _raise_on_sigterm() -> None:
    # While the stack starts (synchronous code), turn SIGTERM into KeyboardInterrupt so cleanup runs.
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


@app.command()
def dev(no_worker: Annotated[bool, typer.Option("--no-worker", help="Start no worker here.")] = False) -> None:
    """Start the embedded stack (Temporal, Postgres, Qdrant) and a worker; Ctrl-C stops it all."""
    from waypoint.devstack import serve

    _raise_on_sigterm()
    try:
        serve(settings(), worker=not no_worker)
    except WaypointError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        pass


@app.command()
def demo(
    model: Annotated[str | None, typer.Option(help="Model spec, e.g. openai:gpt-4o-mini (default: scripted).")] = None,
    chaos: Annotated[
        bool, typer.Option("--chaos", help="Fail model calls, kill the worker mid-tool, resume, check the result.")
    ] = False,
) -> None:
    """Run the demo agent to completion on the embedded stack (started, or reused if running)."""
    from waypoint.devstack import run_demo

    if chaos and model:
        raise fail("--chaos plays its own model (a local server that fails some calls): drop --model")
    _raise_on_sigterm()
    try:
        run_demo(settings(), model=model, chaos=chaos)
    except WaypointError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command()
@command
async def worker() -> None:
    """Run a worker against the configured Temporal and Postgres (as `python worker.py`)."""
    from waypoint.devstack import worker_main

    await worker_main(settings())


@app.command()
@command
async def migrate() -> None:
    """Apply the database migrations (Alembic) to the configured Postgres."""
    from waypoint.client import database_url
    from waypoint.store.db import create_engine, schema_revision
    from waypoint.store.db import migrate as apply

    engine = create_engine(database_url(settings()))
    try:
        await apply(engine)
        current, _ = await schema_revision(engine)
    except OSError as exc:
        raise WaypointError(f"cannot reach Postgres ({exc}): check WAYPOINT_DATABASE_URL") from None
    finally:
        await engine.dispose()
    out.console.print(f"database schema at revision {current}")


@app.command(name="codec-server")
@command
async def codec_server(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8888,
) -> None:
    """Serve the payload codec (POST /decode, /encode) to the Temporal Web UI and CLI until Ctrl-C."""
    from waypoint.codec import CodecServer, EncryptionCodec
    from waypoint.worker import stop_event

    cfg = settings()
    codec = EncryptionCodec.from_settings(cfg)
    if codec is None:
        raise WaypointError("WAYPOINT_CODEC_KEYS is not set: the codec server needs the keys the workers use")
    try:
        server = CodecServer(codec, cfg.codec_ui_origin).start(host, port)
    except OSError as exc:
        raise WaypointError(f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port") from None
    out.console.print(
        f"codec server on http://{host}:{port} for the UI at {cfg.codec_ui_origin} "
        f"(encrypting with key {codec.current_key_id}); Ctrl-C stops it"
    )
    try:
        await stop_event().wait()
    finally:
        server.stop()


# --- runs ----------------------------------------------------------------------------------------


@app.command()
@command
async def run(
    task: Annotated[str, typer.Argument(help="What the agent should do.")],
    agent: Annotated[str, typer.Option(help="Agent name.")] = "demo",
    model: Annotated[str | None, typer.Option(help="Model spec overriding the agent's.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Step limit overriding the agent's.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Token budget (input + output).")] = None,
    max_cost: Annotated[float | None, typer.Option(help="Cost budget in USD.")] = None,
    deadline: Annotated[float | None, typer.Option(help="Wall-clock budget in seconds.")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Show steps as they land, until the run ends.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a run on the configured Temporal and print its id."""
    from waypoint.client import Waypoint
    from waypoint.types import Budget

    cfg = settings()
    async with await Waypoint.connect(cfg) as wp:
        budget = Budget(max_steps=max_steps, max_tokens=max_tokens, max_cost_usd=max_cost, deadline_seconds=deadline)
        run_id = await wp.start_run(task, agent=agent, model=model, budget=budget)
        trace = wp._trace_ids.get(run_id)  # known at once only when this process traced the start
        if not follow:
            out.print_json({"run_id": run_id, "trace_id": trace}) if as_json else print(run_id)
            if trace and not as_json:  # stdout stays the bare run id, for $(waypoint run ...)
                print(f"trace {trace}", file=sys.stderr)
            return
        if not as_json:
            out.console.print(f"started [bold]{run_id}[/bold]" + (f" trace {trace}" if trace else ""))
        row = await out.follow(wp, run_id, cfg.tenant, as_json=as_json)
        if as_json:
            out.print_json(row)
        else:
            out.console.print(out.run_table(row))
        if row["status"] in ("failed", "cancelled", "budget_exceeded"):
            raise typer.Exit(1)


@app.command()
@command
async def runs(
    limit: Annotated[int, typer.Option(help="How many runs, newest first.")] = 20,
    status: Annotated[str | None, typer.Option(help="Only runs with this status.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs from Postgres."""
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        rows = await wp.runs(limit=limit, status=status)
    if as_json:
        out.print_json(rows)
        return
    table = Table(title=f"Runs of tenant {settings().tenant}", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("run id", no_wrap=True, min_width=16)  # people copy it: never wrap or cut it
    for col in ("agent", "status", "steps", "created"):
        table.add_column(col, no_wrap=True, justify="right" if col == "steps" else "left")
    table.add_column("task", no_wrap=True)
    # One line per run: the task gets what the fixed columns leave of the terminal's width.
    room = max(12, out.console.width - 64)
    for r in rows:
        task = r["task"] if len(r["task"]) <= room else r["task"][: room - 1] + "…"
        created = r["created_at"][5:16].replace("T", " ")
        table.add_row(r["run_id"], r["agent"], out.status_text(r["status"]), str(r["steps"]), created, task)
    out.console.print(table if rows else 'no runs yet: start one with `waypoint run "<task>"`')


@app.command()
@command
async def status(run_id: Annotated[str, typer.Argument(help="Run id.")], as_json: JsonOpt = False) -> None:
    """Show one run, its step timeline and, while it runs, its live state (pending approvals)."""
    from dataclasses import asdict

    from waypoint.client import Waypoint
    from waypoint.types import RunStatus

    cfg = settings()
    async with await Waypoint.connect(cfg, temporal=False) as wp:
        row = await wp.run(run_id)
        lines = await wp.timeline(run_id)
        live = None
        if row["status"] not in RunStatus.FINISHED:
            try:
                await wp.connect_temporal()
                live = asdict(await wp.progress(run_id))
            except WaypointError:
                live = None  # Temporal unreachable: Postgres still answers
    if as_json:
        out.print_json({**row, "timeline": [asdict(line) for line in lines], "live": live})
        return
    out.console.print(out.run_table(row))
    if lines:
        out.console.print(out.timeline_table(lines))
    if live and live["pending_approvals"]:
        for p in live["pending_approvals"]:
            out.console.print(
                f"[yellow]waiting for approval:[/yellow] {p['tool']}({p['arguments']}) call {p['call_id']}: "
                f"`waypoint approve {run_id}` or `waypoint deny {run_id}`"
            )


@app.command()
@command
async def verify(run_id: Annotated[str, typer.Argument(help="Run id.")], as_json: JsonOpt = False) -> None:
    """Recompute a run's event hash chain and checkpoint hashes; name the first broken link."""
    from dataclasses import asdict

    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        verdict = await wp.verify(run_id)
    if as_json:
        out.print_json({**asdict(verdict), "ok": verdict.ok})
    elif verdict.ok:
        out.console.print(f"[green]ok[/green]: {verdict.events} events and {verdict.checkpoints} checkpoints verified")
    if not verdict.ok:
        if not as_json:
            more = f" ({len(verdict.problems) - 1} more: see --json)" if len(verdict.problems) > 1 else ""
            print(f"error: run {run_id} was changed: {verdict.problems[0]}{more}", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
@command
async def delete(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Delete a finished run and everything it wrote (the retention path of the append-only log)."""
    from waypoint.client import Waypoint

    if not yes and not typer.confirm(f"Delete run {run_id} and all its events, checkpoints and tool effects?"):
        raise typer.Exit(1)
    async with await Waypoint.connect(settings(), temporal=False) as wp:
        await wp.delete(run_id)
    out.console.print(f"deleted {run_id}")


# --- time travel ---------------------------------------------------------------------------------

StepArg = Annotated[str, typer.Argument(help="Step number.", show_default=False)]


@app.command()
@command
async def history(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    after_step: Annotated[int, typer.Option(help="Start after this step (keyset pagination).")] = 0,
    limit: Annotated[int, typer.Option(help="Steps per page.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """One line per step: time, action, tools, tokens, duration, status; and the run's lineage."""
    from dataclasses import asdict

    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        row = await wp.run(run_id)
        lines = await wp.timeline(run_id, after_step=after_step, limit=limit)
        family = await wp.lineage(run_id)
    nxt = lines[-1].step if len(lines) == limit else None
    if as_json:
        page = {"run_id": run_id, "status": row["status"], "lineage": family, "next_after_step": nxt}
        out.print_json({**page, "steps": [asdict(line) for line in lines]})
        return
    out.console.print(f"[bold]{run_id}[/bold] ({row['agent']}, {out.status_text(row['status'])}, {row['steps']} steps)")
    for link in family:
        verb = "forked from" if link["relation"] == "ancestor" else "fork"
        out.console.print(f"  {verb} {link['run_id']} at step {link['forked_at']}")
    out.console.print(out.timeline_table(lines))
    if nxt is not None:
        out.console.print(f"more: waypoint history {run_id} --after-step {nxt}")


@app.command()
@command
async def show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    step: Annotated[str, typer.Option("--step", help="Step number (0 is the task).")],
    as_json: JsonOpt = False,
) -> None:
    """The state at a step: the working memory, and the step's messages, tool calls and results."""
    from waypoint.client import Waypoint
    from waypoint.store.travel import parse_step

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        found = await wp.state(run_id, parse_step(step))
    if as_json:
        out.print_json(found)
        return
    state = found["state"]
    where = f" (held by ancestor {found['run_id']})" if found["run_id"] != run_id else ""
    out.console.print(f"[bold]{run_id} at step {found['step']}[/bold]{where}, recorded {found['at']}")
    dropped = state.get("dropped_steps", 0)
    out.console.print(f"working memory: {len(state['messages'])} messages ({dropped} older steps left the window)")
    for message in state["messages"]:
        out.console.print(out.message_text(message), soft_wrap=True)
    if found["events"]:
        out.console.print("[bold]events of this step[/bold]")
        for event in found["events"]:
            out.console.print(f"  #{event['seq']} {event['kind']}: {out.short(event['payload'])}", soft_wrap=True)


@app.command()
@command
async def diff(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    a: StepArg,
    b: StepArg,
    as_json: JsonOpt = False,
) -> None:
    """What changed in the state between steps A and B: messages added or dropped, fields, tokens."""
    from dataclasses import asdict

    from waypoint.client import Waypoint
    from waypoint.store.travel import parse_step

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        d = await wp.diff(run_id, parse_step(a), parse_step(b))
    if as_json:
        out.print_json(asdict(d))
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


@app.command(name="events")
@command
async def events_(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    kind: Annotated[list[str] | None, typer.Option(help="Only this kind (repeatable).")] = None,
    since_step: Annotated[int, typer.Option(help="From this step on.")] = 0,
    limit: Annotated[int | None, typer.Option(help="At most this many.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The run's append-only event log."""
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        rows = await wp.events(run_id, kinds=kind, since_step=since_step, limit=limit)
    if as_json:
        out.print_json(rows)
        return
    for e in rows:
        out.console.print(
            f"#{e['seq']:<4} step {e['step']:<4} {e['created_at'][11:23]}  {e['kind']:<20} {out.short(e['payload'])}",
            soft_wrap=True,
        )


@app.command()
@command
async def export(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    fmt: Annotated[str, typer.Option("--format", help="Only jsonl for now.")] = "jsonl",
    output: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None,
) -> None:
    """The full transcript (run row, then every event in order) as JSON lines."""
    from waypoint.client import Waypoint

    if fmt != "jsonl":
        raise WaypointError(f"unknown format {fmt!r}: use --format jsonl")
    async with await Waypoint.connect(settings(), temporal=False) as wp:
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


@app.command()
@command
async def replay(run_id: Annotated[str, typer.Argument(help="Run id.")], as_json: JsonOpt = False) -> None:
    """Replay the run's Temporal history (every execution) against the current workflow code."""
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings()) as wp:
        outcomes = await wp.replay(run_id)
    failed = [(execution, error) for execution, error in outcomes if error]
    if as_json:
        out.print_json([{"execution": execution, "error": error} for execution, error in outcomes])
    elif not failed:
        out.console.print(f"[green]ok[/green]: {len(outcomes)} execution(s) replay against the current code")
    if failed:
        if not as_json:
            execution, error = failed[0]
            print(f"error: execution {execution} of {run_id} does not replay: {error}", file=sys.stderr)
        raise typer.Exit(1)


@app.command()
@command
async def fork(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    step: Annotated[str, typer.Option("--step", help="Fork from the state at this step.")],
    message: Annotated[str | None, typer.Option(help="A user message added to that state.")] = None,
    model: Annotated[str | None, typer.Option(help="Model spec for the new run.")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Show steps as they land.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start a new run from the state of RUN at a step; the parent is untouched."""
    from waypoint.client import Waypoint
    from waypoint.store.travel import parse_step

    cfg = settings()
    async with await Waypoint.connect(cfg) as wp:
        new_id = await wp.fork(run_id, parse_step(step), message=message, model=model)
        if not follow:
            out.print_json({"run_id": new_id, "parent": run_id}) if as_json else print(new_id)
            return
        out.console.print(f"started [bold]{new_id}[/bold], forked from {run_id} at step {step}")
        row = await out.follow(wp, new_id, cfg.tenant, as_json=as_json)
        out.print_json(row) if as_json else out.console.print(out.run_table(row))


@app.command()
@command
async def trace(run_id: Annotated[str, typer.Argument(help="Run id.")], as_json: JsonOpt = False) -> None:
    """The run's trace: its span tree from the local span file, or with an OTLP endpoint its id and UI link."""
    from waypoint.client import Waypoint
    from waypoint.telemetry import render

    cfg = settings()
    async with await Waypoint.connect(cfg, temporal=False) as wp:
        trace_id = await wp.trace_id(run_id)
    if not trace_id:
        raise WaypointError(f"run {run_id} has no trace id: it started with tracing off (WAYPOINT_TRACING=false)")
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


# --- messages to a running run -------------------------------------------------------------------

RunArg = Annotated[str, typer.Argument(help="Run id.")]
CallOpt = Annotated[str | None, typer.Option("--call", help="Tool call id, when several wait.")]
ReasonOpt = Annotated[str | None, typer.Option(help="Why; the model reads it.")]


async def _message(run_id: str, verb: str, as_json: bool, *args: object) -> None:
    from dataclasses import asdict

    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings()) as wp:
        progress = await getattr(wp, verb)(run_id, *args)
    if as_json:
        out.print_json(asdict(progress))
    else:
        out.console.print(f"{run_id}: {verb} accepted (step {progress.step}, {progress.status})")


@app.command()
@command
async def pause(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Pause a run before its next step."""
    await _message(run_id, "pause", as_json)


@app.command()
@command
async def resume(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Resume a paused run."""
    await _message(run_id, "resume", as_json)


@app.command()
@command
async def cancel(run_id: RunArg, reason: ReasonOpt = None, as_json: JsonOpt = False) -> None:
    """Cancel a run after its current step (status `cancelled`, final checkpoint kept)."""
    await _message(run_id, "cancel", as_json, reason)


@app.command()
@command
async def send(
    run_id: RunArg, text: Annotated[str, typer.Argument(help="The message.")], as_json: JsonOpt = False
) -> None:
    """Send a user message to a run; its next model call reads it."""
    await _message(run_id, "send", as_json, text)


@app.command()
@command
async def approve(run_id: RunArg, call: CallOpt = None, reason: ReasonOpt = None, as_json: JsonOpt = False) -> None:
    """Approve a tool call that waits for approval."""
    await _message(run_id, "approve", as_json, call, reason)


@app.command()
@command
async def deny(run_id: RunArg, call: CallOpt = None, reason: ReasonOpt = None, as_json: JsonOpt = False) -> None:
    """Deny a tool call that waits for approval; the model is told why."""
    await _message(run_id, "deny", as_json, call, reason)


# --- compaction ----------------------------------------------------------------------------------

schedule_app = typer.Typer(no_args_is_help=True, help="The compaction Schedule on Temporal.")
app.add_typer(schedule_app, name="schedule")


@schedule_app.command(name="apply")
@command
async def schedule_apply(as_json: JsonOpt = False) -> None:
    """Create the compaction Schedule, or update it if its settings changed (idempotent)."""
    from waypoint.client import Waypoint

    cfg = settings()
    async with await Waypoint.connect(cfg, temporal=False) as wp:
        await wp.connect_temporal()
        outcome = await wp.apply_compaction_schedule()
    if as_json:
        out.print_json({"schedule_id": cfg.compaction_schedule_id, "outcome": outcome})
    else:
        out.console.print(
            f"schedule {cfg.compaction_schedule_id} {outcome}: a compaction pass every "
            f"{cfg.compaction_interval_seconds:g} s, overlapping passes skipped"
        )


@schedule_app.command(name="show")
@command
async def schedule_show(as_json: JsonOpt = False) -> None:
    """Show the compaction Schedule and the results of its last passes."""
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        await wp.connect_temporal()
        found = await wp.compaction_schedule()
    if as_json:
        out.print_json(found)
        return
    every = ", ".join(f"{s:g} s" for s in found["every_seconds"])
    state = "paused" if found["paused"] else "active"
    out.console.print(
        f"[bold]{found['id']}[/bold] ({state}): {found['workflow']} every {every} on {found['task_queue']}, "
        f"overlap {found['overlap']}; {found['actions_taken']} passes started, "
        f"{found['skipped_overlaps']} skipped; next: {', '.join(found['next_runs']) or '-'}"
    )
    table = Table(title="last passes", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("started", "status", "selected", "compacted", "tokens", "failed", "memory"):
        table.add_column(col)
    for p in found["last_passes"]:
        tokens = f"{p['tokens_before']:,} -> {p['tokens_after']:,}" if "tokens_before" in p else ""
        table.add_row(
            p["at"][:19].replace("T", " "),
            p["status"],
            str(p.get("selected", "")),
            str(p.get("compacted", "")),
            tokens,
            "; ".join(p.get("failed", [])),
            p.get("memory_error") or (f"{p['episodes_saved']} saved" if "episodes_saved" in p else ""),
        )
    out.console.print(table if found["last_passes"] else "no pass has run yet")


@app.command()
@command
async def compact(
    run_id: Annotated[
        str | None, typer.Argument(help="Run id; without it, every run of the tenant past the threshold.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a compaction pass now and print what it did (exit code 1 if a run could not be compacted)."""
    from dataclasses import asdict

    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        await wp.connect_temporal()
        report = await wp.compact(run_id)
    if as_json:
        out.print_json({**asdict(report), "failed": len(report.failed)})
    else:
        title = f"compaction: {report.selected} run(s) selected"
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("run id", "range", "tokens", "method", "outcome"):
            table.add_column(col, no_wrap=col == "run id")
        for r in report.results:
            outcome = f"[red]{r.error}[/red]" if r.error else ("compacted" if r.created else "nothing new")
            tokens = f"{r.tokens_before:,} -> {r.tokens_after:,}" if r.created else ""
            table.add_row(r.run_id, f"#{r.first_seq}-#{r.last_seq}" if r.created else "", tokens, r.method, outcome)
        out.console.print(table)
        if report.memory_error:
            out.console.print(f"[yellow]{report.memory_error}[/yellow]")
    if report.failed:
        raise typer.Exit(1)


memory_app = typer.Typer(no_args_is_help=True, help="Long-term (episodic) memory, through the memory worker.")
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
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        await wp.connect_temporal()
        found = await wp.memory_search(query, k=k, agent=agent, run_id=run)
    if as_json:
        out.print_json(found)
        return
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("score", "run", "step", "kind", "text"):
        table.add_column(col, no_wrap=col != "text")
    for m in found:
        table.add_row(f"{m['score']:.3f}", m["run_id"], str(m["step"]), m["kind"], m["text"])
    out.console.print(table if found else "nothing found")


@memory_app.command(name="show")
@command
async def memory_show(run_id: Annotated[str, typer.Argument(help="Run id.")], as_json: JsonOpt = False) -> None:
    """Every episode a run left in long-term memory."""
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        await wp.connect_temporal()
        found = await wp.memory_show(run_id)
    if as_json:
        out.print_json(found)
        return
    table = Table(title=f"memories of {run_id}", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("step", "kind", "importance", "text"):
        table.add_column(col, no_wrap=col != "text")
    for m in found:
        table.add_row(str(m["step"]), m["kind"], f"{m['importance']:.2f}", m["text"])
    out.console.print(table if found else f"run {run_id} has no memories")


@memory_app.command(name="forget")
@command
async def memory_forget(run_id: Annotated[str, typer.Argument(help="Run id.")], as_json: JsonOpt = False) -> None:
    """Delete a run's memories (this tenant's only). The run's event log is kept."""
    from waypoint.client import Waypoint

    async with await Waypoint.connect(settings(), temporal=False) as wp:
        await wp.connect_temporal()
        deleted = await wp.memory_forget(run_id)
    if as_json:
        out.print_json({"run_id": run_id, "deleted": deleted})
    else:
        out.console.print(f"forgot {deleted} memories of {run_id}")


def main(argv: list[str] | None = None) -> None:
    code: int = 0
    try:
        app(args=argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    # The Temporal client's native threads can abort CPython's finalization at exit
    # ("PyGILState_Release ... must be current", temporalio/sdk-python issue 300), so
    # run the exit hooks ourselves and leave without finalizing.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
