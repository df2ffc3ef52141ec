"""`verify --all`: every run's Postgres mirror checked against its Temporal history.

Per run, read in this order (Temporal first, so a step the history shows done and the mirror lacks
is either being recorded right now, with no checkpoint yet, or missing):

1. every model and tool activity that completed, in any execution of its continue-as-new chain,
   has its event: a `model_response` of its step, a `tool_result` of its step and call index. A
   step not recorded yet is in flight, not missing, while the workflow runs (or was terminated
   or timed out mid-step); once it closed on its own, every step counts, but the one whose model
   call a cancel stopped (its `step_cancelled` event says the step has no record; a step a cancel
   came during and that was recorded as it ended counts like any);
2. the hash chain, checkpoint hashes and contiguity hold (`verify` of the run alone);
3. its status matches its workflow's: live and waiting statuses while it runs; completed,
   max_steps and budget_exceeded when it completed (the workflow returns them); failed when it
   failed (it raises); cancelled when it completed, was cancelled (runs from before the
   cancel-request patch) or was terminated (a stuck run's cancel). A mismatch is read again after
   a short delay (the row and the workflow close a moment apart; a finished run still posting
   its webhook runs on) before it is reported. A finished run whose workflow Temporal no longer
   has (retention) is not a violation: it is counted, and its mirror checked alone; a live one is;
4. no tool effect is recorded twice: one `tool_result` event per call, and a ledger row of a
   recorded step has its event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from waypoint.names import FINISHED, LIVE, WAITING_TO_START, Activity, RunStatus, idempotency_key

if TYPE_CHECKING:
    from waypoint.gateway.temporal import HistoryFacts, TemporalGateway
    from waypoint.store import RunStore
    from waypoint.store.invariants import MirrorFacts

# The statuses of the newest execution each run status may sit beside.
_RUNNING = frozenset({"RUNNING"})
EXPECTED: dict[str, frozenset[str]] = {
    **{s: _RUNNING for s in LIVE | WAITING_TO_START},
    RunStatus.COMPLETED: frozenset({"COMPLETED"}),
    RunStatus.MAX_STEPS: frozenset({"COMPLETED"}),
    RunStatus.BUDGET_EXCEEDED: frozenset({"COMPLETED"}),
    RunStatus.FAILED: frozenset({"FAILED"}),
    RunStatus.CANCELLED: frozenset({"COMPLETED", "CANCELED", "TERMINATED"}),
}
# A workflow that closed on its own ran every step it began to its record (or to step_cancelled).
_CLOSED_ON_ITS_OWN = frozenset({"COMPLETED", "FAILED", "CANCELED"})
SETTLE_SECONDS = 2.0
CONCURRENCY = 8  # histories fetched at once (the dev server gains nothing past a few; a remote one does)
BATCH = 200  # runs whose mirror is read in one go (after their histories)


@dataclass(frozen=True)
class Violation:
    run_id: str
    what: str

    def line(self) -> str:
        return f"run {self.run_id}: {self.what}"


@dataclass
class VerifyAllReport:
    """What `verify --all` found: how many runs it checked, the violations (run order, then as found)."""

    since: datetime | None
    runs: int = 0
    violations: list[Violation] = field(default_factory=list)
    # Finished runs whose workflow Temporal no longer has (its retention passed): their mirror was
    # checked alone (chain, checkpoints, ledger), not against a history.
    without_history: list[str] = field(default_factory=list)
    truncated: bool = False  # more runs matched than the limit: the oldest `runs` were checked
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations


def report_json(report: VerifyAllReport) -> dict[str, Any]:
    """The report as JSON: `ok`, `runs`, `violations` ({run_id, what, line}), ... ."""
    return {
        "ok": report.ok,
        "since": report.since.isoformat() if report.since else None,
        "runs": report.runs,
        "violations": [{"run_id": v.run_id, "what": v.what, "line": v.line()} for v in report.violations],
        "without_history": report.without_history,
        "truncated": report.truncated,
        "seconds": round(report.seconds, 3),
    }


def status_fits(row_status: str, workflow_status: str | None, pending: list[str] | None = None) -> bool:
    """Whether a run's row status and its workflow's agree (None: Temporal has no such workflow)."""
    if workflow_status is None:
        return row_status in FINISHED
    if workflow_status in EXPECTED.get(row_status, frozenset()):
        return True
    # FINISH_RUN has written the row; the workflow still posts the webhook, then returns.
    return row_status in FINISHED and workflow_status == "RUNNING" and Activity.DELIVER_WEBHOOK in (pending or [])


def _call(key: str) -> str:
    step, index = key.rsplit(":", 2)[-2:]
    return f"step {step} call {index}"


def mirror_problems(run_id: str, history: HistoryFacts | None, mirror: MirrorFacts) -> list[str]:
    """Invariants 1 and 4: what the history did that the mirror lacks, and effects recorded twice."""
    problems: list[str] = []
    if history is None:
        closed = mirror.status in FINISHED
    else:
        closed = history.status in _CLOSED_ON_ITS_OWN

    def counts(step: int) -> bool:
        return step not in mirror.cancelled_steps and (closed or step <= mirror.recorded_through)

    if history is not None:
        for step in sorted(history.model_steps):
            if step not in mirror.model_steps and counts(step):
                problems.append(
                    f"step {step}: its model call completed in Temporal, and no model_response event has it"
                )
        for step, index in sorted(history.tool_calls):
            key = idempotency_key(run_id, step, index)
            if not mirror.tool_results[key] and counts(step):
                problems.append(
                    f"step {step} call {index}: its tool call completed in Temporal, and no tool_result event has it"
                )
    for key, n in sorted(mirror.tool_results.items()):
        if n > 1:
            problems.append(f"{_call(key)}: {n} tool_result events (one tool effect recorded {n} times)")
    for key, step in sorted(mirror.ledger_keys.items()):
        if not mirror.tool_results[key] and counts(step):
            problems.append(f"{_call(key)}: the tool ledger holds its effect, and no tool_result event records it")
    return problems


class VerifyAll:
    """One pass of `verify --all` for one tenant."""

    def __init__(
        self,
        store: RunStore,
        gateway: TemporalGateway,
        tenant: str,
        *,
        concurrency: int = CONCURRENCY,
        settle_seconds: float = SETTLE_SECONDS,
        progress: Callable[[int, int], None] | None = None,
    ):
        self.store = store
        self.gateway = gateway
        self.tenant = tenant
        self.concurrency = concurrency
        self.settle_seconds = settle_seconds
        self.progress = progress

    async def run(self, since: datetime | None, limit: int | None = None) -> VerifyAllReport:
        started = time.monotonic()
        heads = await self.store.invariants.runs_since(self.tenant, since, None if limit is None else limit + 1)
        report = VerifyAllReport(since=since)
        if limit is not None and len(heads) > limit:
            heads, report.truncated = heads[:limit], True
        found: dict[str, list[str]] = {h.run_id: [] for h in heads}
        suspects: list[str] = []  # runs whose status did not match: read again after a delay
        gate = asyncio.Semaphore(self.concurrency)

        async def history(run_id: str) -> HistoryFacts | None:
            async with gate:
                return await self.gateway.history_facts(run_id)

        for at in range(0, len(heads), BATCH):
            ids = [h.run_id for h in heads[at : at + BATCH]]
            histories = await asyncio.gather(*(history(i) for i in ids))  # Temporal first, then the mirror
            mirrors = await self.store.invariants.mirror_facts(self.tenant, ids)
            for run_id, seen in zip(ids, histories, strict=True):
                mirror = mirrors.get(run_id)
                if mirror is None:  # deleted since it was listed
                    continue
                found[run_id] += mirror_problems(run_id, seen, mirror) + mirror.problems
                if seen is None and mirror.status in FINISHED:
                    report.without_history.append(run_id)
                elif not status_fits(mirror.status, None if seen is None else seen.status):
                    suspects.append(run_id)
            if self.progress is not None:
                self.progress(at + len(ids), len(heads))
        if suspects:
            await asyncio.sleep(self.settle_seconds)
            await asyncio.gather(*(self._status_again(i, found[i], gate) for i in suspects))
        report.runs = len(heads)
        report.violations = [Violation(run_id, what) for run_id, whats in found.items() for what in whats]
        report.without_history.sort()
        report.seconds = time.monotonic() - started
        return report

    async def _status_again(self, run_id: str, found: list[str], gate: asyncio.Semaphore) -> None:
        async with gate:
            row = await self.store.invariants.run_status(self.tenant, run_id)
            workflow, pending = await self.gateway.workflow_status(run_id)
        if row is None or status_fits(row, workflow, pending):
            return
        theirs = "Temporal has no workflow for it" if workflow is None else f"its workflow is {workflow} in Temporal"
        found.append(f"status {row} in Postgres, and {theirs}")
