"""The compaction Schedule on Temporal: apply it idempotently, describe it, run a pass now.

The Schedule starts CompactionWorkflow every `compaction_interval_seconds` with
the overlap policy SKIP (a pass still running makes the next one skip). Applying
it twice changes nothing: the settings it was built from are fingerprinted in
the Schedule's note, and an update happens only when they differ.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.service import RPCError, RPCStatusCode

from waypoint import retry
from waypoint.compaction_types import CompactionInput, CompactionReport
from waypoint.config import Settings
from waypoint.errors import NotFound, WaypointError
from waypoint.gateway.temporal import rpc_error
from waypoint.names import Workflow

NOTE_PREFIX = "waypoint compaction, config "


def compaction_input(settings: Settings, *, run_id: str | None = None, tenant_id: str | None = None) -> CompactionInput:
    return CompactionInput(
        threshold_tokens=settings.compaction_threshold_tokens,
        concurrency=settings.compaction_concurrency,
        max_runs=settings.compaction_max_runs,
        tenant_id=tenant_id,
        run_id=run_id,
        keep_steps=settings.compaction_keep_steps,
    )


def desired_schedule(settings: Settings) -> Schedule:
    inp = compaction_input(settings)
    config = {
        "input": asdict(inp),
        "every": settings.compaction_interval_seconds,
        "task_queue": settings.task_queue,
        "overlap": "skip",
    }
    fingerprint = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return Schedule(
        action=ScheduleActionStartWorkflow(
            Workflow.COMPACTION,
            inp,
            id=f"{settings.compaction_schedule_id}-pass",
            task_queue=settings.task_queue,
            task_timeout=retry.WORKFLOW_TASK_TIMEOUT,
        ),
        spec=ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=timedelta(seconds=settings.compaction_interval_seconds))]
        ),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
        state=ScheduleState(note=NOTE_PREFIX + fingerprint),
    )


async def apply_schedule(client: Client, settings: Settings) -> str:
    """Create the Schedule, or update it if its settings changed; "created", "updated" or "unchanged"."""
    schedule = desired_schedule(settings)
    try:
        await client.create_schedule(settings.compaction_schedule_id, schedule)
        return "created"
    except ScheduleAlreadyRunningError:
        pass
    handle = client.get_schedule_handle(settings.compaction_schedule_id)
    current = await handle.describe()
    if current.schedule.state.note == schedule.state.note:
        return "unchanged"

    def update(_: ScheduleUpdateInput) -> ScheduleUpdate:
        return ScheduleUpdate(schedule=schedule)

    await handle.update(update)
    return "updated"


@dataclass(frozen=True)
class PassOutcome:
    """One compaction pass the Schedule started, and what it did (when it completed)."""

    at: datetime
    workflow_id: str | None
    status: str
    selected: int | None = None
    compacted: int | None = None
    failed: list[str] = field(default_factory=list)
    tokens_before: int | None = None
    tokens_after: int | None = None
    episodes_saved: int | None = None
    memory_error: str | None = None


@dataclass(frozen=True)
class ScheduleInfo:
    id: str
    every_seconds: list[float]
    overlap: str
    paused: bool
    note: str
    workflow: str | None
    task_queue: str | None
    actions_taken: int
    skipped_overlaps: int
    next_runs: list[datetime]
    last_passes: list[PassOutcome]


async def describe_schedule(client: Client, settings: Settings, *, results: int = 5) -> ScheduleInfo:
    """The Schedule (interval, overlap policy, next runs) and the outcome of its last passes."""
    handle = client.get_schedule_handle(settings.compaction_schedule_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise NotFound(
                f"no compaction Schedule {settings.compaction_schedule_id!r}: "
                "create it with `waypoint compaction apply`"
            ) from None
        raise rpc_error(exc, "describe the compaction Schedule") from None
    sched = desc.schedule
    action = sched.action
    passes = []
    for recent in list(desc.info.recent_actions)[-results:][::-1]:
        started = recent.action
        workflow_id = getattr(started, "workflow_id", None)
        run_id = getattr(started, "first_execution_run_id", None)
        passes.append(await _outcome(client, recent.started_at, workflow_id, run_id))
    return ScheduleInfo(
        id=settings.compaction_schedule_id,
        every_seconds=[i.every.total_seconds() for i in sched.spec.intervals],
        overlap=sched.policy.overlap.name,
        paused=sched.state.paused,
        note=sched.state.note or "",
        workflow=getattr(action, "workflow", None),
        task_queue=getattr(action, "task_queue", None),
        actions_taken=desc.info.num_actions,
        skipped_overlaps=desc.info.num_actions_skipped_overlap,
        next_runs=list(desc.info.next_action_times[:3]),
        last_passes=passes,
    )


async def _outcome(client: Client, at: datetime, workflow_id: str | None, run_id: str | None) -> PassOutcome:
    if workflow_id is None:
        return PassOutcome(at, workflow_id, "unknown")
    handle = client.get_workflow_handle(workflow_id, run_id=run_id, result_type=CompactionReport)
    try:
        status = (await handle.describe()).status
    except RPCError:
        return PassOutcome(at, workflow_id, "unknown (history gone)")
    if status != WorkflowExecutionStatus.COMPLETED:
        return PassOutcome(at, workflow_id, status.name.lower() if status else "unknown")
    report = await handle.result()
    made = [r for r in report.results if r.created]
    return PassOutcome(
        at,
        workflow_id,
        "completed",
        selected=report.selected,
        compacted=len(made),
        failed=[f"{r.run_id}: {r.error}" for r in report.results if r.error],
        tokens_before=sum(r.tokens_before for r in made),
        tokens_after=sum(r.tokens_after for r in made),
        episodes_saved=report.episodes_saved,
        memory_error=report.memory_error,
    )


async def compact_now(
    client: Client, settings: Settings, *, run_id: str | None = None, tenant_id: str | None = None
) -> CompactionReport:
    """One compaction pass now, awaited: of `run_id` whatever its size, else of every run of the
    tenant past the threshold."""
    inp = compaction_input(settings, run_id=run_id, tenant_id=tenant_id or settings.tenant)
    try:
        report: CompactionReport = await client.execute_workflow(
            Workflow.COMPACTION,
            inp,
            id=f"compaction-{uuid.uuid4().hex[:12]}",
            task_queue=settings.task_queue,
            task_timeout=retry.WORKFLOW_TASK_TIMEOUT,
            result_type=CompactionReport,
        )
        return report
    except WorkflowFailureError as exc:
        cause: BaseException = exc
        while cause.__cause__ is not None:  # the innermost failure says what went wrong
            cause = cause.__cause__
        raise WaypointError(f"the compaction pass failed: {getattr(cause, 'message', None) or cause}") from None
