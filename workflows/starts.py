"""Runs that wait before they start: delayed (`RunInput.start_at`), enqueued (`after_run`: a thread's
next turn while its current run is live) and runs that join a thread when they start (`thread_id`:
a cron on a thread, started by Temporal).

Such a run has its row at once (`hold_run`: status `scheduled` or `queued`, no steps), then waits:
a durable timer until its start time, and the end of the run before it (`await_run`, a long
heartbeating activity). A cancel while it waits ends it `cancelled` without starting: `start_run` is
never called. An enqueued run then starts as a fork of the run before it, at its last step, with
its task as the new message: it goes on from that run's final state.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.errors import failure_message
    from waypoint.names import Activity, MemoryView, RunStatus
    from waypoint.types import AwaitRunInput, ForkOrigin, ForkPoint, HoldRunInput, JoinThreadInput, RunInput

# A worker that dies while a run waits for the run before it is noticed within this; the wait then
# goes on on another worker. An attempt that outlives its timeout just waits again.
AWAIT_HEARTBEAT = timedelta(seconds=30)
AWAIT_ATTEMPT = timedelta(hours=6)
AWAIT_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=["NotFound", "InvalidInput", "Conflict"],
)
FAILED = (ActivityError, ApplicationError, ActivityTimeout)


def waits_to_start(inp: RunInput) -> bool:
    """Whether the run waits before it starts (only such runs take the patched branch)."""
    return inp.resume is None and (inp.start_at is not None or inp.after_run is not None or inp.thread_id is not None)


class WaitToStart:
    _run_id: str
    _status: str
    _cancel_reason: str | None

    # Set as the run waits (class defaults: a run that never waits has neither): it has a waiting
    # row, which start_run turns into the running run; why it never started (final status, reason).
    _held = False
    _not_started: tuple[RunStatus, str] | None = None

    async def _wait_to_start(self, inp: RunInput) -> RunInput | None:
        """Hold the run's row, join its thread, wait for its time and its turn; the input it starts
        with (an enqueued run's fork), or None when it ends before it starts (`_not_started`)."""
        now = workflow.now().timestamp()
        delayed = inp.start_at is not None and inp.start_at > now
        waiting_for = inp.after_run
        await self._hold(inp, RunStatus.SCHEDULED if delayed else RunStatus.QUEUED)
        try:
            if inp.thread_id is not None:
                waiting_for = await self._join_thread(inp)
            if delayed and inp.start_at is not None:
                remaining = timedelta(seconds=inp.start_at - now)
                with contextlib.suppress(asyncio.TimeoutError):  # its time came
                    await workflow.wait_condition(lambda: self._cancel_reason is not None, timeout=remaining)
                if self._cancel_reason is not None:
                    return self._end_unstarted(RunStatus.CANCELLED, self._cancel_reason)
                if waiting_for is not None:
                    await self._hold(inp, RunStatus.QUEUED)
            if self._cancel_reason is not None:
                return self._end_unstarted(RunStatus.CANCELLED, self._cancel_reason)
            if waiting_for is None:
                return inp
            point = await self._await_run(inp, waiting_for)
        except asyncio.CancelledError:
            # Temporal asked the workflow to cancel while it waited: it ends without starting.
            return self._end_unstarted(RunStatus.CANCELLED, self._cancel_reason or "its workflow was cancelled")
        except FAILED as exc:
            return self._end_unstarted(RunStatus.FAILED, f"run {self._run_id} could not start: {failure_message(exc)}")
        if point is None:
            return self._end_unstarted(RunStatus.CANCELLED, self._cancel_reason or "cancelled while queued")
        if point.run_id is None:
            return inp
        fork = ForkOrigin(run_id=point.run_id, step=point.step, message=inp.task, memory=MemoryView.NOW)
        return replace(inp, fork=fork)

    def _end_unstarted(self, status: RunStatus, reason: str) -> RunInput | None:
        """No input to start with: the run ends here, with `status` and `reason`."""
        self._not_started = (status, reason)
        return None

    async def _hold(self, inp: RunInput, status: RunStatus) -> None:
        self._status = status
        self._held = True
        hold = HoldRunInput(
            run_id=self._run_id,
            tenant_id=inp.tenant_id,
            agent=inp.agent,
            task=inp.task,
            model=inp.model,
            status=status,
            start_at=inp.start_at,
            after_run=inp.after_run,
            parent=inp.parent,
            priority=inp.priority,
            schedule_id=inp.schedule_id,
            webhook=inp.webhook,  # an activity's input, not a command: no patch needed
        )
        await workflow.execute_local_activity(
            Activity.HOLD_RUN, hold, start_to_close_timeout=retry.STORE_TIMEOUT, retry_policy=retry.STORE_RETRY
        )

    async def _join_thread(self, inp: RunInput) -> str | None:
        assert inp.thread_id is not None
        joined: str | None = await workflow.execute_local_activity(
            Activity.JOIN_THREAD,
            JoinThreadInput(self._run_id, inp.tenant_id, inp.thread_id),
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )
        return joined

    async def _await_run(self, inp: RunInput, after_run: str) -> ForkPoint | None:
        """Wait for `after_run` to end: where this run goes on from, or None when it was cancelled first."""
        handle = workflow.start_activity(
            Activity.AWAIT_RUN,
            AwaitRunInput(self._run_id, inp.tenant_id, after_run),
            result_type=ForkPoint,
            start_to_close_timeout=AWAIT_ATTEMPT,
            heartbeat_timeout=AWAIT_HEARTBEAT,
            retry_policy=AWAIT_RETRY,
            cancellation_type=workflow.ActivityCancellationType.TRY_CANCEL,
        )
        try:
            await workflow.wait_condition(lambda: handle.done() or self._cancel_reason is not None)
        except asyncio.CancelledError:
            handle.cancel()
            raise
        if handle.done():
            return await handle
        handle.cancel()
        return None
