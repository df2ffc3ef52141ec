"""Test doubles of every activity the workflows call, registered under the same names.

The workflow logic (budgets, deadlines, approvals, pause and cancel, continue-as-new, repairs,
compaction passes) is tested against these in Temporal's time-skipping environment: no Postgres,
no model server, milliseconds a test, and a week of waiting costs a second. What only real
servers show (crash recovery, outages, HTTP, the browser) is tested elsewhere against them.

A test scripts the model with `turns` (a function of the call's input), the tools with `tool`,
and reads back what the workflow asked for: `records`, `statuses`, `finished`, `calls`.

Sub-agent runs are the real AgentRunWorkflow, started as child workflows on the same worker: their
activities are these doubles too. `turns` tells the runs apart by `inp.agent` (a child's agent is
the name its caller called) or `inp.run_id`; `plans` gives an agent a plan of its own; `ledger`
holds what `agent_result` wrote, by idempotency key.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import ParentClosePolicy
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from waypoint.compaction_types import (
    CompactionSummary,
    CompactRunInput,
    RememberInput,
    RunRef,
    SelectRunsInput,
)
from waypoint.config import Settings
from waypoint.names import Activity, RunStatus, ToolOutcome, memory_task_queue
from waypoint.types import (
    AgentCallInput,
    AgentCallResult,
    AwaitRunInput,
    CallModelInput,
    CloseDeliveryInput,
    DeliverWebhookInput,
    DeliveryPlan,
    FailoverRecord,
    FinishRunInput,
    ForkPoint,
    HoldRunInput,
    JoinThreadInput,
    MemoryAnswer,
    MemoryRequest,
    MemoryStepInput,
    MemoryStepResult,
    ModelTurn,
    PostWebhookInput,
    RunInput,
    RunPlan,
    RunResult,
    RunToolInput,
    SetStatusInput,
    StartRunInput,
    StepRecord,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    WebhookDeliveryInput,
)
from waypoint.workflows.agent_run import AgentRunWorkflow
from waypoint.workflows.compaction import CompactionWorkflow
from waypoint.workflows.memory import MemoryRequestWorkflow
from waypoint.workflows.webhooks import WebhookDeliveryWorkflow


def call(name: str, arguments: str = "{}", id: str | None = None) -> ToolCall:
    return ToolCall(id=id or f"call-{uuid.uuid4().hex[:6]}", name=name, arguments=arguments)


def answer(text: str, *, tokens: int = 10, cost: float = 0.0) -> ModelTurn:
    return ModelTurn(model="double", content=text, usage=Usage(tokens, tokens), cost_usd=cost)


def tools(*calls: ToolCall, tokens: int = 10, cost: float = 0.0) -> ModelTurn:
    return ModelTurn(model="double", tool_calls=list(calls), usage=Usage(tokens, tokens), cost_usd=cost)


def loop_tool(name: str = "work", **kw: Any) -> Callable[[CallModelInput], ModelTurn]:
    """A model that calls `name` at every step and never answers."""
    return lambda inp: tools(call(name, id=f"c{inp.step}"), **kw)


def answer_at(step: int, text: str = "done", name: str = "work") -> Callable[[CallModelInput], ModelTurn]:
    """A model that calls `name` until `step`, where it answers `text`."""
    return lambda inp: answer(text) if inp.step >= step else tools(call(name, id=f"c{inp.step}"))


@dataclass(frozen=True)
class Posted:
    """A post_webhook attempt (or a close_webhook_delivery call) as the doubles saw it."""

    delivery_id: str
    attempt: int
    at: datetime  # when Temporal scheduled it: virtual time in the time-skipping environment
    reason: str | None = None


@dataclass
class Doubles:
    """Every activity of AgentRunWorkflow, CompactionWorkflow and MemoryRequestWorkflow."""

    plan: RunPlan = field(default_factory=lambda: RunPlan(model="double", max_steps=20))
    turns: Callable[[CallModelInput], ModelTurn] = field(default_factory=lambda: answer_at(1))
    tool: Callable[[RunToolInput], ToolResult] | None = None
    start_error: str | None = None  # start_run fails, non-retryable, with this message
    compact_runs: Sequence[str] = ()  # what select_runs_to_compact picks
    compact_error: dict[str, str] = field(default_factory=dict)  # run id -> compact_run's failure
    compact_crash: Sequence[str] = ()  # runs whose compact_run raises a KeyError (a bug: retried, as any)
    # What the workflow asked for, in order.
    records: list[StepRecord] = field(default_factory=list)
    statuses: list[tuple[str, str | None]] = field(default_factory=list)
    status_writes: list[SetStatusInput] = field(default_factory=list)  # the same writes, whole (which run, ...)
    finished: list[FinishRunInput] = field(default_factory=list)
    calls: list[CallModelInput] = field(default_factory=list)
    tool_calls: list[RunToolInput] = field(default_factory=list)
    tool_local: list[bool] = field(default_factory=list)  # whether each tool call ran as a local activity
    compacted: list[str] = field(default_factory=list)
    saved_episodes: list[dict[str, Any]] = field(default_factory=list)
    memory_queues: list[str | None] = field(default_factory=list)  # the queue each model call ran on
    recorded_lookups: list[list[RunToolInput]] = field(default_factory=list)
    recorded: set[str] = field(default_factory=set)  # call ids a rerun finds in the record
    tool_gate: asyncio.Event | None = None  # set: tools wait for it
    tools_done: list[str] = field(default_factory=list)  # idempotency keys of the tool calls that returned
    tools_cut: list[str] = field(default_factory=list)  # ... and of those whose activity saw a cancellation
    model_gate: asyncio.Event | None = None  # set: model calls wait for it (heartbeating, so they can be cancelled)
    model_cancelled: list[int] = field(default_factory=list)  # steps whose model call saw its cancellation
    memory_elsewhere: bool = False  # set: a model call with memory on the main queue finds no store there
    # Sub-agents: a plan per agent name (else `plan`), what each start_run was given, in order, and
    # what agent_result was asked and wrote (the parent's ledger, by idempotency key).
    plans: dict[str, RunPlan] = field(default_factory=dict)
    started: list[StartRunInput] = field(default_factory=list)
    agent_calls: list[AgentCallInput] = field(default_factory=list)
    ledger: dict[str, ToolResult] = field(default_factory=dict)
    failovers: list[FailoverRecord] = field(default_factory=list)  # what record_failover logged, once each
    # Webhooks: every delivery opened (with how many runs had finished by then), every post_webhook
    # attempt (with its attempt number and when, in the server's virtual time, it was scheduled), every
    # delivery given up; `webhook_failures` attempts fail first (retryable, paced by the delivery's own
    # retry policy), `webhook_refused` fails each non-retryably; `webhook_window` is the window
    # open_webhook_delivery answers (the setting's default). `webhooks` are the attempts of runs from
    # before patch webhook-2 (deliver_webhook), which only replays of old histories take.
    opened: list[WebhookDeliveryInput] = field(default_factory=list)
    webhook_finished_before: list[int] = field(default_factory=list)
    posts: list[Posted] = field(default_factory=list)
    closed: list[Posted] = field(default_factory=list)
    webhook_failures: int = 0
    webhook_refused: bool = False
    webhook_window: float = field(
        default_factory=lambda: float(Settings.model_fields["webhook_retry_window_seconds"].default)
    )
    webhooks: list[DeliverWebhookInput] = field(default_factory=list)
    # Runs that wait to start: what hold_run wrote (each call), each thread's runs in order (a
    # thread not here is gone), and the runs await_run waited for.
    held: list[HoldRunInput] = field(default_factory=list)
    threads: dict[str, list[str]] = field(default_factory=dict)
    awaited: list[AwaitRunInput] = field(default_factory=list)

    # --- agent runs ------------------------------------------------------------------------------

    @activity.defn(name=Activity.START_RUN)
    async def start_run(self, inp: StartRunInput) -> RunPlan:
        if self.start_error is not None:
            raise ApplicationError(self.start_error, non_retryable=True)
        if all(s.run_id != inp.run_id for s in self.started):
            self.started.append(inp)
        plan = self.plans.get(inp.agent, self.plan)
        if inp.parent is not None:  # as the real start_run: what the caller has left caps the agent's own
            limit = inp.budget.max_tokens
            tokens = plan.max_tokens if limit is None else min(limit, plan.max_tokens or limit)
            depth_limit = min(plan.max_agent_depth, inp.parent.max_depth or plan.max_agent_depth)
            plan = replace(plan, max_tokens=tokens, depth=inp.parent.depth, max_agent_depth=depth_limit)
        return replace(plan, start_step=inp.fork.step) if inp.fork is not None else plan

    @activity.defn(name=Activity.CALL_MODEL)
    async def call_model(self, inp: CallModelInput) -> ModelTurn:
        self.calls.append(inp)
        queue = activity.info().task_queue
        self.memory_queues.append(queue if inp.memory else None)
        if inp.memory and self.memory_elsewhere and not queue.endswith("-memory"):
            raise ApplicationError("no store here", type="MemoryElsewhere", non_retryable=True)
        try:
            while self.model_gate is not None and not self.model_gate.is_set():
                activity.heartbeat()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.model_cancelled.append(inp.step)
            raise
        return self.turns(inp)

    @activity.defn(name=Activity.RUN_TOOL)
    async def run_tool(self, inp: RunToolInput) -> ToolResult:
        self.tool_calls.append(inp)
        self.tool_local.append(activity.info().is_local)
        try:
            while self.tool_gate is not None and not self.tool_gate.is_set():
                activity.heartbeat()
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            self.tools_cut.append(inp.idempotency_key)
            raise
        self.tools_done.append(inp.idempotency_key)
        if self.tool is not None:
            return self.tool(inp)
        return ToolResult(call_id=inp.call.id, name=inp.call.name, output=f"ok {inp.idempotency_key}")

    @activity.defn(name=Activity.RECORDED_CALLS)
    async def recorded_calls(self, calls: list[RunToolInput]) -> list[str]:
        self.recorded_lookups.append(calls)
        return [c.call.id for c in calls if c.call.id in self.recorded]

    @activity.defn(name=Activity.RECORD_STEP)
    async def record_step(self, record: StepRecord) -> int:
        if all((r.run_id, r.step) != (record.run_id, record.step) for r in self.records):  # idempotent, as the store is
            self.records.append(record)
        return record.step

    @activity.defn(name=Activity.RECORD_FAILOVER)
    async def record_failover(self, record: FailoverRecord) -> None:
        if record not in self.failovers:  # idempotent, as the store is
            self.failovers.append(record)

    @activity.defn(name=Activity.SET_STATUS)
    async def set_run_status(self, inp: SetStatusInput) -> None:
        self.statuses.append((inp.status, inp.detail))
        self.status_writes.append(inp)

    @activity.defn(name=Activity.FINISH_RUN)
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        self.finished.append(inp)
        records = [r for r in self.records if r.run_id == inp.run_id]
        return RunResult(
            run_id=inp.run_id,
            status=inp.status,
            steps=len(records),
            output=inp.output,
            error=inp.error,
            input_tokens=sum(r.turn.usage.input_tokens for r in records),
            output_tokens=sum(r.turn.usage.output_tokens for r in records),
        )

    @activity.defn(name=Activity.DELIVER_WEBHOOK)
    async def deliver_webhook(self, inp: DeliverWebhookInput) -> int:
        self.webhooks.append(inp)
        return 200

    @activity.defn(name=Activity.OPEN_WEBHOOK)
    async def open_webhook_delivery(self, inp: WebhookDeliveryInput) -> DeliveryPlan:
        self.opened.append(inp)
        self.webhook_finished_before.append(len(self.finished))
        return DeliveryPlan(status="pending", window_seconds=self.webhook_window)

    @activity.defn(name=Activity.POST_WEBHOOK)
    async def post_webhook(self, inp: PostWebhookInput) -> int:
        info = activity.info()
        self.posts.append(Posted(inp.delivery_id, info.attempt, info.current_attempt_scheduled_time))
        if self.webhook_refused:
            raise ApplicationError("the webhook answered HTTP 400", type="WebhookRefused", non_retryable=True)
        if len(self.posts) <= self.webhook_failures:
            raise ApplicationError("the webhook answered HTTP 503", type="WebhookFailed")
        return 200

    @activity.defn(name=Activity.CLOSE_WEBHOOK)
    async def close_webhook_delivery(self, inp: CloseDeliveryInput) -> None:
        info = activity.info()
        self.closed.append(Posted(inp.delivery_id, info.attempt, info.current_attempt_scheduled_time, inp.reason))

    @activity.defn(name=Activity.HOLD_RUN)
    async def hold_run(self, inp: HoldRunInput) -> None:
        self.held.append(inp)

    @activity.defn(name=Activity.JOIN_THREAD)
    async def join_thread(self, inp: JoinThreadInput) -> str | None:
        if inp.thread_id not in self.threads:
            raise ApplicationError(f"thread {inp.thread_id!r} is gone", type="NotFound", non_retryable=True)
        members = self.threads[inp.thread_id]
        if inp.run_id not in members:
            members.append(inp.run_id)
        before = members[: members.index(inp.run_id)]
        return before[-1] if before else None

    @activity.defn(name=Activity.AWAIT_RUN)
    async def await_run(self, inp: AwaitRunInput) -> ForkPoint:
        """As the real one: waits (heartbeating) until the run before has ended, then answers its last
        step (a run that never started: the one it waited for, as fork_point_after walks)."""
        self.awaited.append(inp)
        while self.end_of(inp.after_run) is None:
            activity.heartbeat()
            await asyncio.sleep(0.05)
        current: str | None = inp.after_run
        while current is not None:
            begun = next((s for s in self.started if s.run_id == current), None)
            if begun is not None:
                steps = self.steps_of(current)
                return ForkPoint(current, steps[-1] if steps else (begun.fork.step if begun.fork else 0))
            current = next((h.after_run for h in self.held if h.run_id == current), None)
        return ForkPoint()

    @activity.defn(name=Activity.AGENT_RESULT)
    async def agent_result(self, inp: AgentCallInput) -> AgentCallResult:
        """As the real one: the child's answer (or how it ended) into the caller's ledger, once, and
        what the child's whole tree used."""
        self.agent_calls.append(inp)
        tokens, cost = 0, 0.0
        output, outcome = f"error: {inp.error or 'no sub-agent ran'}", inp.outcome
        if inp.child_run_id is not None:
            tree = [
                r for r in self.records if r.run_id == inp.child_run_id or r.run_id.startswith(inp.child_run_id + ".")
            ]
            tokens = sum(r.turn.usage.input_tokens + r.turn.usage.output_tokens for r in tree)
            cost = sum(r.turn.cost_usd for r in tree)
            end = next(f for f in self.finished if f.run_id == inp.child_run_id)
            if end.status == RunStatus.COMPLETED:
                output, outcome = end.output or "", ToolOutcome.OK
            else:
                output, outcome = (
                    f"error: sub-agent {inp.call.name} ended {end.status}: {end.error}",
                    ToolOutcome.TOOL_ERROR,
                )
        result = ToolResult(
            call_id=inp.call.id, name=inp.call.name, output=output, outcome=outcome, is_error=outcome != ToolOutcome.OK
        )
        return AgentCallResult(self.ledger.setdefault(inp.idempotency_key, result), tokens, cost)

    @activity.defn(name=Activity.MEMORY_STEP)
    async def memory_step(self, inp: MemoryStepInput) -> MemoryStepResult:
        return MemoryStepResult()

    # --- compaction and memory -------------------------------------------------------------------

    @activity.defn(name=Activity.COMPACT_RUN)
    async def compact_run(self, inp: CompactRunInput) -> CompactionSummary:
        self.compacted.append(inp.run_id)
        if inp.run_id in self.compact_error:
            raise ApplicationError(self.compact_error[inp.run_id], non_retryable=True)
        if inp.run_id in self.compact_crash:
            raise KeyError("tool_calls")
        return CompactionSummary(
            run_id=inp.run_id,
            compaction_id=len(self.compacted),
            first_seq=1,
            last_seq=10,
            tokens_before=1000,
            tokens_after=100,
            created=True,
            tenant_id=inp.tenant_id,
            summary=f"summary of {inp.run_id}",
        )

    @activity.defn(name=Activity.SELECT_RUNS)
    async def select_runs(self, inp: SelectRunsInput) -> list[RunRef]:
        picked = [inp.run_id] if inp.run_id else list(self.compact_runs)
        return [RunRef(run_id=r, tenant_id=inp.tenant_id or "t", tokens=9000) for r in picked]

    @activity.defn(name=Activity.SAVE_EPISODES)
    async def save_episodes(self, episodes: list[dict[str, Any]]) -> int:
        self.saved_episodes.extend(episodes)
        return len(episodes)

    @activity.defn(name=Activity.REMEMBER_MISSING)
    async def remember_missing(self, inp: RememberInput) -> int:
        return 2  # steps of finished runs whose episodes memory had missed

    @activity.defn(name=Activity.MEMORY_ADMIN)
    async def memory_admin(self, req: MemoryRequest) -> MemoryAnswer:
        return MemoryAnswer(deleted=7)

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.start_run,
            self.call_model,
            self.run_tool,
            self.recorded_calls,
            self.record_step,
            self.record_failover,
            self.set_run_status,
            self.finish_run,
            self.deliver_webhook,
            self.open_webhook_delivery,
            self.post_webhook,
            self.close_webhook_delivery,
            self.agent_result,
            self.memory_step,
            self.compact_run,
            self.select_runs,
            self.save_episodes,
            self.remember_missing,
            self.memory_admin,
            self.hold_run,
            self.join_thread,
            self.await_run,
        ]

    # --- reading back ----------------------------------------------------------------------------

    @property
    def steps(self) -> list[int]:
        return [r.step for r in self.records]

    @property
    def status_names(self) -> list[str]:
        return [s for s, _ in self.statuses]

    def steps_of(self, run_id: str) -> list[int]:
        return [r.step for r in self.records if r.run_id == run_id]

    def end_of(self, run_id: str) -> FinishRunInput | None:
        return next((f for f in self.finished if f.run_id == run_id), None)


@dataclass
class Bench:
    """A worker (and, with memory, a memory worker) serving the doubles on a queue of its own."""

    client: Client
    doubles: Doubles
    task_queue: str

    async def start(self, inp: RunInput | None = None, **kw: Any) -> WorkflowHandle[Any, RunResult]:
        return await self.client.start_workflow(
            AgentRunWorkflow.run,
            inp or RunInput(agent="double", task="test", tenant_id="t"),
            id=f"run-{uuid.uuid4().hex[:12]}",
            task_queue=self.task_queue,
            **kw,
        )


async def delivery_of(client: Client, run: WorkflowHandle[Any, Any]) -> WorkflowHandle[Any, str]:
    """The webhook delivery workflow the run started: a child it abandons, so it outlives the run."""
    found = []
    async for event in run.fetch_history_events():
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            found.append(event.start_child_workflow_execution_initiated_event_attributes)
    (started,) = found
    assert started.workflow_type.name == "WebhookDeliveryWorkflow"
    assert started.parent_close_policy == ParentClosePolicy.PARENT_CLOSE_POLICY_ABANDON
    return client.get_workflow_handle(started.workflow_id, result_type=str)


@asynccontextmanager
async def bench(client: Client, doubles: Doubles, *, memory: bool = False) -> AsyncIterator[Bench]:
    task_queue = f"ts-{uuid.uuid4().hex[:8]}"
    if memory:
        doubles.plan = replace(doubles.plan, memory_queue=memory_task_queue(task_queue), recall_k=3)
    workers = [
        Worker(
            client,
            task_queue=queue,
            workflows=[AgentRunWorkflow, CompactionWorkflow, MemoryRequestWorkflow, WebhookDeliveryWorkflow],
            activities=doubles.activities(),
        )
        for queue in ([task_queue, memory_task_queue(task_queue)] if memory else [task_queue])
    ]
    for w in workers:
        await w.__aenter__()
    try:
        yield Bench(client, doubles, task_queue)
    finally:
        for w in reversed(workers):
            await w.__aexit__(None, None, None)


def ok(inp: RunToolInput, outcome: ToolOutcome = ToolOutcome.OK, output: str = "ok") -> ToolResult:
    return ToolResult(
        call_id=inp.call.id, name=inp.call.name, output=output, outcome=outcome, is_error=outcome != ToolOutcome.OK
    )


def spec(name: str = "work", **kw: Any) -> ToolSpec:
    return ToolSpec(name=name, timeout_seconds=kw.pop("timeout_seconds", 30), **kw)


__all__ = [
    "RunStatus",
    "Doubles",
    "Posted",
    "bench",
    "Bench",
    "delivery_of",
    "call",
    "answer",
    "tools",
    "loop_tool",
    "answer_at",
    "ok",
    "spec",
]
