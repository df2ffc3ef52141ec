"""Test doubles for ExperimentWorkflow: every activity it calls, registered under the same names, and
a double case run registered as AgentRunWorkflow (tests/test_experiment_workflow.py runs them in
Temporal's time-skipping environment; tests/test_workflow_logic.py checks every activity has one)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

from waypoint.evals.types import CaseInput, CaseOutcome, CaseRef, ExperimentPlan, FinishInput, PlanInput
from waypoint.names import Activity, RunStatus, Workflow
from waypoint.types import RunInput, RunResult

# What a case's task tells the double run to do: end well, fail (its parent sees a ChildWorkflowError),
# or wait until it is cancelled.
CASE_OK, CASE_FAIL, CASE_HANG = "ok", "fail", "hang"
CASE_WORK = "case_work_double"  # the double run's one activity, where runs in flight are counted
SHORT = timedelta(milliseconds=10)


@workflow.defn(name=Workflow.AGENT_RUN, sandboxed=False)
class CaseRunWorkflow:
    """A stand-in for AgentRunWorkflow under its name: a case's run, doing what its task says."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        await workflow.execute_activity(CASE_WORK, inp.task, start_to_close_timeout=timedelta(seconds=30))
        if inp.task == CASE_FAIL:
            raise ApplicationError("the case's run failed on purpose", non_retryable=True)
        if inp.task == CASE_HANG:
            await workflow.wait_condition(lambda: False)
        return RunResult(run_id=workflow.info().workflow_id, status=RunStatus.COMPLETED, steps=1, output="done")


@dataclass
class ExperimentDoubles:
    """Every activity of ExperimentWorkflow, and the double runs' one. The plan works as the store's:
    `runs` (case, repetition) in order, `page` at a time (else the workflow's limit), those scored
    left out; with `rescoring`, each with a run id, as a rescoring's plan gives its source's runs."""

    runs: list[tuple[int, int]] = field(default_factory=list)
    page: int | None = None
    rescoring: bool = False
    tasks: dict[int, str] = field(default_factory=dict)  # case index -> its run's task (CASE_OK else)
    case_error: set[int] = field(default_factory=set)  # experiment_case fails non-retryably for these
    score_error: set[int] = field(default_factory=set)  # score_case too (a bug, not a scorer's failure)
    judge_failures: int = 0  # attempts of a judge that fail (retryable) before it answers...
    judge_refuses: bool = False  # ...or, set, the attempt after them fails non-retryably
    hold: float = 0.05  # seconds of real time a double run works (runs overlap meanwhile)
    crowd: int = 0  # a double run's work first waits (up to 5 s) until this many are in flight
    # What the workflow asked for, in order.
    plans: list[PlanInput] = field(default_factory=list)
    busy_at_plan: list[int] = field(default_factory=list)  # runs in flight when each plan was asked
    made: list[CaseInput] = field(default_factory=list)
    judged: list[CaseInput] = field(default_factory=list)
    scored: list[CaseInput] = field(default_factory=list)
    finished: list[FinishInput] = field(default_factory=list)
    worked: list[str] = field(default_factory=list)  # the double runs' ids, as each began its work
    in_flight: int = 0
    most_in_flight: int = 0

    def done(self) -> set[tuple[int, int]]:
        return {(s.index, s.repetition) for s in self.scored}

    @activity.defn(name=Activity.EXPERIMENT_PLAN)
    async def experiment_plan(self, inp: PlanInput) -> ExperimentPlan:
        self.plans.append(inp)
        self.busy_at_plan.append(len(self.worked) - len([s for s in self.scored if s.run_id in self.worked]))
        after = tuple(inp.after) if inp.after is not None else None
        todo = [r for r in self.runs if r not in self.done() and (after is None or r > after)]
        limit = min(inp.limit, self.page or inp.limit)
        refs = [CaseRef(i, k, f"run-{i}-{k}" if self.rescoring else None) for i, k in todo[:limit]]
        return ExperimentPlan(refs, more=len(todo) > limit)

    @activity.defn(name=Activity.EXPERIMENT_CASE)
    async def experiment_case(self, inp: CaseInput) -> RunInput:
        self.made.append(inp)
        if inp.index in self.case_error:
            raise ApplicationError(f"case {inp.index} has no task", type="NotFound", non_retryable=True)
        task = self.tasks.get(inp.index, CASE_OK)
        return RunInput(agent="double", task=task, tenant_id=inp.tenant_id, batch_id=inp.experiment_id)

    @activity.defn(name=Activity.JUDGE_CASE)
    async def judge_case(self, inp: CaseInput) -> float:
        self.judged.append(inp)
        if activity.info().attempt <= self.judge_failures:
            # a short delay of its own: the attempts, not the policy's backoff, are what tests count
            raise ApplicationError("the judge answered HTTP 503", type="ModelUnavailable", next_retry_delay=SHORT)
        if self.judge_refuses:
            raise ApplicationError("the judge answered HTTP 400", type="ModelRequestRejected", non_retryable=True)
        return 0.8

    @activity.defn(name=Activity.SCORE_CASE)
    async def score_case(self, inp: CaseInput) -> CaseOutcome:
        if inp.index in self.score_error:
            raise ApplicationError("the results table is gone", type="InvalidInput", non_retryable=True)
        if (inp.index, inp.repetition) not in self.done():  # written once, as the store does
            self.scored.append(inp)
        return CaseOutcome(inp.index, inp.repetition, inp.run_id, errored=inp.error is not None, error=inp.error)

    @activity.defn(name=Activity.FINISH_EXPERIMENT)
    async def finish_experiment(self, inp: FinishInput) -> None:
        self.finished.append(inp)

    @activity.defn(name=CASE_WORK)
    async def case_work(self, task: str) -> None:
        self.worked.append(activity.info().workflow_id or "")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _ in range(250):
                if self.in_flight >= self.crowd:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(self.hold)
        finally:
            self.in_flight -= 1

    def activities(self) -> list[Callable[..., Any]]:
        return [
            self.experiment_plan,
            self.experiment_case,
            self.judge_case,
            self.score_case,
            self.finish_experiment,
            self.case_work,
        ]

    def scored_as(self, index: int, repetition: int = 0) -> CaseInput:
        return next(s for s in self.scored if (s.index, s.repetition) == (index, repetition))
