"""An experiment's report, two experiments compared, and the gates CI holds them to."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from waypoint.errors import InvalidInput
from waypoint.evals.stats import CaseDelta, CaseScores, ScorerDelta, Summary
from waypoint.names import CaseStatus, ExperimentStatus
from waypoint.store.evals import CaseResult, ExperimentRow


def new_experiment_id() -> str:
    return f"exp-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class ExperimentReport:
    """An experiment, its table (`summary`) and each case's result."""

    experiment: ExperimentRow
    summary: Summary
    results: list[CaseResult]

    @property
    def finished(self) -> bool:
        return self.experiment.status != ExperimentStatus.RUNNING


@dataclass(frozen=True)
class ExperimentComparison:
    """B against A: per scorer, wins/losses/ties and whether the difference is significant; per case."""

    a: ExperimentRow
    b: ExperimentRow
    scorers: list[ScorerDelta]
    cases: list[CaseDelta]
    case_ids: dict[int, str] = field(default_factory=dict)
    # Each side's results (its runs, their outputs' start), to read a case's two answers side by side.
    results_a: list[CaseResult] = field(default_factory=list)
    results_b: list[CaseResult] = field(default_factory=list)

    def runs_of(self, index: int) -> tuple[list[CaseResult], list[CaseResult]]:
        """Case `index`'s results in A and in B (one per repetition)."""
        return [r for r in self.results_a if r.index == index], [r for r in self.results_b if r.index == index]

    def source_of(self, index: int) -> str | None:
        """The run case `index` was made from, for a dataset made of runs."""
        return next((r.source_run_id for r in [*self.results_a, *self.results_b] if r.index == index), None)


@dataclass(frozen=True)
class GateFailure:
    scorer: str
    value: float | None
    threshold: float

    def __str__(self) -> str:
        shown = "no score" if self.value is None else f"{self.value:.3f}"
        return f"{self.scorer} is {shown}, under {self.threshold:g}"


def parse_gates(texts: Iterable[str]) -> dict[str, float]:
    """`--fail-under scorer=0.9` words -> {label: threshold}."""
    gates: dict[str, float] = {}
    for text in texts:
        label, sep, value = text.partition("=")
        try:
            threshold = float(value)
        except ValueError:
            threshold = -1.0
        if not sep or not label or not 0 <= threshold <= 1:
            raise InvalidInput(f"cannot read --fail-under {text!r}: write SCORER=THRESHOLD, e.g. exact=0.9 (0 to 1)")
        gates[label] = threshold
    return gates


def check_gates(gates: Mapping[str, float], labels: Sequence[str]) -> None:
    """Each gate names a scorer label of the experiment (checked before an experiment starts, too)."""
    unknown = [g for g in gates if g not in labels]
    if unknown:
        raise InvalidInput(f"--fail-under names {', '.join(unknown)}, which this experiment has no scorer of: {labels}")


def gate(report: ExperimentReport, gates: Mapping[str, float]) -> list[GateFailure]:
    """The gates the experiment fails. A gate holds a scorer's mean over every case that ended, an
    errored case counting 0 (CI must not pass because the cases that could fail errored instead)."""
    check_gates(gates, report.experiment.labels)
    failures = []
    for label, threshold in gates.items():
        values = []
        for r in report.results:
            if r.status == CaseStatus.ERRORED:
                values.append(0.0)
            elif (v := (r.scores.get(label) or {}).get("value")) is not None:
                values.append(float(v))
        mean = sum(values) / len(values) if values else None
        if mean is None or mean < threshold:
            failures.append(GateFailure(label, mean, threshold))
    return failures


def case_scores(results: Sequence[CaseResult]) -> list[CaseScores]:
    return [
        CaseScores(
            index=r.index,
            repetition=r.repetition,
            errored=r.status == CaseStatus.ERRORED,
            values={k: s.get("value") for k, s in r.scores.items()},
            passed={k: s.get("passed") for k, s in r.scores.items()},
            cost_usd=r.cost_usd,
            tokens=r.tokens,
            latency_ms=r.latency_ms,
        )
        for r in results
    ]
