"""The experiment workflow's inputs and results (frozen dataclasses; standard library only, since
workflow code imports them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ScorerSpec:
    """One scorer of an experiment: a built-in's name or an `@scorer` function's, its arguments
    (`threshold`, a built-in's own), and the label its scores are kept under (default: the name)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    @property
    def key(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class ExperimentInput:
    """Input of ExperimentWorkflow (its workflow id is the experiment id). Everything else (the
    dataset, agent, model, scorers) is in the experiment's row: the workflow carries a reference."""

    experiment_id: str
    tenant_id: str
    concurrency: int = 4
    # The labels of the experiment's judge scorers: one `judge_case` activity each per case.
    judges: list[str] = field(default_factory=list)
    # Continue-as-new state: the runs of cases that ended (and errored) in the runs of the workflow
    # before this one, so its result counts the whole experiment.
    ended: int = 0
    errored: int = 0


@dataclass(frozen=True)
class CaseRef:
    """One run of one case: case `index`'s `repetition`-th. `run_id` is set when the case is scored
    on a run that exists already (a rescoring), so no run starts."""

    index: int
    repetition: int
    run_id: str | None = None


@dataclass(frozen=True)
class PlanInput:
    experiment_id: str
    tenant_id: str
    # The next page starts after this (index, repetition); None: from the start.
    after: tuple[int, int] | None = None
    limit: int = 200


@dataclass(frozen=True)
class ExperimentPlan:
    """The next page of cases still to run (those with a result already are left out)."""

    cases: list[CaseRef]
    more: bool = False


@dataclass(frozen=True)
class CaseInput:
    """One case of one experiment: what `experiment_case`, `judge_case` and `score_case` take."""

    experiment_id: str
    tenant_id: str
    index: int
    repetition: int
    run_id: str | None = None
    judge: str | None = None  # judge_case: the label of the judge scorer
    error: str | None = None  # score_case: why the case cannot be scored (it is recorded errored)


@dataclass(frozen=True)
class CaseOutcome:
    """What `score_case` recorded for a case (its scores, by scorer label; None: the scorer skipped it)."""

    index: int
    repetition: int
    run_id: str | None
    errored: bool = False
    error: str | None = None
    scores: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FinishInput:
    experiment_id: str
    tenant_id: str
    status: str  # an ExperimentStatus
    error: str | None = None


@dataclass(frozen=True)
class ExperimentResult:
    experiment_id: str
    status: str  # an ExperimentStatus
    cases: int = 0  # runs of cases that ended (scored or errored) in this experiment
    errored: int = 0
