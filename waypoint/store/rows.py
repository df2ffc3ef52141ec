"""The rows several of the store's families share (a run, an event, a sub-agent call, a batch of
reruns), and `row_of`, which every family builds its rows with. A row one family alone produces
lives beside the statements that produce it: a step line in `reads`, a step's state, a diff and
lineage links in `travel`, a comparison's in `compare`, `verify`'s verdict in `integrity`, a key in
`keys`, threads in `threads`, schedules in `schedules`, assistants in `assistants`, webhook
deliveries in `webhooks`, the limiter's report in `limits`, a compaction in `compactions`.

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
