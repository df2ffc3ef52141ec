"""Everything the client asks of Temporal, with Temporal's failures mapped by type to Waypoint errors.

Imported only when a command needs Temporal (the `temporalio` client takes a noticeable part
of a second to import), so listing runs from Postgres never pays for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHistory,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import Priority, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from waypoint import retry, telemetry
from waypoint.codec import data_converter, header_codec_behavior
from waypoint.config import Settings
from waypoint.errors import ConfigError, Conflict, InvalidInput, NotFound, Unavailable, WaypointError
from waypoint.evals.types import ExperimentInput
from waypoint.gateway.deploy import (
    FETCHES_AT_ONCE,
    BrokenReplay,
    DeployCheck,
    failed_event,
    replay_error,
    since_clause,
    visibility_query,
)
from waypoint.names import Activity, Query, Workflow, memory_task_queue
from waypoint.types import MemoryAnswer, MemoryRequest, RunInput, RunProgress, RunResult, WebhookDeliveryInput

if TYPE_CHECKING:
    from temporalio.runtime import Runtime
    from temporalio.worker import Replayer


def failure_text(failure: BaseException) -> str:
    return f"{type(failure).__name__}: {replay_error(str(failure))}"


@functools.cache
def quiet_runtime() -> Runtime:
    """A Temporal runtime that keeps the SDK core's own log lines to itself: by default it prints a
    WARN line for every workflow task it fails, on stdout, and a failed replay is one; the replay's
    outcome says the same, once, where `--json` expects it."""
    from temporalio.runtime import Runtime, TelemetryConfig

    return Runtime(telemetry=TelemetryConfig(logging=None))


def workflow_name(cls: type) -> str:
    """The workflow type a `@workflow.defn` class registers as."""
    from temporalio.workflow import _Definition

    return _Definition.must_from_class(cls).name or cls.__name__


def rpc_error(exc: RPCError, doing: str) -> WaypointError:
    """The one mapping of a Temporal RPC failure, by its status code."""
    message = f"Temporal refused to {doing}: {exc.message}"
    if exc.status == RPCStatusCode.NOT_FOUND:
        return NotFound(message)
    if exc.status in (RPCStatusCode.ALREADY_EXISTS, RPCStatusCode.FAILED_PRECONDITION):
        return Conflict(message)
    if exc.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidInput(message)
    return Unavailable(f"{message} (is Temporal at the configured address healthy?)")


def fair_share(settings: Settings, tenant_id: str, priority: int | None) -> Priority:
    """What a started workflow carries: busy workers take higher-priority tasks first, then share each
    priority between tenants by weight. Temporal gives its activities and child workflows the same."""
    return Priority(
        priority_key=priority or None,
        fairness_key=tenant_id,
        fairness_weight=settings.limits.weight(tenant_id),
    )


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), 0.5):
            return True
    except (OSError, ValueError):
        return False


async def connect(settings: Settings, *, wait_seconds: float = 15.0) -> Client:
    """A client of the configured Temporal. A server that accepts connections but is not ready yet
    (a dev server starting) is waited for, up to `wait_seconds`; one that refuses them fails at once."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return await Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                # Workers built from this client use its converter too: with codec keys, both sides encrypt.
                data_converter=data_converter(settings),
                header_codec_behavior=header_codec_behavior(settings),
                # One trace per run from here on (worker spans join it); Temporal SDK metrics if asked for.
                interceptors=telemetry.client_interceptors(settings),
                runtime=telemetry.temporal_runtime(settings),
            )
        except RuntimeError as exc:  # the SDK's bridge reports every connect failure so
            if time.monotonic() < deadline and _listening(settings.temporal_address):
                await asyncio.sleep(0.25)
                continue
            raise Unavailable(
                f"cannot reach Temporal at {settings.temporal_address} ({str(exc).splitlines()[0]}): "
                "start it with `waypoint dev` or set WAYPOINT_TEMPORAL_ADDRESS"
            ) from None


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


class TemporalGateway:
    """The client's Temporal calls: start, message, query and replay runs; reach the memory worker."""

    def __init__(self, client: Client, settings: Settings):
        self.client = client
        self.settings = settings

    @contextlib.contextmanager
    def readable(self, run_id: str) -> Iterator[None]:
        """A payload this client cannot decode (the SDK's converter raises KeyError for an unknown
        encoding): without codec keys, an encrypted run's answers are unreadable."""
        try:
            yield
        except KeyError:
            if self.client.data_converter.payload_codec is not None:
                raise
            raise ConfigError(
                f"run {run_id}'s payloads are encrypted and this client has no keys: set WAYPOINT_CODEC_KEYS "
                "to the keys the workers use"
            ) from None

    @property
    def traced(self) -> bool:
        """Whether this client propagates traces to the workers (then a start opens the run's trace)."""
        from temporalio.contrib.opentelemetry import TracingInterceptor

        return any(isinstance(i, TracingInterceptor) for i in self.client.config().get("interceptors", []))

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

    async def terminate(self, run_id: str, reason: str) -> None:
        try:
            await self.client.get_workflow_handle(run_id).terminate(reason=reason)
        except RPCError as exc:
            raise rpc_error(exc, f"terminate run {run_id}") from None

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

    def replayer(self, workflows: Sequence[type], *, full_sandbox: bool = True) -> Replayer:
        """A replayer of `workflows` with the client's converter: histories written through the payload
        codec replay through it. `full_sandbox=False` passes Waypoint's own modules through the workflow
        sandbox instead of importing them afresh for each history: about 23 ms a history instead of
        about 165 ms on 2 cores. The command sequence is checked all the same; what it gives up is the
        sandbox's refusal of restricted calls (a clock, IO) inside Waypoint's modules, which the
        recorded-history replay tests and the workers themselves still apply."""
        from temporalio.worker import Replayer
        from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

        # Passed through, the workflow modules are imported once, outside the sandbox, like their imports.
        passthrough = SandboxRestrictions.default.with_passthrough_modules("waypoint")
        return Replayer(
            workflows=list(workflows),
            data_converter=self.client.data_converter,
            header_codec_behavior=self.client.config()["header_codec_behavior"],
            runtime=quiet_runtime(),
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default if full_sandbox else passthrough
            ),
        )

    async def replay(self, run_id: str, workflows: Sequence[type]) -> list[tuple[str, str | None]]:
        """Replay every execution of the run against `workflows`: (execution id, determinism error or None)."""
        replayer = self.replayer(workflows)
        outcomes: list[tuple[str, str | None]] = []
        try:
            async for execution in self.client.list_workflows(f"WorkflowId = '{run_id}'"):
                history = await self.client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
                result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
                failure = result.replay_failure
                outcomes.append((execution.run_id, None if failure is None else failure_text(failure)))
        except RPCError as exc:
            raise rpc_error(exc, f"read the history of run {run_id}") from None
        if not outcomes:
            raise NotFound(f"Temporal has no history for run {run_id} (its retention may have passed)")
        return outcomes

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

    async def check_deploy(
        self,
        workflows: Sequence[type],
        task_queues: Sequence[str],
        *,
        finished: int,
        since: datetime | None = None,
        full_sandbox: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> DeployCheck:
        """Replay the histories of the open executions of `workflows` on `task_queues` and of the last
        `finished` closed ones (closed at or after `since`) against `workflows` (`full_sandbox`: see
        `replayer`). Histories are fetched
        FETCHES_AT_ONCE at a time and replayed as they arrive; `progress(replayed, listed)` is called
        after each replay."""
        began = time.monotonic()
        types = sorted({workflow_name(w) for w in workflows})
        queues = list(dict.fromkeys(task_queues))
        listed: list[tuple[str, str, str, bool]] = []  # (workflow id, execution, type, open), in order
        arrived: asyncio.Queue[tuple[int, WorkflowHistory] | None] = asyncio.Queue()
        gate = asyncio.Semaphore(FETCHES_AT_ONCE)

        async def fetch(index: int) -> None:
            workflow_id, execution, _, _ = listed[index]
            async with gate:
                try:
                    history = await self.client.get_workflow_handle(workflow_id, run_id=execution).fetch_history()
                except RPCError as exc:
                    if exc.status == RPCStatusCode.NOT_FOUND:  # its retention passed since the listing
                        return
                    raise
            await arrived.put((index, history))

        async def produce() -> None:
            try:
                async with asyncio.TaskGroup() as fetches:
                    for running, limit in ((True, None), (False, finished)):
                        if limit == 0:
                            continue
                        query = visibility_query(types, queues, running=running)
                        if not running:
                            query += since_clause(since)
                        async for execution in self.client.list_workflows(query, limit=limit, page_size=1000):
                            listed.append((execution.id, execution.run_id, execution.workflow_type, running))
                            fetches.create_task(fetch(len(listed) - 1))
            finally:
                await arrived.put(None)

        async def histories() -> AsyncIterator[WorkflowHistory]:
            while (item := await arrived.get()) is not None:
                index, history = item
                order[id(history)] = index
                yield history

        order: dict[int, int] = {}
        broken: list[tuple[int, BrokenReplay]] = []
        counts = {True: 0, False: 0}
        producer = asyncio.ensure_future(produce())
        try:
            async with self.replayer(workflows, full_sandbox=full_sandbox).workflow_replay_iterator(
                histories()
            ) as results:
                async for result in results:
                    index = order.pop(id(result.history))
                    workflow_id, execution, workflow_type, running = listed[index]
                    counts[running] += 1
                    if result.replay_failure is not None:
                        error = failure_text(result.replay_failure)
                        event = failed_event(error, result.history.events)
                        broken.append(
                            (index, BrokenReplay(workflow_id, execution, workflow_type, running, event, error))
                        )
                    if progress is not None:
                        progress(counts[True] + counts[False], len(listed))
            await producer  # a failed listing or fetch raises here
        except* RPCError as group:
            raise rpc_error(group.exceptions[0], "list or fetch the histories to replay") from None  # type: ignore[arg-type]
        finally:
            producer.cancel()
        return DeployCheck(
            open=counts[True],
            finished=counts[False],
            seconds=time.monotonic() - began,
            workflow_types=types,
            task_queues=queues,
            broken=[b for _, b in sorted(broken, key=lambda pair: pair[0])],
        )

    async def set_current_version(self, deployment: str, build_id: str) -> str | None:
        """Make `deployment`'s version `build_id` current: new runs, and with AUTO_UPGRADE the next
        workflow task of every open run, go to its workers. Returns the version it replaced (None:
        unversioned workers had the runs). Refused while no worker of that version has polled."""
        from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest

        try:
            response = await self.client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=self.client.namespace,
                    deployment_name=deployment,
                    build_id=build_id,
                    identity=f"waypoint-cli@{socket.gethostname()}",
                )
            )
        except RPCError as exc:
            if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                raise NotFound(
                    f"Temporal has no version {build_id!r} of deployment {deployment!r} ({exc.message}): start a "
                    f"worker with `waypoint worker --deployment {deployment} --build-id {build_id}` first"
                ) from None
            raise rpc_error(exc, f"make {deployment}.{build_id} current") from None
        previous = response.previous_deployment_version
        return previous.build_id if previous.deployment_name else None

    async def deployment_versions(self, deployment: str) -> tuple[str | None, list[str]]:
        """The current build id of `deployment` (None: none yet) and the build ids of its versions."""
        from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest

        try:
            info = (
                await self.client.workflow_service.describe_worker_deployment(
                    DescribeWorkerDeploymentRequest(namespace=self.client.namespace, deployment_name=deployment)
                )
            ).worker_deployment_info
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise NotFound(
                    f"Temporal has no deployment {deployment!r}: start a worker with "
                    f"`waypoint worker --deployment {deployment}`"
                ) from None
            raise rpc_error(exc, f"describe deployment {deployment}") from None
        current = info.routing_config.current_deployment_version
        versions = [v.deployment_version.build_id for v in info.version_summaries]
        return (current.build_id or None), versions

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
