"""Messages exchanged between the workflows, their activities and their clients.

Everything here is a plain dataclass made of JSON-friendly fields, because it
travels through Temporal history and must be importable inside the workflow
sandbox: no IO, no third-party imports. The names of closed sets (statuses, event
kinds, tool outcomes) and of activities, updates and queries are in `waypoint.names`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from waypoint.errors import Conflict
from waypoint.names import (
    DecisionKind,
    LineageKind,
    MemoryOp,
    MemoryView,
    RunStatus,
    ToolMode,
    ToolOutcome,
    WaitReason,
    idempotency_key,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")

# A chat message in the chat-completions shape (role, content, tool_calls, tool_call_id).
Message = dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the model; `arguments` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    """Tokens of one model call. `input_tokens` counts every input token, cached ones included;
    `cache_read_tokens` of them were read from the provider's prompt cache, `cache_write_tokens`
    written to it (providers price both apart from fresh input)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class RecalledRef:
    """One recalled episode a model call received: its source, and the SHA-256 of its text."""

    run_id: str
    step: int
    kind: str
    score: float
    sha256: str


@dataclass(frozen=True)
class CallRecord:
    """What one model call received, by reference, so `show` can rebuild it byte for byte: the
    compaction whose summary it read, the recalled episodes and the system message they became
    (by its hash), how many turns and recalled episodes its budget dropped, and the hash of the
    messages as sent."""

    compaction_id: int | None = None
    recalled: list[RecalledRef] = field(default_factory=list)
    # Before migration 0011 the recalled message travelled here, verbatim; now it is kept in Postgres
    # by the model activity and named by its hash, so it stays out of Temporal's history.
    recalled_text: str | None = None
    recalled_sha256: str | None = None
    dropped_turns: int = 0
    dropped_recalled: int = 0
    messages: int = 0
    tokens: int = 0
    sha256: str = ""
    # What lets the next call hold these recalled episodes (waypoint.working_memory.assemble_held):
    # the window they sat in, and the step whose call recalled them (None: calls from before).
    window_key: str | None = None
    recalled_step: int | None = None


@dataclass(frozen=True)
class TypedAnswer:
    """A typed agent's answer in one turn, as `call_model` checked it against the agent's output schema
    (waypoint.typed_answers): the validated JSON the run ends with, or why it does not validate."""

    output_json: str | None = None  # the answer, validated, as JSON text
    error: str | None = None  # why it does not validate: what the model reads
    call_id: str | None = None  # the final_answer call it came from; None: the turn's text


@dataclass(frozen=True)
class ModelTurn:
    """What one model call answered."""

    model: str
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    latency_ms: int = 0
    cost_usd: float = 0.0
    attempt: int = 1
    # What the call received (None in histories written before it was recorded).
    request: CallRecord | None = None
    # The newest step whose episodes this call stored in episodic memory (None: it stored none).
    remembered_through: int | None = None
    # A typed agent's answer in this turn, checked (None: no answer in it, or the agent is not typed).
    answer: TypedAnswer | None = None
    # The answer's content blocks as one provider must be sent them back, by provider (Anthropic's
    # signed `thinking` blocks); None for the answers that need nothing beyond content and tool calls.
    provider_blocks: dict[str, list[dict[str, Any]]] | None = None
    # No answer: the call did not go out, it waits for capacity (the shared limiter's answer).
    wait: CapacityWait | None = None
    # The model spec the call went to (provider:model), as the limiter keys it; `model` is the name the
    # provider answered with. None in histories written before it was recorded.
    spec: str | None = None
    # No answer: the call did not go out, a budget it draws from is spent (its tree's pool, or its
    # tenant's day with `budget_wait = "fail"`); this says which and how far. The run ends `budget_exceeded`.
    refused: str | None = None


@dataclass(frozen=True)
class CapacityWait:
    """The shared limiter made a model call wait: for `key`, at `position` in its line (1: next),
    asking again after `retry_after` seconds at the latest (a `capacity` signal may come sooner).
    With reason `recovered`, `key` is the model spec the run failed over from and may go back to."""

    key: str
    reason: WaitReason
    position: int = 1
    retry_after: float = 1.0


@dataclass(frozen=True)
class ToolResult:
    """A tool call's outcome. Long outputs stay in the `tool_effects` ledger: `output` is then
    a preview and `stored` is true (claim check), so history stays small."""

    call_id: str
    name: str
    output: str
    is_error: bool = False
    duration_ms: int = 0
    stored: bool = False
    outcome: ToolOutcome = ToolOutcome.OK
    # True when a retried attempt found the call in the ledger and did not run the tool again.
    from_ledger: bool = False


@dataclass(frozen=True)
class ToolSpec:
    """What the workflow needs to know about a tool to schedule it."""

    name: str
    timeout_seconds: float
    requires_approval: bool = False
    max_attempts: int = 3
    # Memory tools run on the memory worker's task queue (the process that owns the Qdrant shard).
    memory: bool = False
    # Run as a local activity, in the worker that runs the workflow (`@tool(local=True)`).
    local: bool = False
    # May run again in a rerun with recorded tools when no recorded call matches (`@tool(replay_safe=True)`).
    replay_safe: bool = False
    # The built-in `ask_human` tool (`Agent(ask_human=True)`): it waits like requires_approval, and
    # the human's answer is its result (no activity runs it).
    asks_human: bool = False


@dataclass(frozen=True)
class RetrySpec:
    """Retry settings of model calls, per agent."""

    max_attempts: int = 10
    initial_interval_seconds: float = 1.0
    max_interval_seconds: float = 60.0
    timeout_seconds: float = 300.0


@dataclass(frozen=True)
class Budget:
    """Limits of one run; None means no limit. Overrides the agent's own where set."""

    max_steps: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_seconds: float | None = None


@dataclass(frozen=True)
class ForkOrigin:
    """Where a forked run starts: the state of `run_id` at `step`, plus an optional user message."""

    run_id: str
    step: int
    message: str | None = None
    kind: LineageKind = LineageKind.FORK
    tools: ToolMode = ToolMode.LIVE  # RECORDED answers matching calls from the parent's ledger
    batch_id: str | None = None  # the batch of reruns it belongs to
    # The rerun's instructions (system prompt) in place of the agent's own, from its first step on.
    instructions: str | None = None
    # What it recalls from long-term memory; None in runs started before it was chosen.
    memory: MemoryView | None = None
    # A rerun with recorded tools runs its sub-agents again instead of answering their calls from
    # the recorded answers (`waypoint rerun --rerun-children`).
    rerun_children: bool = False
    # Issue 41 (last, so older histories decode): the fork only adds `message` to the state, as a
    # new checkpoint (the Agent Protocol's update_state): it has no step to take, and ends `completed`
    # once started.
    message_only: bool = False

    @property
    def answers_from_record(self) -> bool:
        """A rerun with recorded tools: matching calls are answered from its source run's ledger."""
        return self.kind == LineageKind.RERUN and self.tools == ToolMode.RECORDED


@dataclass(frozen=True)
class ParentRef:
    """Where a sub-agent run comes from: the call (`step`, `call_index`) of `run_id` that started it,
    the root of its tree, and its depth there (the root is at 0, its children at 1). `max_depth`: how
    deep its caller lets the tree grow (its plan's max_agent_depth), which caps the run's own."""

    run_id: str
    step: int
    call_index: int
    root_run_id: str
    depth: int = 1
    max_depth: int | None = None  # None: runs started before callers passed it down


@dataclass(frozen=True)
class RunPlan:
    """What `start_run` resolved from the agent definition; fixed for the run's life."""

    model: str
    max_steps: int
    tools: list[ToolSpec] = field(default_factory=list)
    retry: RetrySpec = field(default_factory=RetrySpec)
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_seconds: float | None = None
    max_repairs: int = 3
    continue_as_new_every: int = 500
    context_tokens: int = 16_000
    start_step: int = 0  # a fork starts at its fork step
    # Episodic memory: episodes recalled before each model call (0: recall off), and the task
    # queue of the worker that owns memory (None: this deployment has no memory worker).
    recall_k: int = 0
    memory_queue: str | None = None
    # The worker that started the run holds the store too (one process serves both queues, as
    # `waypoint dev` and a single `waypoint worker` do): the model call, memory inside it, goes to
    # the run's own task queue, where Temporal starts it eagerly on that worker.
    memory_on_main_queue: bool = False
    # Compact inline once the model reports more input tokens than this share of context_tokens.
    compact_at: float = 0.8
    # Sub-agents: the agents the model may call as tools, how many of their runs go at once, how
    # deep a tree may grow, and this run's depth in its tree (0: a root).
    agents: list[str] = field(default_factory=list)
    max_parallel_agents: int = 8
    max_agent_depth: int = 4
    depth: int = 0
    # A typed agent's answer schema (JSON schema): the run ends with a `final_answer` call (None: text).
    output_schema: dict[str, Any] | None = None
    # Failover: the agent's next models, in order, after `model` (empty: one model, no failover, and
    # the run's commands are what they were before failover existed), and how many failed attempts
    # of one model hand the step to the next. A run given another model than its agent's has none.
    fallback_models: list[str] = field(default_factory=list)
    failover_after: int = 3
    # The tree's budget pool (its root run's id) every model call of the run reserves from before it
    # goes out: set when the tree has a token, cost or step budget (None: none, or a plan from before).
    budget_pool: str | None = None

    @property
    def models(self) -> list[str]:
        """Every model the run may call, in failover order."""
        return [self.model, *self.fallback_models]

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RunPlan:
        """A plan from its JSON form (as the `run_started` event stores it)."""
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["tools"] = [ToolSpec(**t) for t in values.get("tools", [])]
        if "retry" in values:
            values["retry"] = RetrySpec(**values["retry"])
        return cls(**values)


@dataclass(frozen=True)
class RunState:
    """Everything a continued-as-new execution carries over: counters and a checkpoint
    reference (the last recorded step), never the transcript."""

    plan: RunPlan
    step: int
    started_at: float  # epoch seconds, for the wall-clock deadline
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    repairs: int = 0
    paused: bool = False
    pending_messages: list[str] = field(default_factory=list)
    executions: int = 1
    compacted_at_step: int = 0  # the step after which the run last compacted inline
    # What the run's sub-agent runs (their whole trees) used: the run's budgets cover its tree.
    children_tokens: int = 0
    children_cost_usd: float = 0.0
    # The plan's model (index in `plan.models`) the run calls now: it moves on at each failover and
    # stays there for the rest of the run.
    model_index: int = 0


@dataclass(frozen=True)
class RunInput:
    """Input of AgentRunWorkflow. The run id is the workflow id."""

    agent: str
    task: str
    tenant_id: str = "default"
    # Model spec overriding the agent's own, e.g. "openai:gpt-4o-mini".
    model: str | None = None
    budget: Budget | None = None
    # Set when the run continues as new: where it was.
    resume: RunState | None = None
    fork: ForkOrigin | None = None
    # Set for a sub-agent run: the parent's call that started it.
    parent: ParentRef | None = None
    # `model` was chosen for this run (`--model`): it calls that model only, even its agent's first,
    # with no failover list. A rerun without --model passes its source's model unpinned.
    pin_model: bool = False
    # 1 (first) to 5 (last), Temporal's priority key; None: the default, 3. Temporal carries it to
    # the run's activities, its sub-agent runs and past continue-as-new; this field records it.
    # Last, so histories from before it decode.
    priority: int | None = None
    # Issue 27 (after the fields above, so older histories decode): the schedule that fired the run;
    # where its end is posted; a delayed run's start time (epoch seconds); the run an enqueued run
    # waits for before it starts (it then forks that run's last step).
    schedule_id: str | None = None
    webhook: str | None = None
    start_at: float | None = None
    after_run: str | None = None
    # A run that joins an Agent Protocol thread when it starts (a cron on a thread): it takes the
    # thread's next place and goes on from the thread's newest run (after it ends, if it is live).
    thread_id: str | None = None
    # Issue 28 (last, so older histories decode): the system prompt in place of the agent's own (an
    # Agent Protocol assistant's or run's `instructions`), and the assistant version the run runs.
    instructions: str | None = None
    assistant_id: str | None = None
    assistant_version: int | None = None
    # Issue 31 (last, so older histories decode): the batch a run that is not a rerun belongs to
    # (an experiment's case run: the experiment id), as a rerun's ForkOrigin.batch_id is.
    batch_id: str | None = None


@dataclass(frozen=True)
class StartRunInput:
    run_id: str
    tenant_id: str
    agent: str
    task: str
    model: str | None
    budget: Budget
    fork: ForkOrigin | None = None
    parent: ParentRef | None = None
    pin_model: bool = False
    priority: int | None = None
    schedule_id: str | None = None
    webhook: str | None = None
    start_at: float | None = None
    after_run: str | None = None
    # Issue 28 (last, so older histories decode): as RunInput's.
    instructions: str | None = None
    assistant_id: str | None = None
    assistant_version: int | None = None
    batch_id: str | None = None  # issue 31: as RunInput's


@dataclass(frozen=True)
class Memory:
    """One recalled episode, as working memory shows it: with its source run and step."""

    text: str
    run_id: str
    step: int
    kind: str
    score: float = 0.0
    importance: float = 0.0
    # When it was first stored and when last (a near-duplicate learned again moves it), epoch seconds.
    stored_at: float = 0.0
    updated_at: float = 0.0


@dataclass(frozen=True)
class MemoryStepInput:
    """Input of `memory_step`: store the episodes of `remember_step` (if set), then recall for
    `recall_step` (if set, and k > 0)."""

    run_id: str
    tenant_id: str
    agent: str
    remember_step: int | None = None
    recall_step: int | None = None
    k: int = 0


@dataclass(frozen=True)
class MemoryStepResult:
    stored: int = 0
    recalled: list[Memory] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryRequest:
    """Input of `memory_admin` (CLI and API); always one tenant."""

    op: MemoryOp
    tenant_id: str
    query: str = ""
    k: int = 5
    agent: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class MemoryAnswer:
    """What the memory worker answers a MemoryRequest: the hits of a search, the episodes of a
    run (`show`), or how many episodes were deleted (`forget`)."""

    memories: list[Memory] = field(default_factory=list)
    deleted: int = 0


@dataclass(frozen=True)
class CallModelInput:
    """The context is not carried here: the activity loads it from the checkpoint of `step - 1`,
    plus the user messages injected since then."""

    run_id: str
    tenant_id: str
    agent: str
    step: int
    model: str
    user_messages: list[str] = field(default_factory=list)
    retry: RetrySpec = field(default_factory=RetrySpec)
    # Episodes recalled by a memory_step activity before this call (histories before `memory`).
    recalled: list[Memory] = field(default_factory=list)
    # Episodic memory in this call: store the episodes of the steps not stored yet (a batch), and recall
    # `recall_k` episodes for this step. It runs on the worker that holds the store.
    memory: bool = False
    recall_k: int = 0
    # The models this step failed over from before this call, in order (for the model span).
    failed_over_from: list[str] = field(default_factory=list)
    # 1 (first) to 5 (last): the run's place in the limiter's lines; None: the default (3).
    priority: int | None = None
    # The models of the agent's plan before this one: the call steps back to the first that is
    # healthy again (answering a `recovered` wait) instead of calling this one.
    prefer: list[str] = field(default_factory=list)
    # The agent has a model after this one: an open circuit breaker on this one moves the call there
    # at once. Without one, the breaker is not consulted: the call keeps its own retries.
    can_fail_over: bool = False
    # The tree's budget pool the call reserves from (RunPlan.budget_pool); None: no tree budget.
    budget_pool: str | None = None


@dataclass(frozen=True)
class FailoverRecord:
    """A step's model call moved from `from_model` to `to_model` after `after_attempts` failed
    attempts; `last_error` (and its type) is why (the `model_failover` event)."""

    run_id: str
    tenant_id: str
    step: int
    from_model: str
    to_model: str
    after_attempts: int
    last_error: str
    error_type: str | None = None


@dataclass(frozen=True)
class RunToolInput:
    run_id: str
    tenant_id: str
    agent: str
    step: int
    call_index: int
    call: ToolCall
    # The run whose ledger answers this call (a rerun with recorded tools), None when the tools run
    # live: the workflow knows it from its input, so run_tool does not read the run's origin.
    # `origin_known` is False in inputs from before this was carried: run_tool looks it up then.
    recorded_from: str | None = None
    origin_known: bool = False

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.run_id, self.step, self.call_index)


@dataclass(frozen=True)
class AgentCallInput:
    """Input of `agent_result`: the outcome of one sub-agent call, to record in the parent's ledger
    under the call's idempotency key. `child_run_id` names the child run whose answer (or end) it
    is; without one, `error` says why no child ran (a bad call, the tree too deep)."""

    run_id: str
    tenant_id: str
    step: int
    call_index: int
    call: ToolCall
    child_run_id: str | None = None
    error: str | None = None
    outcome: ToolOutcome = ToolOutcome.TOOL_ERROR

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.run_id, self.step, self.call_index)


@dataclass(frozen=True)
class AgentCallResult:
    """What `agent_result` answers: the call's result as the model reads it, and what the child's
    whole tree used (the parent's budgets cover it)."""

    result: ToolResult
    tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class StepDecision:
    """A human's decision on one call that waited for approval, as its step records it (the
    payload of a `decision` event)."""

    call_id: str
    decision: DecisionKind
    reason: str = ""
    # An approval may change the call's arguments (the tool runs with these) or, for `ask_human`,
    # carry the human's answer (the call's result); both are recorded in the `decision` event.
    edited_input: dict[str, Any] | None = None
    answer: str | None = None
    actor: str | None = None  # who decided (the `Decision`'s actor); recorded when known

    @property
    def approved(self) -> bool:
        return self.decision == DecisionKind.APPROVED


@dataclass(frozen=True)
class StepRecord:
    run_id: str
    tenant_id: str
    step: int
    turn: ModelTurn
    tool_results: list[ToolResult] = field(default_factory=list)
    user_messages: list[str] = field(default_factory=list)
    # Human decisions taken in this step (approvals, denials), recorded as events.
    decisions: list[StepDecision] = field(default_factory=list)
    context_tokens: int = 16_000


@dataclass(frozen=True)
class DeliverWebhookInput:
    """Input of `deliver_webhook`: post the finished run's final state to `url`. `delivery_id` is
    drawn by the workflow, so every attempt (and a replay) sends the same one."""

    run_id: str
    tenant_id: str
    url: str
    delivery_id: str


@dataclass(frozen=True)
class WebhookDeliveryInput:
    """Input of WebhookDeliveryWorkflow: one event to one URL, retried until delivered or its window
    ends. The delivery's row holds the URL and the body (a run's started delivery makes it from the
    run's final row; a redelivery's is made by the client): neither rides in Temporal's history."""

    delivery_id: str  # also the workflow's id: one workflow per delivery, ever
    tenant_id: str
    run_id: str
    event: str = "run.finished"


@dataclass(frozen=True)
class DeliveryPlan:
    """What `open_webhook_delivery` answers: the delivery's status (a delivery that is not pending
    has nothing left to post) and the seconds left of its retry window."""

    status: str
    window_seconds: float


@dataclass(frozen=True)
class PostWebhookInput:
    """Input of `post_webhook`: one signed POST of the delivery's body (every attempt reads its row)."""

    delivery_id: str
    tenant_id: str


@dataclass(frozen=True)
class CloseDeliveryInput:
    """Input of `close_webhook_delivery`: the delivery was given up (`reason`): it goes on the dead-letter list."""

    delivery_id: str
    tenant_id: str
    reason: str


@dataclass(frozen=True)
class HoldRunInput:
    """A run that waits before it starts (workflows/starts.py): its row, written at once with status
    `scheduled` (until `start_at`, epoch seconds) or `queued` (after `after_run`, or on a thread)."""

    run_id: str
    tenant_id: str
    agent: str
    task: str
    model: str | None
    status: RunStatus
    start_at: float | None = None
    after_run: str | None = None
    parent: ParentRef | None = None
    priority: int | None = None
    schedule_id: str | None = None
    webhook: str | None = None


@dataclass(frozen=True)
class JoinThreadInput:
    """A run that joins a thread when it starts (a cron on a thread): it takes the thread's next place."""

    run_id: str
    tenant_id: str
    thread_id: str


@dataclass(frozen=True)
class AwaitRunInput:
    """An enqueued run (`run_id`) waits for `after_run` to end."""

    run_id: str
    tenant_id: str
    after_run: str


@dataclass(frozen=True)
class ForkPoint:
    """Where an enqueued run starts once the run before it ended: a fork of `run_id` at `step`, or
    (run_id None) a fresh start, when no run before it ever started."""

    run_id: str | None = None
    step: int = 0


@dataclass(frozen=True)
class SetStatusInput:
    run_id: str
    status: RunStatus
    detail: str | None = None
    tenant_id: str = ""  # empty in histories written before writes were tenant-checked
    caller: bool = False  # a sub-agent run: its callers mirror a wait for approval
    # The run waits on its sub-agent runs (a pause or resume taken meanwhile): `running` shows a wait
    # for approval below it instead, as its callers' mirror of such a wait does.
    awaits_children: bool = False


@dataclass(frozen=True)
class FinishRunInput:
    run_id: str
    tenant_id: str
    status: RunStatus
    output: str | None = None
    error: str | None = None
    # Set when the run could not start: its row is written from this, so a run that was given an
    # id is never invisible.
    start: StartRunInput | None = None
    # Set when a cancel came during a step: {"step", "activity", "why", "recorded", "in_flight",
    # "not_started"} (runs from before: the first three), logged as `step_cancelled`.
    interrupted: dict[str, Any] | None = None
    # `output` is a typed answer, validated JSON text: it is stored parsed too (runs.output_json).
    output_is_json: bool = False


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: RunStatus
    steps: int
    output: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    # A sub-agent run's result carries a preview of a long answer (the whole is in Postgres), so its
    # parent's history stays small: this says so. A typed answer's parsed JSON is read there too.
    output_stored: bool = False
    # A typed run's answer, parsed (the agent's output_type validated it); None for a text answer.
    output_json: Any = None

    def output_as(self, output_type: type[M]) -> M:
        """The typed answer as an instance of `output_type` (a pydantic model); Conflict when the run
        did not end with one (it failed, or its agent is not typed)."""
        if self.output_json is None:
            why = f": {self.error}" if self.error else ""
            raise Conflict(f"run {self.run_id} ended {self.status} without a typed answer{why}")
        return output_type.model_validate(self.output_json)


@dataclass(frozen=True)
class PendingApproval:
    call_id: str
    tool: str
    arguments: str
    step: int
    asks_human: bool = False  # an `ask_human` call: it waits for an answer, not a yes or no


@dataclass(frozen=True)
class Decision:
    """Input of the `approve` and `deny` updates; `call_id` may be omitted when one call waits."""

    call_id: str | None = None
    reason: str | None = None
    # approve only: the arguments the tool runs with instead of the model's, or an ask_human answer
    edited_input: dict[str, Any] | None = None
    answer: str | None = None
    # Who decided, as the audit log names them (key:<id>, user:<subject>, local); None from a client
    # of before the audit log: an optional field, so updates sent by either version still decode.
    actor: str | None = None


@dataclass(frozen=True)
class RunProgress:
    """Answer of the workflow's `progress` query."""

    step: int
    status: str  # a RunStatus, or "starting" before the run's plan is known
    last_action: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    pending_approvals: list[PendingApproval] = field(default_factory=list)
    queued_messages: int = 0
    execution: int = 1


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    parameters: dict[str, Any]  # the JSON schema of its arguments
    requires_approval: bool = False
    memory: bool = False
    timeout_seconds: float = 300.0
    max_attempts: int = 3
    local: bool = False


@dataclass(frozen=True)
class AgentInfo:
    """An agent as the workers registered it in the `agents` catalog."""

    name: str
    description: str  # its instructions
    model: str  # its model spec
    providers: list[str]  # the model providers its worker can call: "scripted" (its own script), "openai"
    tools: list[ToolInfo]
    settings: dict[str, Any]  # max_steps, budgets, context_tokens, memory, recall_k, ...
    worker: str = ""
    updated_at: datetime | None = None  # when a worker last registered it
    # The fingerprint of the version a fresh run would start with on that worker (waypoint.versions),
    # leaving out MCP tools, which a run lists when it starts; None: registered before versions.
    fingerprint: str | None = None

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> AgentInfo:
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        values["tools"] = [ToolInfo(**t) for t in values.get("tools", [])]
        return cls(**values)
