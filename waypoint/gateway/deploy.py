"""Deploying new workflow code: the deploy gate's vocabulary and Worker Versioning's names.

The gate (`waypoint check-deploy`, `Waypoint.check_deploy`) replays the Temporal histories of the
open runs and of the last finished ones against the workflow code installed where it runs, before
that code is deployed. It must run with the NEW code (a CI step, a release job), so it is a CLI
command and a Python API, never an HTTP route: a running API server holds the old code.

Kept free of the Temporal SDK (the client and the CLI import it before connecting); the fetching and
replaying is `TemporalGateway.check_deploy` in `waypoint.gateway.temporal`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# The last finished histories the gate replays unless told otherwise, and the most it takes.
FINISHED_DEFAULT = 100
FINISHED_MAX = 100_000
# Histories fetched from Temporal at once while the replayer works through those already here.
FETCHES_AT_ONCE = 32


@dataclass(frozen=True)
class BrokenReplay:
    """One history the installed code cannot replay: the run (workflow id), its execution (Temporal's
    run id), the event where replay broke (None when the failure names none) and the error."""

    workflow_id: str
    execution: str
    workflow_type: str
    open: bool
    event_id: int | None
    error: str
    # What changed and how to guard it, in one sentence (`error` keeps Temporal's own words).
    advice: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "advice", replay_advice(self.error, self.event_id))

    def line(self) -> str:
        at = f" at event {self.event_id}" if self.event_id is not None else ""
        state = "open" if self.open else "finished"
        return (
            f"{state} run {self.workflow_id} (execution {self.execution}, {self.workflow_type}) would not "
            f"replay{at}: {self.advice} (Temporal: {self.error})"
        )


@dataclass(frozen=True)
class DeployCheck:
    """What the gate replayed (open and finished histories, how long it took) and what broke, the
    open runs first, each group in Temporal's listing order (finished: the most recently closed first)."""

    open: int
    finished: int
    seconds: float
    workflow_types: list[str]
    task_queues: list[str]
    broken: list[BrokenReplay] = field(default_factory=list)

    @property
    def histories(self) -> int:
        return self.open + self.finished

    @property
    def ok(self) -> bool:
        return not self.broken

    def summary(self) -> str:
        rate = self.histories / self.seconds if self.seconds > 0 else 0.0
        return (
            f"{self.histories} histories replay on this code ({self.open} open, {self.finished} finished) "
            f"in {self.seconds:.1f} s ({rate:,.0f}/s)"
        )


# Core's nondeterminism messages name the event they stopped at ("HistoryEvent(id: 5, ...)"), or the
# patch whose marker met no command ("patch marker encountered for change cancel-model-call-1").
_EVENT_ID = re.compile(r"HistoryEvent\(id:\s*(\d+)|event[ _]id[:= ]\s*(\d+)", re.IGNORECASE)
_PATCH = re.compile(r"marker encountered for change ([\w.:-]+)")
# The SDK wraps core's failure in its Rust debug form: `Failure { message: "...", source: ...`.
_INNER = re.compile(r'message: "((?:[^"\\]|\\.)*)"')


def replay_advice(error: str, event_id: int | None) -> str:
    """One sentence of what changed between the code that ran a history and this code, and the guard."""
    patch = _PATCH.search(error)
    if patch:
        name = patch.group(1)
        return (
            f"this code no longer calls workflow.patched({name!r}) where the run recorded it: keep that branch "
            f"(or workflow.deprecate_patch({name!r})) until no run that took it is open"
        )
    at = f" at event {event_id}" if event_id is not None else ""
    if "nondetermin" in error.lower():
        return (
            f"this code issues other commands{at} than the run recorded (an activity, timer or child added, "
            'removed or reordered): put the new behaviour behind `if workflow.patched("a-new-name"):` so runs '
            "in flight keep the old branch"
        )
    return f"this code failed while replaying the run{at}: run `waypoint replay RUN` on it to see where"


def replay_error(text: str) -> str:
    """The failure's own message, without the SDK's wrapping."""
    inner = _INNER.search(text)
    return inner.group(1) if inner else text


def failed_event(error: str, events: Sequence[Any]) -> int | None:
    """The event id where replay broke: the one the error names; the marker of the patch it names;
    else the last workflow task of the history (its WorkflowTaskStarted event: a failure that names
    no event comes when the code ran out of recorded events or raised); None for a history with no
    workflow task."""
    found = _EVENT_ID.search(error)
    if found:
        return int(found.group(1) or found.group(2))
    patch = _PATCH.search(error)
    if patch:
        name = patch.group(1).encode()
        for event in events:
            if event.HasField("marker_recorded_event_attributes"):
                details = event.marker_recorded_event_attributes.details
                if any(name in p.data for d in details.values() for p in d.payloads):
                    return int(event.event_id)
    started = [e.event_id for e in events if e.HasField("workflow_task_started_event_attributes")]
    return int(started[-1]) if started else None


def visibility_query(workflow_types: Sequence[str], task_queues: Sequence[str], *, running: bool) -> str:
    """The list filter of Waypoint's own executions: its workflow types on its task queues, open or closed."""
    types = ", ".join(f"'{t}'" for t in workflow_types)
    queues = ", ".join(f"'{q}'" for q in task_queues)
    status = "=" if running else "!="
    return f"WorkflowType IN ({types}) AND TaskQueue IN ({queues}) AND ExecutionStatus {status} 'Running'"


def since_clause(since: datetime | None) -> str:
    return "" if since is None else f" AND CloseTime >= '{since.isoformat()}'"
