"""Starting and stopping workflows: runs, experiments, webhook deliveries, and the memory worker's
requests (each one a short workflow whose answer is awaited)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from temporalio.client import WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from waypoint import retry
from waypoint.errors import Conflict, Unavailable, WaypointError
from waypoint.evals.types import ExperimentInput
from waypoint.gateway.temporal._connect import GatewayBase, fair_share, rpc_error
from waypoint.names import Workflow, memory_task_queue
from waypoint.types import MemoryAnswer, MemoryRequest, RunInput, WebhookDeliveryInput


class Starts(GatewayBase):
    """Start Waypoint's own workflows, stop them, and ask the memory worker."""

    async def _start(self, workflow: str, arg: object, workflow_id: str, tenant_id: str, priority: int | None) -> None:
        """Start one of Waypoint's own workflows: a run, or an experiment (whose runs are its children)."""
        await self.client.start_workflow(
            workflow,
            arg,
            id=workflow_id,
            task_queue=self.settings.task_queue,
            # Lets a message reach a run before its row exists, with the tenant still checked.
            memo={"tenant_id": tenant_id},
            task_timeout=retry.WORKFLOW_TASK_TIMEOUT,
            # An id names one workflow, ever: not a second one once the first closed (Temporal's
            # default allows that), nor a second start while it runs.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            priority=fair_share(self.settings, tenant_id, priority),
        )

    async def start_run(self, run_id: str, inp: RunInput) -> None:
        try:
            await self._start(Workflow.AGENT_RUN, inp, run_id, inp.tenant_id, inp.priority)
        except WorkflowAlreadyStartedError:
            raise Conflict(f"run {run_id} already exists: choose another run id, or leave it out") from None
        except RPCError as exc:
            raise rpc_error(exc, f"start run {run_id}") from None

    async def start_experiment(self, inp: ExperimentInput, priority: int | None) -> None:
        """Start an experiment's workflow (its id the experiment's): its runs inherit its priority, so
        an experiment shares the fleet as a tenant's runs do."""
        try:
            await self._start(Workflow.EXPERIMENT, inp, inp.experiment_id, inp.tenant_id, priority)
        except WorkflowAlreadyStartedError:
            raise Conflict(f"experiment {inp.experiment_id} already exists") from None
        except RPCError as exc:
            raise rpc_error(exc, f"start experiment {inp.experiment_id}") from None

    async def start_delivery(self, inp: WebhookDeliveryInput) -> None:
        """Start a webhook delivery's workflow (a redelivery: a run's own starts from its workflow)."""
        try:
            await self._start(Workflow.WEBHOOK_DELIVERY, inp, inp.delivery_id, inp.tenant_id, None)
        except WorkflowAlreadyStartedError:
            raise Conflict(f"webhook delivery {inp.delivery_id} already exists") from None
        except RPCError as exc:
            raise rpc_error(exc, f"start webhook delivery {inp.delivery_id}") from None

    async def cancel_experiment(self, experiment_id: str) -> None:
        """Ask an experiment to stop: its runs in flight are cancelled, its row says `cancelled`."""
        try:
            await self.client.get_workflow_handle(experiment_id).cancel()
        except RPCError as exc:
            raise rpc_error(exc, f"cancel experiment {experiment_id}") from None

    async def terminate(self, run_id: str, reason: str) -> None:
        try:
            await self.client.get_workflow_handle(run_id).terminate(reason=reason)
        except RPCError as exc:
            raise rpc_error(exc, f"terminate run {run_id}") from None

    async def memory(self, req: MemoryRequest) -> MemoryAnswer:
        """Ask the memory worker, which owns the episodic store."""
        queue = memory_task_queue(self.settings.task_queue)
        try:
            answer: Any = await self.client.execute_workflow(
                Workflow.MEMORY_REQUEST,
                req,
                id=f"memory-{uuid.uuid4().hex[:12]}",
                task_queue=queue,
                result_type=MemoryAnswer,
                # No memory worker: say so instead of waiting forever.
                execution_timeout=timedelta(seconds=self.settings.memory_request_timeout_seconds),
            )
        except WorkflowFailureError as exc:
            if isinstance(exc.cause, TemporalTimeout):
                raise Unavailable(
                    f"no memory worker answered on task queue {queue}: start one with `waypoint worker` "
                    "(or `waypoint dev`)"
                ) from None
            cause = exc.cause
            while cause.__cause__ is not None:  # the activity's own error says what went wrong
                cause = cause.__cause__
            raise WaypointError(f"memory request failed: {getattr(cause, 'message', None) or cause}") from None
        except RPCError as exc:
            raise rpc_error(exc, "reach the memory worker") from None
        return answer  # type: ignore[no-any-return]
