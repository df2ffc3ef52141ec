"""Messages to a run's worker: the progress query, updates (signals with an answer), and its result."""

from __future__ import annotations

import asyncio

from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from waypoint import retry
from waypoint.errors import Conflict, NotFound, Unavailable
from waypoint.gateway.temporal._connect import rpc_error
from waypoint.gateway.temporal._reads import Reads
from waypoint.names import Query
from waypoint.types import RunProgress, RunResult


class Messages(Reads):
    """Query, update and await a run; a message a run cannot take says why from what Temporal reads."""

    async def progress(self, run_id: str) -> RunProgress:
        """The run's live state, which its worker answers. With no worker polling, Temporal holds a
        query about half a minute before it says so: this waits retry.ACTION_WAIT at most, so a page
        or a `show` answers from Postgres instead of hanging."""
        wait = retry.ACTION_WAIT
        try:
            with self.readable(run_id):
                progress: RunProgress = await self.client.get_workflow_handle(run_id).query(
                    Query.PROGRESS, result_type=RunProgress, rpc_timeout=wait
                )
        except RPCError as exc:
            if exc.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise Unavailable(
                    f"run {run_id} answered no query within {wait.total_seconds():g} s: "
                    "is a worker polling its task queue? (`waypoint worker`)"
                ) from None
            raise NotFound(f"run {run_id} is not reachable in Temporal: {exc.message}") from None
        return progress

    async def update(self, run_id: str, name: str, arg: object) -> RunProgress:
        """Deliver a message and return the run's answer. A run that cannot take it within
        retry.ACTION_WAIT (its workflow tasks fail, no worker polls) answers with what is wrong."""
        handle = self.client.get_workflow_handle(run_id)
        bound = asyncio.timeout(retry.ACTION_WAIT.total_seconds())
        try:
            with self.readable(run_id):
                async with bound:
                    progress: RunProgress = await handle.execute_update(name, arg, result_type=RunProgress)
        except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):  # the SDK turns the cancel into its own
            if not bound.expired():
                raise
            why = await self.blocked(run_id) or "its worker is busy or restarting"
            raise Unavailable(
                f"run {run_id} did not take {name} within {retry.ACTION_WAIT.total_seconds():g} s: {why}. The message "
                "stays queued and applies if the run moves again"
            ) from None
        except WorkflowUpdateFailedError as exc:  # the run's validator refused it, with the reason
            cause = exc.cause
            raise Conflict(getattr(cause, "message", None) or str(cause)) from None
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise Conflict(f"run {run_id} has ended: it takes no more messages") from None
            raise rpc_error(exc, f"deliver {name} to run {run_id}") from None
        return progress

    async def result(self, run_id: str) -> RunResult | None:
        """The run's result when it ends; None when it failed (its row then says why)."""
        handle = self.client.get_workflow_handle(run_id, result_type=RunResult)
        try:
            with self.readable(run_id):
                return await handle.result()
        except WorkflowFailureError:
            return None
        except RPCError as exc:
            raise rpc_error(exc, f"wait for run {run_id}") from None
