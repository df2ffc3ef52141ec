"""The Python API: start runs on Temporal, read them from Postgres.

async with await Waypoint.connect(Settings()) as wp:
    run_id = await wp.start_run("Summarize the notes", agent="demo")
    result = await wp.result(run_id)
    for line in await wp.timeline(run_id):
        print(line.step, line.action, line.tools)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer

from waypoint import retry, telemetry
from waypoint.codec import data_converter, header_codec_behavior
from waypoint.compaction_types import CompactionReport
from waypoint.config import Settings
from waypoint.embedded import running_stack
from waypoint.errors import ConfigError, NotFound, WaypointError
from waypoint.store import integrity, reads, travel
from waypoint.store.db import engine_for
from waypoint.types import Budget, Decision, ForkOrigin, MemoryRequest, RunInput, RunProgress, RunResult
from workflows.agent_run import AgentRunWorkflow


def database_url(settings: Settings) -> str:
    """The configured database, else the one of the embedded stack running in the state folder."""
    if settings.database_url:
        return settings.database_url
    stack = running_stack(Path(settings.state_dir))
    if stack is None or not stack.database_url:
        raise ConfigError(
            f"no database: start the embedded stack with `waypoint dev` (state folder {settings.state_dir}) "
            "or set WAYPOINT_DATABASE_URL"
        )
    return stack.database_url


async def connect_temporal(settings: Settings, *, wait_seconds: float = 15.0) -> Client:
    """A client of the configured Temporal. A server that is still starting ("Frontend is not
    healthy yet") is waited for, up to `wait_seconds`."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return await _connect_once(settings)
        except ConfigError as exc:
            if "not healthy" not in str(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.25)


async def _connect_once(settings: Settings) -> Client:
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
    except RuntimeError as exc:
        raise ConfigError(
            f"cannot reach Temporal at {settings.temporal_address} ({str(exc).splitlines()[0]}): "
            "start it with `waypoint dev` or set WAYPOINT_TEMPORAL_ADDRESS"
        ) from None


class Waypoint:
    def __init__(self, client: Client | None, engine: AsyncEngine, settings: Settings):
        self._client = client
        self.engine = engine
        self.settings = settings
        self._trace_ids: dict[str, str] = {}

    @classmethod
    async def connect(cls, settings: Settings, *, temporal: bool = True) -> Waypoint:
        """Connect to Postgres and, unless `temporal=False` (read-only use), to Temporal."""
        engine = engine_for(settings, database_url(settings))
        try:
            client = await connect_temporal(settings) if temporal else None
        except BaseException:
            await engine.dispose()
            raise
        return cls(client, engine, settings)

    async def __aenter__(self) -> Waypoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.engine.dispose()

    async def connect_temporal(self) -> Client:
        """Connect to Temporal now if this Waypoint was opened read-only."""
        if self._client is None:
            self._client = await connect_temporal(self.settings)
        return self._client

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ConfigError("this Waypoint was connected without Temporal")
        return self._client

    async def start_run(
        self,
        task: str,
        *,
        agent: str = "demo",
        tenant_id: str | None = None,
        model: str | None = None,
        max_steps: int | None = None,
        budget: Budget | None = None,
    ) -> str:
        """Start a run and return its id (the Temporal workflow id)."""
        if not task.strip():
            raise ConfigError("the task is empty: say what the agent should do")
        budget = budget or Budget()
        if max_steps is not None:
            budget = Budget(**{**budget.__dict__, "max_steps": max_steps})
        for name, value in budget.__dict__.items():
            if value is not None and value <= 0:
                raise ConfigError(f"{name.replace('_', ' ')} must be positive, got {value}")
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        inp = RunInput(
            agent=agent,
            task=task,
            tenant_id=tenant_id or self.settings.tenant,
            model=model or self.settings.model,
            budget=budget,
        )
        try:
            with self._traced_start(run_id, inp):
                await self.client.start_workflow(
                    AgentRunWorkflow.run,
                    inp,
                    id=run_id,
                    task_queue=self.settings.task_queue,
                    # Lets a message reach a run before its row exists, with the tenant still checked.
                    memo={"tenant_id": inp.tenant_id},
                    task_timeout=retry.WORKFLOW_TASK_TIMEOUT,
                )
        except RPCError as exc:
            raise ConfigError(f"Temporal refused the run: {exc}") from None
        return run_id

    @contextlib.contextmanager
    def _traced_start(self, run_id: str, inp: RunInput) -> Iterator[None]:
        """The root span of the run's trace, when this client propagates traces to the worker."""
        if not any(isinstance(i, TracingInterceptor) for i in self.client.config().get("interceptors", [])):
            yield
            return
        with telemetry.span("start_run", run_id=run_id, tenant=inp.tenant_id, agent=inp.agent) as root:
            self._trace_ids[run_id] = telemetry.trace_id(root) or ""
            yield

    async def trace_id(self, run_id: str, *, tenant_id: str | None = None) -> str | None:
        """The run's trace id: known at start when this client traced it, else stored on the run row."""
        await self._check_tenant(run_id, tenant_id)
        if self._trace_ids.get(run_id):
            return self._trace_ids[run_id]
        return (await self.run(run_id, tenant_id=tenant_id)).get("trace_id")

    async def _check_tenant(self, run_id: str, tenant_id: str | None) -> None:
        """Another tenant's run is "not found". A run so new that its row is not written yet
        is checked against the tenant Temporal holds for it."""
        try:
            await self.run(run_id, tenant_id=tenant_id)
            return
        except NotFound:
            if self._client is None:  # read-only: the database is the only witness
                raise
            try:
                memo_tenant = await (await self.client.get_workflow_handle(run_id).describe()).memo_value(
                    "tenant_id", None
                )
            except RPCError:
                memo_tenant = None
            if memo_tenant is None or memo_tenant != (tenant_id or self.settings.tenant):
                raise

    async def progress(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """The live state of a running run: step, status, pending approvals."""
        await self._check_tenant(run_id, tenant_id)
        try:
            return await self.client.get_workflow_handle(run_id).query(AgentRunWorkflow.progress)
        except RPCError as exc:
            raise NotFound(f"run {run_id} is not reachable in Temporal: {exc.message}") from None

    async def _update(self, run_id: str, name: str, arg: object, tenant_id: str | None) -> RunProgress:
        await self._check_tenant(run_id, tenant_id)
        handle = self.client.get_workflow_handle(run_id)
        try:
            return await handle.execute_update(name, arg, result_type=RunProgress)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            raise WaypointError(getattr(cause, "message", None) or str(cause)) from None
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise WaypointError(f"run {run_id} has ended: it takes no more messages") from None
            raise WaypointError(f"Temporal refused the message: {exc.message}") from None

    async def pause(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """Pause before the next step (the current one finishes)."""
        return await self._update(run_id, "pause", None, tenant_id)

    async def resume(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        return await self._update(run_id, "resume", None, tenant_id)

    async def cancel(self, run_id: str, reason: str | None = None, *, tenant_id: str | None = None) -> RunProgress:
        """End the run after its current step, with status `cancelled` and a final checkpoint."""
        return await self._update(run_id, "cancel", reason, tenant_id)

    async def send(self, run_id: str, text: str, *, tenant_id: str | None = None) -> RunProgress:
        """Add a user message, read by the run's next model call."""
        return await self._update(run_id, "send", text, tenant_id)

    async def approve(
        self, run_id: str, call_id: str | None = None, reason: str | None = None, *, tenant_id: str | None = None
    ) -> RunProgress:
        """Let a tool call that waits for approval run."""
        return await self._update(run_id, "approve", Decision(call_id=call_id, reason=reason), tenant_id)

    async def deny(
        self, run_id: str, call_id: str | None = None, reason: str | None = None, *, tenant_id: str | None = None
    ) -> RunProgress:
        """Refuse a waiting tool call; the model is told, with the reason."""
        return await self._update(run_id, "deny", Decision(call_id=call_id, reason=reason), tenant_id)

    async def result(self, run_id: str, *, tenant_id: str | None = None) -> RunResult:
        """Wait for a run to end. A failed run returns its result with status `failed` and the error."""
        await self._check_tenant(run_id, tenant_id)
        handle = self.client.get_workflow_handle(run_id, result_type=RunResult)
        try:
            return await handle.result()
        except WorkflowFailureError:
            row = await reads.get_run(self.engine, tenant_id or self.settings.tenant, run_id)
            return reads.run_result(row)

    async def runs(self, *, tenant_id: str | None = None, limit: int = 20, status: str | None = None) -> list[dict]:
        return await reads.list_runs(self.engine, tenant_id or self.settings.tenant, limit=limit, status=status)

    async def run(self, run_id: str, *, tenant_id: str | None = None) -> dict:
        return await reads.get_run(self.engine, tenant_id or self.settings.tenant, run_id)

    async def fork(
        self,
        run_id: str,
        step: int,
        *,
        message: str | None = None,
        model: str | None = None,
        tenant_id: str | None = None,
    ) -> str:
        """Start a new run from the state of `run_id` at `step` (plus an optional user message).
        The parent is untouched; the new run records it and the fork step."""
        tenant = tenant_id or self.settings.tenant
        await travel.owner_of_step(self.engine, tenant, run_id, step)  # the run and the step exist
        parent = await self.run(run_id, tenant_id=tenant)
        new_id = f"run-{uuid.uuid4().hex[:12]}"
        inp = RunInput(
            agent=parent["agent"],
            task=parent["task"],
            tenant_id=tenant,
            model=model,
            fork=ForkOrigin(run_id=run_id, step=step, message=message),
        )
        await self.client.start_workflow(
            AgentRunWorkflow.run,
            inp,
            id=new_id,
            task_queue=self.settings.task_queue,
            memo={"tenant_id": tenant},
            task_timeout=retry.WORKFLOW_TASK_TIMEOUT,
        )
        return new_id

    async def state(self, run_id: str, step: int, *, tenant_id: str | None = None) -> dict:
        """The state (working memory) at `step`, with the step's events."""
        tenant = tenant_id or self.settings.tenant
        found = await travel.state_at(self.engine, tenant, run_id, step)
        found["events"] = await travel.step_events(self.engine, tenant, found["run_id"], step=step)
        return found

    async def diff(self, run_id: str, a: int, b: int, *, tenant_id: str | None = None) -> travel.StateDiff:
        return await travel.diff(self.engine, tenant_id or self.settings.tenant, run_id, a, b)

    async def events(
        self,
        run_id: str,
        *,
        kinds: list[str] | None = None,
        since_step: int = 0,
        limit: int | None = None,
        tenant_id: str | None = None,
    ) -> list[dict]:
        return await travel.step_events(
            self.engine, tenant_id or self.settings.tenant, run_id, kinds=kinds, since_step=since_step, limit=limit
        )

    def export(self, run_id: str, *, tenant_id: str | None = None) -> AsyncIterator[str]:
        """The full transcript as JSON lines (streamed)."""
        return travel.export(self.engine, tenant_id or self.settings.tenant, run_id)

    async def lineage(self, run_id: str, *, tenant_id: str | None = None) -> list[dict]:
        return await travel.lineage(self.engine, tenant_id or self.settings.tenant, run_id)

    async def replay(
        self, run_id: str, *, tenant_id: str | None = None, workflows: Sequence[type] = (AgentRunWorkflow,)
    ) -> list[tuple[str, str | None]]:
        """Replay every execution of the run (continue-as-new included) against the current workflow
        code; returns (execution run id, determinism error or None) for each."""
        await self._check_tenant(run_id, tenant_id)
        # The client's converter: histories written through the payload codec replay through it.
        replayer = Replayer(
            workflows=list(workflows),
            data_converter=self.client.data_converter,
            header_codec_behavior=self.client.config()["header_codec_behavior"],
        )
        outcomes: list[tuple[str, str | None]] = []
        async for execution in self.client.list_workflows(f"WorkflowId = '{run_id}'"):
            history = await self.client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            failure = result.replay_failure
            outcomes.append((execution.run_id, None if failure is None else f"{type(failure).__name__}: {failure}"))
        if not outcomes:
            raise NotFound(f"Temporal has no history for run {run_id} (its retention may have passed)")
        return outcomes

    async def verify(self, run_id: str, *, tenant_id: str | None = None) -> integrity.Verdict:
        """Recompute the run's hash chain and checkpoint hashes."""
        return await integrity.verify(self.engine, tenant_id or self.settings.tenant, run_id)

    async def delete(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """Remove a finished run and all it wrote (the only way rows leave the append-only log)."""
        await integrity.delete_run(self.engine, tenant_id or self.settings.tenant, run_id)

    async def timeline(
        self, run_id: str, *, tenant_id: str | None = None, after_step: int = 0, limit: int | None = None
    ) -> list[reads.StepLine]:
        """Steps after `after_step` (keyset pagination), from the `run_steps` view."""
        return await reads.timeline(
            self.engine, tenant_id or self.settings.tenant, run_id, after_step=after_step, limit=limit
        )

    # --- compaction (waypoint/compaction_schedule.py) ------------------------------------------------

    async def apply_compaction_schedule(self) -> str:
        """Create or update the compaction Schedule; "created", "updated" or "unchanged"."""
        from waypoint.compaction_schedule import apply_schedule

        return await apply_schedule(self.client, self.settings)

    async def compaction_schedule(self) -> dict:
        """The compaction Schedule and the outcome of its last passes."""
        from waypoint.compaction_schedule import describe_schedule

        return await describe_schedule(self.client, self.settings)

    async def compact(self, run_id: str | None = None, *, tenant_id: str | None = None) -> CompactionReport:
        """Run a compaction pass now (of one run, or of the tenant's runs past the threshold) and wait."""
        from waypoint.compaction_schedule import compact_now

        tenant = tenant_id or self.settings.tenant
        if run_id is not None:
            await self.run(run_id, tenant_id=tenant)  # an unknown run is named before Temporal is asked
        return await compact_now(self.client, self.settings, run_id=run_id, tenant_id=tenant)

    async def compactions(self, run_id: str | None = None, *, tenant_id: str | None = None, limit: int = 20) -> list:
        from waypoint.store.compactions import list_compactions

        return await list_compactions(self.engine, tenant_id or self.settings.tenant, run_id=run_id, limit=limit)

    # --- episodic memory (served by the memory worker, reached through Temporal) ------------------

    async def _memory(self, req: MemoryRequest) -> Any:
        from datetime import timedelta

        from waypoint.compaction_types import memory_task_queue
        from workflows.memory import MemoryRequestWorkflow

        queue = memory_task_queue(self.settings.task_queue)
        try:
            answer = await self.client.execute_workflow(
                MemoryRequestWorkflow.run,
                req,
                id=f"memory-{uuid.uuid4().hex[:12]}",
                task_queue=queue,
                # No memory worker: say so instead of waiting forever.
                execution_timeout=timedelta(seconds=self.settings.memory_request_timeout_seconds),
            )
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, TimeoutError) or "timed out" in str(cause).lower():
                raise WaypointError(
                    f"no memory worker answered on task queue {queue}: start one with `waypoint worker` "
                    "(or `waypoint dev`)"
                ) from None
            raise WaypointError(f"memory request failed: {cause}") from None
        return json.loads(answer)

    async def memory_search(
        self,
        query: str,
        *,
        k: int = 5,
        agent: str | None = None,
        run_id: str | None = None,
        tenant_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Episodes of this tenant most relevant to `query` (optionally of one agent or run)."""
        if not query.strip():
            raise WaypointError("the query is empty: say what to search for")
        tenant = tenant_id or self.settings.tenant
        req = MemoryRequest(op="search", tenant_id=tenant, query=query, k=k, agent=agent, run_id=run_id)
        found: list[dict[str, Any]] = await self._memory(req)
        return found

    async def memory_show(self, run_id: str, *, tenant_id: str | None = None) -> list[dict[str, Any]]:
        """Every episode a run left in long-term memory."""
        tenant = tenant_id or self.settings.tenant
        await self.run(run_id, tenant_id=tenant)  # another tenant's run is "not found"
        found: list[dict[str, Any]] = await self._memory(MemoryRequest(op="show", tenant_id=tenant, run_id=run_id))
        return found

    async def memory_forget(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """Delete a run's episodes (this tenant's only); returns how many went."""
        tenant = tenant_id or self.settings.tenant
        await self.run(run_id, tenant_id=tenant)
        answer = await self._memory(MemoryRequest(op="forget", tenant_id=tenant, run_id=run_id))
        return int(answer["deleted"])
