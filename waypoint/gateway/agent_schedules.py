"""Scheduled agents on Temporal Schedules: build one from a schedule's row, and create, describe,
pause, resume, trigger, update and delete it, with Temporal's failures mapped to Waypoint errors.

Each fire starts the AgentRun workflow exactly as `TemporalGateway.start_run` does (same task
queue, memo, task timeout and Priority), with the schedule's id as the workflow id: Temporal
appends the fire time, so a fired run's id is `<schedule_id>-<time>`, and the run's input
carries `schedule_id`, which its START_RUN activity writes to `runs.schedule_id`.

Imported only when a schedule is used (the temporalio client is slow to import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.service import RPCError, RPCStatusCode

from waypoint import retry
from waypoint.config import Settings
from waypoint.errors import Conflict
from waypoint.gateway.temporal import fair_share, rpc_error
from waypoint.names import ScheduleOverlap, Workflow
from waypoint.store.schedules import ScheduleRow, schedule_not_found
from waypoint.types import Budget, RunInput

OVERLAP = {
    ScheduleOverlap.SKIP: ScheduleOverlapPolicy.SKIP,
    ScheduleOverlap.BUFFER_ONE: ScheduleOverlapPolicy.BUFFER_ONE,
    ScheduleOverlap.ALLOW_ALL: ScheduleOverlapPolicy.ALLOW_ALL,
    ScheduleOverlap.CANCEL_OTHER: ScheduleOverlapPolicy.CANCEL_OTHER,
}
NEXT_RUNS = 5  # fire times a description lists


def run_input(row: ScheduleRow, settings: Settings) -> RunInput:
    """What each fire starts: the run `start_run` would start for this agent and task."""
    spec = row.spec
    model = spec.get("model") or settings.model
    return RunInput(
        agent=row.agent,
        task=row.task,
        tenant_id=row.tenant_id,
        model=model,
        budget=Budget(max_steps=spec.get("max_steps")),
        pin_model=bool(model),
        priority=spec.get("priority"),
        schedule_id=row.schedule_id,
        webhook=spec.get("webhook"),
        thread_id=row.thread_id,
    )


def build(row: ScheduleRow, settings: Settings, *, paused: bool = False, note: str | None = None) -> Schedule:
    spec = row.spec
    inp = run_input(row, settings)
    end_at = spec.get("end_at")
    return Schedule(
        action=ScheduleActionStartWorkflow(
            Workflow.AGENT_RUN,
            inp,
            id=row.schedule_id,
            task_queue=settings.task_queue,
            memo={"tenant_id": row.tenant_id},
            task_timeout=retry.WORKFLOW_TASK_TIMEOUT,
            priority=fair_share(settings, row.tenant_id, inp.priority),
        ),
        spec=ScheduleSpec(
            intervals=[ScheduleIntervalSpec(every=timedelta(seconds=spec["every"]))] if spec.get("every") else [],
            cron_expressions=[spec["cron"]] if spec.get("cron") else [],
            time_zone_name=spec.get("tz") or None,
            end_at=datetime.fromisoformat(end_at) if end_at else None,
            jitter=timedelta(seconds=spec["jitter"]) if spec.get("jitter") else None,
        ),
        policy=SchedulePolicy(
            overlap=OVERLAP[ScheduleOverlap(spec.get("overlap", ScheduleOverlap.SKIP))],
            catchup_window=timedelta(seconds=spec["catchup"]),
        ),
        state=ScheduleState(paused=paused, note=note),
    )


@dataclass(frozen=True)
class Live:
    """What Temporal says of a schedule now."""

    paused: bool
    note: str | None
    next_runs: list[datetime] = field(default_factory=list)


class ScheduleGateway:
    def __init__(self, client: Client, settings: Settings):
        self.client = client
        self.settings = settings

    def _failed(self, exc: RPCError, schedule_id: str, doing: str) -> Exception:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return schedule_not_found(schedule_id)
        return rpc_error(exc, f"{doing} schedule {schedule_id}")

    async def create(self, row: ScheduleRow, *, paused: bool) -> None:
        try:
            await self.client.create_schedule(
                row.schedule_id,
                build(row, self.settings, paused=paused, note="created paused" if paused else None),
                memo={"tenant_id": row.tenant_id},
            )
        except ScheduleAlreadyRunningError:  # a Schedule not made through Waypoint (the compaction one)
            raise Conflict(f"Temporal has a schedule {row.schedule_id!r} already: pick another id") from None
        except RPCError as exc:
            raise self._failed(exc, row.schedule_id, "create") from None

    async def describe(self, schedule_id: str) -> ScheduleDescription:
        try:
            return await self.client.get_schedule_handle(schedule_id).describe()
        except RPCError as exc:
            raise self._failed(exc, schedule_id, "describe") from None

    async def live(self, schedule_id: str) -> Live:
        desc = await self.describe(schedule_id)
        state = desc.schedule.state
        return Live(state.paused, state.note or None, list(desc.info.next_action_times[:NEXT_RUNS]))

    async def pause(self, schedule_id: str, note: str | None) -> None:
        try:
            await self.client.get_schedule_handle(schedule_id).pause(note=note or "paused")
        except RPCError as exc:
            raise self._failed(exc, schedule_id, "pause") from None

    async def resume(self, schedule_id: str, note: str | None) -> None:
        try:
            await self.client.get_schedule_handle(schedule_id).unpause(note=note or "resumed")
        except RPCError as exc:
            raise self._failed(exc, schedule_id, "resume") from None

    async def trigger(self, row: ScheduleRow) -> None:
        overlap = OVERLAP[ScheduleOverlap(row.spec.get("overlap", ScheduleOverlap.SKIP))]
        try:
            await self.client.get_schedule_handle(row.schedule_id).trigger(overlap=overlap)
        except RPCError as exc:
            raise self._failed(exc, row.schedule_id, "trigger") from None

    async def update(self, row: ScheduleRow) -> None:
        """Replace the schedule's spec, policy and action; its state (paused, note) stays."""

        def change(current: ScheduleUpdateInput) -> ScheduleUpdate:
            state = current.description.schedule.state
            return ScheduleUpdate(schedule=build(row, self.settings, paused=state.paused, note=state.note))

        updater: Callable[[ScheduleUpdateInput], Any] = change
        try:
            await self.client.get_schedule_handle(row.schedule_id).update(updater)
        except RPCError as exc:
            raise self._failed(exc, row.schedule_id, "update") from None

    async def delete(self, schedule_id: str) -> None:
        """Delete the Schedule; one Temporal has no more is gone already."""
        try:
            await self.client.get_schedule_handle(schedule_id).delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise rpc_error(exc, f"delete schedule {schedule_id}") from None
