"""What recovery.py reads after the runs: from Temporal histories, what each kill interrupted and when
the runs moved again; from Postgres and the effects file, whether a step was lost or an effect repeated.

Event times come from the Temporal server and kill times from this process:
both are this machine's clock, so they compare directly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import WorkflowHistory

SHORT = {"call_model": "model", "run_tool": "tool"}


@dataclass(frozen=True)
class Kill:
    at: float  # wall clock of the SIGKILL
    offset: float  # seconds since the runs started
    victim_pid: int
    startup: float  # the replacement's spawn until its "worker ready" line


@dataclass
class Timeline:
    """One run's history, reduced to what a kill can interrupt."""

    started: float = math.inf
    ended: float = math.inf
    # name, scheduled, closed, and when its last attempt started if that was a retry (history keeps no other)
    activities: list[tuple[str, float, float, float]] = field(default_factory=list)
    workflow_tasks: list[tuple[str, float]] = field(default_factory=list)  # worker identity, closed
    completions: list[tuple[float, str]] = field(default_factory=list)  # time, worker identity


def timeline(history: WorkflowHistory) -> Timeline:
    line, names, scheduled, closed, retried, task_started = Timeline(), {}, {}, {}, {}, {}
    for event in history.events:
        at = event.event_time.ToNanoseconds() / 1e9
        kind = event.WhichOneof("attributes") or ""
        attrs: Any = getattr(event, kind, None)
        if kind == "workflow_execution_started_event_attributes":
            line.started = at
        elif kind == "workflow_task_started_event_attributes":
            task_started[event.event_id] = attrs.identity
        elif kind.startswith("workflow_task_") and hasattr(attrs, "started_event_id"):  # completed, failed, timed out
            if attrs.started_event_id in task_started:  # a schedule-to-start timeout was never started
                line.workflow_tasks.append((task_started[attrs.started_event_id], at))
        elif kind == "activity_task_scheduled_event_attributes":
            names[event.event_id], scheduled[event.event_id] = attrs.activity_type.name, at
        elif kind == "activity_task_started_event_attributes":
            if attrs.attempt > 1:  # written when the attempt ends, but stamped with the time it started
                retried[attrs.scheduled_event_id] = at
        elif kind.startswith("activity_task_"):  # completed, failed, timed out, canceled
            closed[attrs.scheduled_event_id] = at
            if kind == "activity_task_completed_event_attributes":
                line.completions.append((at, attrs.identity))
    line.ended = at
    line.activities = [(names[i], t, closed.get(i, math.inf), retried.get(i, math.inf)) for i, t in scheduled.items()]
    return line


def in_flight(kill: Kill, run: Timeline) -> list[str]:
    """What the run was doing at the kill: its activities, else its workflow task."""
    busy = [SHORT.get(name, name) for name, s, c, _ in run.activities if s < kill.at < c]
    # Held by the dead worker until the task's own timeout. The server may hand it a task just after
    # the kill, to a poll it had sent before: such a task is in flight too.
    if any(who.startswith(f"{kill.victim_pid}@") and closed > kill.at for who, closed in run.workflow_tasks):
        busy.append("workflow task")
    # Else the next workflow task waits on the dead worker's sticky queue.
    return busy or ["sticky queue"]


def recovery(
    kill: Kill, following: float, lines: list[Timeline]
) -> tuple[str, float | None, float | None, float | None]:
    """What the kill interrupted; then, from the kill: the first retried attempt, the first run and the
    last run to complete an activity again. A retry that started after the `following` kill may be a
    second one: history has no trace of the first, so it is not shown."""
    affected = [r for r in lines if r.started < kill.at < r.ended]
    running = Counter(name for run in affected for name in in_flight(kill, run))

    def since(times: Iterable[float]) -> float | None:
        first = min((at for at in times if at > kill.at), default=None)
        return None if first is None else first - kill.at

    retry = since(retry for r in affected for _, s, c, retry in r.activities if s < kill.at < c and retry < following)
    # A completion the victim sent just before it died may be stamped just after: it is no resumption.
    victim = f"{kill.victim_pid}@"  # a worker's identity is pid@host
    resumed = [since(at for at, who in r.completions if not who.startswith(victim)) for r in affected]
    known = [x for x in resumed if x is not None]
    last = max(known) if known and len(known) == len(resumed) else None
    return ", ".join(f"{n} {c}" for n, c in running.most_common()) or "-", retry, min(known, default=None), last


def longest_wait(lines: list[Timeline]) -> float:
    """The longest any run went without completing an activity: what one run lost to its worst kill."""
    times = [sorted([r.started, *(at for at, _ in r.completions)]) for r in lines]
    return max((b - a for run in times for a, b in pairwise(run)), default=0.0)


async def query(engine: AsyncEngine, sql: str, **params: object) -> list[Row]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def check(engine: AsyncEngine, run_ids: list[str], steps: int, effects: Path) -> dict[str, int]:
    """Lost steps and repeated effects, and how often a re-run tool call found its effect already done."""
    stored = await query(engine, "SELECT run_id, step FROM checkpoints WHERE run_id = ANY(:ids)", ids=run_ids)
    ledger = await query(
        engine, "SELECT idempotency_key, attempt, output FROM tool_effects WHERE run_id = ANY(:ids)", ids=run_ids
    )
    # Checkpoint 0 holds the task, 1..steps the tool steps, steps+1 the answer.
    expected = {(run_id, step) for run_id in run_ids for step in range(steps + 2)}
    lines = Counter(effects.read_text().splitlines() if effects.exists() else [])
    return {
        "lost": len(expected - {(row.run_id, row.step) for row in stored}),
        "duplicates": sum(n - 1 for n in lines.values()),
        "missing": len({row.idempotency_key for row in ledger} - set(lines)),
        "reruns": sum(1 for row in ledger if row.attempt > 1),
        "kept_once": sum(1 for row in ledger if "already there" in row.output),
    }
