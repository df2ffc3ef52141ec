"""Messages of compaction: activity inputs and results, the workflow's input and report.

Plain dataclasses with JSON-friendly fields, importable inside the workflow sandbox
(no IO, no third-party imports). Their activity names are in `waypoint.names`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from waypoint.names import EpisodeKind


@dataclass(frozen=True)
class CompactRunInput:
    """Compact the run's history after its newest compaction, up to `upto_seq` (default: the newest
    event when the activity starts), leaving the newest `keep_steps` steps (default: the setting)
    outside the range. `model` overrides the run's model for the summary."""

    run_id: str
    tenant_id: str
    upto_seq: int | None = None
    model: str | None = None
    keep_steps: int | None = None


@dataclass(frozen=True)
class CompactionSummary:
    """Result of `compact_run`. `created` is false when there was nothing to compact or the same
    range was compacted before; `error` is set (and nothing written) when the run could not be
    compacted. `summary` and `agent` feed the summary episode."""

    run_id: str
    compaction_id: int | None
    first_seq: int
    last_seq: int
    tokens_before: int
    tokens_after: int
    created: bool
    error: str | None = None
    method: str = ""
    agent: str = ""
    tenant_id: str = ""
    last_step: int = 0
    summary: str = ""


@dataclass(frozen=True)
class SelectRunsInput:
    threshold_tokens: int
    limit: int
    tenant_id: str | None = None  # None: every tenant (the scheduled pass)
    run_id: str | None = None  # just this run, whatever its size (`waypoint compact RUN`)


@dataclass(frozen=True)
class RunRef:
    run_id: str
    tenant_id: str
    tokens: int


@dataclass(frozen=True)
class CompactionInput:
    """Input of CompactionWorkflow (the Schedule's action, or `waypoint compact [RUN]`)."""

    threshold_tokens: int = 8_000
    concurrency: int = 4
    max_runs: int = 100
    tenant_id: str | None = None
    run_id: str | None = None
    keep_steps: int | None = None
    memory_timeout_seconds: float = 10.0


@dataclass(frozen=True)
class RememberInput:
    """Store the episodes of finished runs' steps that memory missed (at most `limit` runs)."""

    tenant_id: str | None = None  # None: every tenant (the scheduled pass)
    limit: int = 100


@dataclass(frozen=True)
class CompactionReport:
    selected: int
    results: list[CompactionSummary] = field(default_factory=list)
    episodes_saved: int = 0
    memory_error: str | None = None
    # Steps of finished runs whose episodes memory had missed, stored by this pass.
    steps_remembered: int = 0

    @property
    def failed(self) -> list[CompactionSummary]:
        return [r for r in self.results if r.error]


SUMMARY_IMPORTANCE = 0.8


def summary_episode(done: CompactionSummary) -> dict[str, object]:
    """The `save_episodes` item that carries a new compaction's summary into episodic memory."""
    return {
        "tenant": done.tenant_id,
        "agent": done.agent,
        "run_id": done.run_id,
        "step": done.last_step,
        "kind": EpisodeKind.SUMMARY.value,
        "text": done.summary,
        "importance": SUMMARY_IMPORTANCE,
        "index": 0,
    }
