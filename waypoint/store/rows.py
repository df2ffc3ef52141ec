"""What the store's reads return: typed rows, one dataclass per shape. The rows one family alone
produces live beside it: a step's state, a diff and lineage links in `travel`, a comparison's in
`compare`, `verify`'s verdict in `integrity`.

The Python API (`waypoint.client.Waypoint`) returns these as they are; `waypoint.client.as_json`
turns any of them into JSON-ready data (timestamps as ISO 8601 text, decimals as floats) for the
CLI's `--json` and the HTTP API.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from waypoint.access import Role
from waypoint.names import STUCK, RunStatus
from waypoint.types import RunResult

_Row = TypeVar("_Row")


def row_of(cls: type[_Row], row: Mapping[Any, Any], **convert: Callable[[Any], Any]) -> _Row:
    """A row type built from a result mapping: the mapping's values for the class's fields (fields the
    mapping lacks keep their defaults), each passed through `convert[field]` where one is given
    (`row_of(ApiKeyRow, row, role=Role)`)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {k: v for k, v in row.items() if k in names}
    for name, to in convert.items():
        if name in values:
            values[name] = to(values[name])
    return cls(**values)


@dataclass(frozen=True)
class RunRow:
    """One row of `runs`."""

    run_id: str
    tenant_id: str
    agent: str
    task: str
    model: str
    status: str  # a RunStatus
    steps: int
    max_steps: int
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0  # of input_tokens, served by the provider's prompt cache
    cache_write_tokens: int = 0  # of input_tokens, written to it
    cost_usd: float = 0.0
    output: str | None = None
    error: str | None = None
    parent_run_id: str | None = None
    fork_step: int | None = None
    trace_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    remembered_step: int = 0  # the newest step whose episodes are in long-term memory
    lineage_kind: str | None = None  # a LineageKind: how it came from its parent
    batch_id: str | None = None
    # A sub-agent run: the call that started it (run, step, call index), and its tree's root.
    caller_run_id: str | None = None
    caller_step: int | None = None
    caller_call_index: int | None = None
    root_run_id: str | None = None
    output_json: Any = None  # a typed answer (its agent's output_type), parsed; `output` is its text
    priority: int | None = None  # 1 (first) to 5 (last); None: the default, 3
    waiting_key: str | None = None  # while waiting_capacity: the limiter key it waits for
    schedule_id: str | None = None  # the schedule that fired it
    start_at: datetime | None = None  # a delayed run: when it starts
    after_run_id: str | None = None  # an enqueued run: the run it waits for
    webhook: str | None = None  # where its end is posted
    # The Agent Protocol assistant it ran (a tenant's, or a catalog agent's name), and which version.
    assistant_id: str | None = None
    assistant_version: int | None = None
    # The fingerprint of the agent version it started with (None: it started before versions existed).
    agent_fingerprint: str | None = None
    # The model it calls now (`model` is the one it started on: they differ after a failover), and
    # every model it has been on, in order of first use; a row that never failed over stores neither.
    current_model: str = ""  # stored null before a failover: the row reads `model`
    models_used: list[str] = field(default_factory=list)
    # Never stored: its place in that key's line (1: next), when a read asked the limiter.
    waiting_position: int | None = None
    # Never stored: why its workflow task keeps failing, when a read asked Temporal (`Waypoint.with_stuck`).
    stuck: str | None = None

    def __post_init__(self) -> None:
        # Never failed over: on the model it started on, the only one it used.
        if not self.current_model:
            object.__setattr__(self, "current_model", self.model)
        if not self.models_used:
            object.__setattr__(self, "models_used", [self.model] if self.model else [])

    @property
    def failed_over(self) -> bool:
        """Whether it has been on another model than the one it started on."""
        return len(self.models_used) > 1

    @property
    def shown_status(self) -> str:
        """The status to show: `stuck` while the run cannot make progress, else the stored one."""
        return STUCK if self.stuck else self.status

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> RunRow:
        return row_of(cls, row, cost_usd=lambda v: float(v or 0))

    def result(self) -> RunResult:
        """The row as the run's result."""
        return RunResult(
            run_id=self.run_id,
            status=RunStatus(self.status),
            steps=self.steps,
            output=self.output,
            error=self.error,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost_usd,
            output_json=self.output_json,
        )


@dataclass(frozen=True)
class StepLine:
    """One line of a run's history (the `run_steps` view)."""

    step: int
    at: datetime
    action: str  # "tools" or "answer"
    tools: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_ms: int = 0
    tools_ms: int = 0  # the step's tool calls' durations added up (parallel calls each count)
    duration_ms: int | None = None
    model_retries: int = 0
    tool_errors: int = 0
    answer: str | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # From the first tool call's start to the last one's end (`reads.tool_spans`); None: not timed.
    tools_wall_ms: int | None = None


@dataclass(frozen=True)
class EventRow:
    """One entry of the append-only log."""

    run_id: str
    seq: int
    step: int
    kind: str  # an EventKind
    payload: dict[str, Any]
    attempt: int
    created_at: datetime
    prev_hash: str | None
    hash: str

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> EventRow:
        return row_of(cls, row)


@dataclass(frozen=True)
class AgentCall:
    """One sub-agent call (call `call_index` of `step` of `caller_run_id`, naming `agent`): the child
    run it started, how that ended and what its tree used, and the answer the caller's ledger holds.
    `child_run_id` is None when no child ran: a rerun answered the call from its source's record
    (`recorded_from`, the source's child), or the call was refused (a bad call, a tree too deep)."""

    step: int
    call_index: int
    agent: str
    caller_run_id: str
    child_run_id: str | None = None
    status: str | None = None  # the child's RunStatus
    steps: int = 0  # the child's own steps
    tokens: int = 0  # input + output of the child and every run below it
    cost_usd: float = 0.0
    outcome: str | None = None  # the ledger's ToolOutcome; None while the child runs
    answer: str | None = None  # the ledger's output: what the caller's model read
    recorded_from: str | None = None


@dataclass(frozen=True)
class CompactionRow:
    """One row of `compactions`, as listings show it (the summary cut to its first 200 characters)."""

    id: int
    run_id: str
    first_seq: int
    last_seq: int
    first_step: int
    last_step: int
    tokens_before: int
    tokens_after: int
    method: str
    model: str | None
    fallback_reason: str | None
    pinned: int
    pruned: int
    summary: str
    created_at: datetime


@dataclass(frozen=True)
class ApiKeyRow:
    """One API key as listings show it (never the key itself: only its first characters)."""

    id: int
    prefix: str
    tenant_id: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None = None
    role: Role = Role.ADMIN  # what the key may do (waypoint.access); keys made before roles are admin

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> ApiKeyRow:
        return row_of(cls, row, role=Role)


@dataclass(frozen=True)
class ThreadRun:
    """One run of a thread, in order; `run` is None while its row is not written yet.
    `multitask_strategy`: what the run was created with on a busy thread (None: reject, the default)."""

    position: int
    run_id: str
    run: RunRow | None
    multitask_strategy: str | None = None


@dataclass(frozen=True)
class ThreadRow:
    """An Agent Protocol thread: a conversation, as the chain of runs it holds."""

    thread_id: str
    tenant_id: str
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    runs: list[ThreadRun] = field(default_factory=list)

    @property
    def last(self) -> ThreadRun | None:
        return self.runs[-1] if self.runs else None


@dataclass(frozen=True)
class AssistantRow:
    """An Agent Protocol assistant at one version: an agent of the catalog (`graph_id`) with config
    and context for its runs. A catalog agent is an assistant too (`builtin`: version 1, read-only)."""

    assistant_id: str
    graph_id: str
    name: str
    version: int
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    tenant_id: str | None = None  # None: a catalog agent, everyone's
    created_at: datetime | None = None
    updated_at: datetime | None = None
    builtin: bool = False


@dataclass(frozen=True)
class ScheduledRunRef:
    """A run a schedule fired, as its row says now."""

    run_id: str
    status: str  # a RunStatus
    started_at: datetime | None


@dataclass(frozen=True)
class ScheduleRow:
    """A scheduled agent: its row in `schedules` (the tenant's record, which scopes it) and, when
    read through the client, what Temporal's Schedule says now (paused, note, next fire times) and
    the last runs it fired (newest first).

    `spec`: every (seconds) or cron (text) with tz, overlap (a ScheduleOverlap), catchup and
    jitter (seconds), end_at (ISO 8601 or None), and what each fired run gets: model, max_steps,
    priority, webhook."""

    schedule_id: str
    tenant_id: str
    agent: str
    task: str
    thread_id: str | None
    spec: dict[str, Any]
    created_at: datetime
    paused: bool = False
    note: str | None = None
    next_runs: list[datetime] = field(default_factory=list)
    recent: list[ScheduledRunRef] = field(default_factory=list)
    updated_at: datetime | None = None


@dataclass(frozen=True)
class BatchItem:
    """One rerun of a batch: the run it reran, the rerun, and how they compare."""

    source_run_id: str
    run_id: str | None  # None when the rerun could not start (`error` says why)
    status: str | None = None
    diverged: bool = False
    first_divergence: int | None = None
    steps_delta: int = 0
    tokens_delta: int = 0  # input + output, rerun - source
    cost_delta_usd: float = 0.0
    not_recorded: int = 0
    error: str | None = None


@dataclass(frozen=True)
class BatchReport:
    """A batch of reruns (`waypoint rerun --select ...`): each run, and the summary over them."""

    batch_id: str
    items: list[BatchItem]

    def _done(self) -> list[BatchItem]:
        return [i for i in self.items if i.run_id is not None]

    @property
    def runs(self) -> int:
        return len(self.items)

    @property
    def diverged_pct(self) -> float:
        return percent(sum(i.diverged for i in self._done()), len(self._done()))

    @property
    def completed_pct(self) -> float:
        return percent(sum(i.status == "completed" for i in self._done()), len(self._done()))

    @property
    def tokens_delta(self) -> tuple[float, float]:
        """(p50, p95) of the token deltas."""
        return quantiles([i.tokens_delta for i in self._done()])

    @property
    def cost_delta_usd(self) -> tuple[float, float]:
        return quantiles([i.cost_delta_usd for i in self._done()])


def percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 0.0


def quantiles(values: list[int] | list[float]) -> tuple[float, float]:
    """(p50, p95), nearest rank; (0, 0) for none."""
    if not values:
        return 0.0, 0.0
    ordered = sorted(values)

    def rank(q: float) -> float:
        return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])

    return rank(0.5), rank(0.95)


@dataclass(frozen=True)
class KeyHealth:
    """One model key (or tenant key) as the shared limiter holds it now."""

    key: str
    cooldown_until: datetime | None
    cooldown_reason: str | None
    failures: int
    breaker_open_until: datetime | None
    last_failure_at: datetime | None
    requests: int
    throttled: int
    in_flight: int = 0
    waiting: int = 0


@dataclass(frozen=True)
class LimitsReport:
    """The fleet limits this process read (`source`: the limits file) and every key the shared
    limiter knows, with its calls in flight and waiting, cooldown and breaker."""

    source: str | None
    models: dict[str, dict[str, Any]]
    tenants: dict[str, dict[str, Any]]
    breaker: dict[str, Any]
    keys: list[KeyHealth]
    # The tenant's daily budget today (UTC): used, reserved by calls in flight, runs waiting; None
    # without a daily budget (or before its first call of the day).
    today: dict[str, Any] | None = None


@dataclass(frozen=True)
class WebhookAttempt:
    """One attempt to post a finished run to its webhook (`webhook_attempts`)."""

    run_id: str
    attempt: int  # Temporal's attempt number, from 1
    url: str
    at: datetime
    status_code: int | None = None  # the receiver's answer; None when there was none
    error: str | None = None  # why it was not delivered
    duration_ms: int = 0
    delivered: bool = False
    delivery_id: str | None = None  # the delivery it was an attempt of (none for runs from before 0021)

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> WebhookAttempt:
        return row_of(cls, row)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "at": self.at.isoformat()}


@dataclass(frozen=True)
class WebhookDelivery:
    """One webhook delivery (`webhook_deliveries`): an event to a URL, retried until delivered or
    its window ends; `failed` ones are the dead-letter list (`DeliveryStatus`)."""

    delivery_id: str
    run_id: str
    event: str
    url: str
    status: str
    attempts: int
    created_at: datetime
    updated_at: datetime
    last_status_code: int | None = None  # the last attempt's HTTP status; None when it got no answer
    last_error: str | None = None  # why the last attempt did not deliver (or why it was given up)
    next_attempt_at: datetime | None = None  # while pending: when the next attempt is due
    window_ends_at: datetime | None = None  # no attempt after this (set once its workflow opened it)
    redelivery_of: str | None = None  # the delivery this one sends again
    ended_at: datetime | None = None  # when it was delivered or given up

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> WebhookDelivery:
        return row_of(cls, row)
