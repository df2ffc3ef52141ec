"""Terminal rendering shared by the CLI commands: timelines, run details, live progress."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from waypoint.client import Waypoint
from waypoint.errors import NotFound, WaypointError
from waypoint.store.reads import StepLine
from waypoint.types import RunStatus

console = Console()
STATUS_STYLE = {"running": "cyan", "completed": "green", "max_steps": "yellow", "failed": "red"}


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def tool_summary(names: list[str]) -> str:
    """`read_file x3, write_file` for the calls of one step."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def short(value: Any, width: int = 160) -> str:
    """One line of JSON, cut to `width` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def message_text(message: dict[str, Any], width: int = 400) -> str:
    role = message.get("role", "?")
    content = message.get("content") or ""
    if len(content) > width:
        content = content[: width - 1] + f"… ({len(message['content'])} characters)"
    calls = message.get("tool_calls") or []
    called = " ".join(f"-> {c['function']['name']}({c['function']['arguments']})" for c in calls)
    ref = f" [{message['tool_call_id']}]" if message.get("tool_call_id") else ""
    return f"[bold]{role}[/bold]{escape(ref)}: {escape(content)} {escape(called)}".rstrip()


def step_text(line: StepLine) -> str:
    what = f"tools: {tool_summary(line.tools)}" if line.tools else "answer"
    errors = f"  [red]{line.tool_errors} tool error(s)[/red]" if line.tool_errors else ""
    return (
        f"step {line.step:>3}  {line.at[11:19]}  {what}  "
        f"[dim]{line.input_tokens}+{line.output_tokens} tok, model {line.model_ms} ms, tools {line.tools_ms} ms[/dim]"
        f"{errors}"
    )


def timeline_table(lines: list[StepLine]) -> Table:
    table = Table(title="Step timeline", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("step", "time", "action", "tool calls", "tokens", "model ms", "tools ms"):
        numeric = col in ("step", "tokens", "model ms", "tools ms")
        table.add_column(col, justify="right" if numeric else "left", no_wrap=col != "tool calls")
    for line in lines:
        table.add_row(
            str(line.step),
            line.at[11:19],
            line.action,
            tool_summary(line.tools) or "-",
            f"{line.input_tokens}/{line.output_tokens}",
            str(line.model_ms),
            str(line.tools_ms),
        )
    return table


def status_text(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{status}[/]"


def run_table(run: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key in (
        "run_id",
        "tenant_id",
        "agent",
        "model",
        "status",
        "steps",
        "max_steps",
        "input_tokens",
        "output_tokens",
        "created_at",
        "finished_at",
        "task",
        "output",
        "error",
    ):
        value = run.get(key)
        if value is not None:
            table.add_row(key, status_text(value) if key == "status" else str(value))
    return table


async def _raise_if_ended(wp: Waypoint, run_id: str) -> None:
    handle = wp.client.get_workflow_handle(run_id)
    if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        return
    try:
        await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        raise WaypointError(getattr(cause, "message", None) or str(cause)) from None
    raise WaypointError(f"run {run_id} ended without a record in Postgres: check the worker's database settings")


async def follow(
    wp: Waypoint, run_id: str, tenant_id: str, *, as_json: bool = False, poll_seconds: float = 0.3
) -> dict[str, Any]:
    """Print steps as they land in Postgres until the run ends; returns the final run row."""
    shown = 0
    with console.status(f"waiting for a worker to start {run_id}...") as spinner:
        while True:
            try:
                run = await wp.run(run_id, tenant_id=tenant_id)
            except NotFound:
                await _raise_if_ended(wp, run_id)  # e.g. it could not start: no row will ever come
                await asyncio.sleep(poll_seconds)
                continue
            for line in await wp.timeline(run_id, tenant_id=tenant_id, after_step=shown):
                if as_json:
                    print(json.dumps(asdict(line), default=str), flush=True)
                else:
                    console.print(step_text(line))
                shown = line.step
            if run["status"] in RunStatus.FINISHED:
                return run
            spinner.update(f"{run_id}: step {shown + 1} running...")
            await asyncio.sleep(poll_seconds)
