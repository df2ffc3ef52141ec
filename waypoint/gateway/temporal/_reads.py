"""What Temporal says about a run without asking its worker: its memo, its start input, its histories'
facts, its description (status, pending tasks and activities) and its task queue's pollers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from waypoint.gateway.temporal._connect import GatewayBase, rpc_error
from waypoint.names import Activity
from waypoint.types import RunInput

# How an execution's history ends, by its last event (none of these: it runs).
_CLOSED = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: "COMPLETED",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "FAILED",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "CANCELED",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "TERMINATED",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "TIMED_OUT",
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: "CONTINUED_AS_NEW",
}


@dataclass
class HistoryFacts:
    """What a run's Temporal histories (every execution of its continue-as-new chain) say it did:
    the steps whose model call completed and the (step, call index) of each tool call that completed,
    as remote activities (a local activity's marker does not hold its input), and how it ended."""

    status: str  # the newest execution's: RUNNING, COMPLETED, FAILED, CANCELED, TERMINATED or TIMED_OUT
    executions: int = 0
    model_steps: set[int] = field(default_factory=set)
    tool_calls: set[tuple[int, int]] = field(default_factory=set)


@dataclass(frozen=True)
class Blocked:
    """What keeps a run from moving: `what` (the same while the problem lasts, whatever the
    attempt) and `message`, one line with the fix."""

    what: str
    message: str


class Reads(GatewayBase):
    """Describe and history reads of a run, and who polls its task queue."""

    async def memo_tenant(self, run_id: str) -> str | None:
        """The tenant Temporal holds for a run (its memo), or None if Temporal knows no such run."""
        try:
            description = await self.client.get_workflow_handle(run_id).describe()
        except RPCError:
            return None
        tenant: str | None = await description.memo_value("tenant_id", None)
        return tenant

    async def start_input(self, run_id: str) -> RunInput | None:
        """The input the run's workflow started with (the first event of its history), decoded
        through the client's converter; None when Temporal knows no such run. Its newest execution's:
        before the run continues as new (long after its worker wrote its row), its first's."""
        try:
            async for event in self.client.get_workflow_handle(run_id).fetch_history_events(page_size=1):
                payloads = event.workflow_execution_started_event_attributes.input.payloads
                with self.readable(run_id):
                    found: RunInput = (await self.client.data_converter.decode(list(payloads), [RunInput]))[0]
                return found
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise rpc_error(exc, f"read the start of run {run_id}") from None
        return None

    async def history_facts(self, run_id: str) -> HistoryFacts | None:
        """The completed model and tool activities of every execution of the run, newest execution
        first, following each one's `continued_execution_run_id` back; None when Temporal has no such
        workflow (never started, or its retention passed). Inputs decode through the client's
        converter, so a run written through the payload codec reads with the same keys."""
        facts: HistoryFacts | None = None
        execution: str | None = None
        try:
            while True:
                handle = self.client.get_workflow_handle(run_id, run_id=execution)
                scheduled: dict[int, tuple[str, Any]] = {}
                done: list[int] = []
                first = last = None
                async for event in handle.fetch_history_events():
                    first = first or event
                    last = event
                    if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                        attrs = event.activity_task_scheduled_event_attributes
                        if attrs.activity_type.name in (Activity.CALL_MODEL, Activity.RUN_TOOL):
                            scheduled[event.event_id] = (attrs.activity_type.name, attrs.input.payloads)
                    elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                        done.append(event.activity_task_completed_event_attributes.scheduled_event_id)
                if first is None or last is None:
                    break
                if facts is None:
                    facts = HistoryFacts(_CLOSED.get(last.event_type, "RUNNING"))
                facts.executions += 1
                with self.readable(run_id):
                    for sid in done:
                        if sid not in scheduled:
                            continue
                        name, payloads = scheduled[sid]
                        arg = (await self.client.data_converter.decode(list(payloads)))[0]
                        if name == Activity.CALL_MODEL:
                            facts.model_steps.add(int(arg["step"]))
                        else:
                            facts.tool_calls.add((int(arg["step"]), int(arg["call_index"])))
                execution = first.workflow_execution_started_event_attributes.continued_execution_run_id or None
                if execution is None:
                    break
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return facts
            raise rpc_error(exc, f"read the history of run {run_id}") from None
        return facts

    async def workflow_status(self, run_id: str) -> tuple[str | None, list[str]]:
        """The status of the run's newest execution (None when Temporal has no such workflow) and the
        types of its activities in flight."""
        try:
            described = (await self.client.get_workflow_handle(run_id).describe()).raw_description
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None, []
            raise rpc_error(exc, f"describe run {run_id}") from None
        status = WorkflowExecutionStatus(described.workflow_execution_info.status).name
        return status, [a.activity_type.name for a in described.pending_activities]

    async def ended_without_row(self, run_id: str) -> str | None:
        """Why a run that has no row in Postgres is over already (it could not start), or None while
        it may still write one."""
        handle = self.client.get_workflow_handle(run_id)
        try:
            if (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                return None
            await handle.result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            return getattr(cause, "message", None) or str(cause)
        except RPCError as exc:
            return str(rpc_error(exc, f"describe run {run_id}"))
        return f"run {run_id} ended without a record in Postgres: check the worker's database settings"

    async def stuck(self, run_id: str) -> str | None:
        """Why the run cannot make progress when its workflow task keeps failing (a worker that
        cannot replay or decode it, a bug in workflow code), with the last failure; else None. One
        describe call, and a read of recent history only when a task has failed."""
        try:
            described = (await self.client.get_workflow_handle(run_id).describe()).raw_description
        except RPCError:
            return None
        task = described.pending_workflow_task
        if described.workflow_execution_info.status != WorkflowExecutionStatus.RUNNING.value or task.attempt < 2:
            return None
        failure = await self._last_task_failure(run_id)
        if failure is None:  # timed out, not failed: a worker lost mid-task, another takes it
            return None
        return f"its workflow task failed {task.attempt - 1} time(s) in a row: {failure}"

    async def blocked(self, run_id: str) -> Blocked | None:
        """What keeps a run from moving, in one line with the fix, or None when nothing is wrong that
        Temporal can see: no worker polls its queue, its workflow tasks keep failing (a worker that
        cannot decode its payloads, say), or an activity keeps failing. `what` names the problem
        apart from its attempt count, so a caller can say it once while it lasts."""
        if await self.pollers(self.settings.task_queue) == 0:
            return Blocked(
                "no worker",
                f"no worker polls task queue {self.settings.task_queue!r}: start one with `waypoint worker` "
                "(or `waypoint dev`) with the same WAYPOINT_TASK_QUEUE",
            )
        try:
            described = (await self.client.get_workflow_handle(run_id).describe()).raw_description
        except RPCError:
            return None
        task = described.pending_workflow_task
        if task.attempt > 1:
            why = await self._last_task_failure(run_id) or "no failure recorded yet"
            return Blocked(
                "workflow task",
                f"the workflow tasks of run {run_id} keep failing (attempt {task.attempt}): {why}. A worker whose "
                "WAYPOINT_CODEC_KEYS differ cannot decode the run: give every worker and client the same keys",
            )
        for pending in described.pending_activities:
            if pending.attempt > 2 and pending.last_failure.message:
                return Blocked(
                    f"activity {pending.activity_type.name}",
                    f"{pending.activity_type.name} of run {run_id} is on attempt {pending.attempt}: "
                    f"{pending.last_failure.message}",
                )
        return None

    async def _last_task_failure(self, run_id: str) -> str | None:
        """The message of the run's newest workflow task failure, or None when its newest workflow
        task problem was a timeout (or there is none)."""
        request = GetWorkflowExecutionHistoryReverseRequest(
            namespace=self.client.namespace, execution=WorkflowExecution(workflow_id=run_id), maximum_page_size=50
        )
        try:
            response = await self.client.workflow_service.get_workflow_execution_history_reverse(request)
        except RPCError:
            return None
        for event in response.history.events:
            if event.HasField("workflow_task_failed_event_attributes"):
                return event.workflow_task_failed_event_attributes.failure.message or "no message"
            if event.HasField("workflow_task_timed_out_event_attributes"):
                return None
        return None

    async def pollers(self, task_queue: str) -> int:
        """How many workers poll the queue for workflow tasks now."""
        response = await self.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=self.client.namespace,
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return len(response.pollers)
