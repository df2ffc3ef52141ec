"""Replaying histories against workflow code (one run, or the deploy gate's sample of open and
finished executions) and making a worker deployment's version current."""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from temporalio.client import WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode

from waypoint.errors import NotFound
from waypoint.gateway.deploy import (
    FETCHES_AT_ONCE,
    BrokenReplay,
    DeployCheck,
    failed_event,
    replay_error,
    since_clause,
    visibility_query,
)
from waypoint.gateway.temporal._connect import GatewayBase, rpc_error

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


class Replays(GatewayBase):
    """Replay a run's executions or a deploy's sample of histories; switch a deployment's current version."""

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
