"""A run that waits before it starts, Temporal's side: its row at once, its place on a thread, and
the wait for the run before it (workflows/starts.py orchestrates them).

`await_run` is a long activity: it waits for the previous run's workflow to close (through the
worker's Temporal client, following continue-as-new), heartbeating, so a worker that dies while it
waits is noticed within the heartbeat timeout and the wait goes on on another worker. How that run
ended does not matter; where it stopped does: the answer is the step the waiting run forks.
"""

from __future__ import annotations

import contextlib

from temporalio import activity
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from waypoint.activities.boundary import boundary, heartbeating
from waypoint.names import Activity
from waypoint.store import RunStore
from waypoint.types import AwaitRunInput, ForkPoint, HoldRunInput, JoinThreadInput


class StartActivities:
    def __init__(self, store: RunStore):
        self.store = store

    @activity.defn(name=Activity.HOLD_RUN)
    @boundary
    async def hold_run(self, inp: HoldRunInput) -> None:
        """Write the waiting run's row (scheduled or queued), once."""
        await self.store.starts.create_waiting_run(inp)

    @activity.defn(name=Activity.JOIN_THREAD)
    @boundary
    async def join_thread(self, inp: JoinThreadInput) -> str | None:
        """Take the thread's next place; the run before it there (None: the thread is empty).
        NotFound (non-retryable) when the thread is gone."""
        return await self.store.starts.join_thread(inp.tenant_id, inp.thread_id, inp.run_id)

    @activity.defn(name=Activity.AWAIT_RUN)
    @boundary
    async def await_run(self, inp: AwaitRunInput) -> ForkPoint:
        """Wait for `inp.after_run` to end, then answer where the waiting run goes on from."""
        await self.store.get_run(inp.tenant_id, inp.after_run)  # NotFound unless it is the tenant's
        async with heartbeating(inp.run_id, inp.after_run):
            handle = activity.client().get_workflow_handle(inp.after_run)
            # A run that failed, was cancelled or terminated has ended too; one Temporal no longer
            # knows (its history expired) ended long ago. Its row says where it stopped.
            with contextlib.suppress(WorkflowFailureError, RPCError):
                await handle.result(follow_runs=True)
        return await self.store.starts.fork_point_after(inp.tenant_id, inp.after_run)
