"""An experiment's activities: its plan, a case's run input, a judge's verdict, a case's scores.

`judge_case` is a model call, so a remote activity that heartbeats and is retried like one (the
model adapter's error says whether and when); its verdict is written to `eval_judgements` under a
key of the judge's model and rubric and of what it graded, and read back on a retry or a rescoring
instead of calling again. The others are short Postgres reads and idempotent writes (local
activities). A scorer that raises is not a failure of `score_case`: the case is recorded errored
with the message and the experiment goes on.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from temporalio import activity

from waypoint import telemetry
from waypoint.activities.boundary import boundary, gives_up, heartbeating
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.errors import InvalidInput, MalformedAnswer, NotFound
from waypoint.evals.cases import EvalCase, EvalRun
from waypoint.evals.scorers import Score, judge_messages, no_answer, parse_verdict, score_case
from waypoint.evals.types import CaseInput, CaseOutcome, ExperimentPlan, FinishInput, PlanInput, ScorerSpec
from waypoint.models import ModelAdapter
from waypoint.names import Activity, BuiltinScorer, CaseStatus, ExperimentStatus, LineageKind, MemoryView, ToolMode
from waypoint.pricing import cost_usd
from waypoint.retry import EXPERIMENT_ATTEMPTS, JUDGE_SPEC
from waypoint.store import RunStore
from waypoint.store.evals import CaseResult, ExperimentRow, Judgement
from waypoint.types import ForkOrigin, RunInput

log = logging.getLogger("waypoint.evals")
EXPERIMENTS_CACHED = 64  # experiment rows a worker keeps (the oldest read leaves first)

# The model adapter of (agent, model spec): ModelActivities.adapter, with the SDK clients it keeps.
AdapterFactory = Callable[[str, str], ModelAdapter]


def judge_key(spec: ScorerSpec, case: EvalCase, run: EvalRun) -> str:
    """What a verdict is recorded under: the judge's model and rubric and what it graded."""
    graded = [spec.args.get("model"), spec.args.get("rubric"), case.task, case.expected_output, run.output]
    return hashlib.sha256(json.dumps(graded, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def run_input_of(exp: ExperimentRow, case: EvalCase) -> RunInput:
    """The run a case gets: a rerun of its source run from step 0 (recorded or live tools), or a
    fresh run of its task; with the experiment's model and instructions, tagged with its id."""
    run = RunInput(
        agent=exp.agent,
        task=case.task,
        tenant_id=exp.tenant_id,
        model=exp.model,
        pin_model=exp.model is not None,
        priority=exp.priority,
        instructions=exp.instructions,
        batch_id=exp.experiment_id,
    )
    if case.source_run_id is None:
        if exp.recorded_tools:
            raise InvalidInput(
                f"case {case.case_id!r} has no recorded run, so its tools cannot be answered from a record: "
                "evaluate without --recorded-tools, or make the dataset --from-runs"
            )
        return run
    # A rerun carries its instructions and batch in its origin, as `waypoint rerun` does.
    fork = ForkOrigin(
        run_id=case.source_run_id,
        step=0,
        kind=LineageKind.RERUN,
        tools=ToolMode.RECORDED if exp.recorded_tools else ToolMode.LIVE,
        batch_id=exp.experiment_id,
        instructions=exp.instructions,
        memory=MemoryView.THEN,
    )
    return replace(run, fork=fork, instructions=None, batch_id=None)


class EvalActivities:
    def __init__(self, store: RunStore, agents: AgentRegistry, settings: Settings, adapter: AdapterFactory):
        self.store = store
        self.agents = agents
        self.settings = settings
        self.adapter = adapter
        # What an experiment runs and how it is scored never changes once it is made: read once per
        # worker, not at each of its cases' steps (only its status and counts move, unread here).
        self._experiments: dict[tuple[str, str], ExperimentRow] = {}

    async def experiment(self, tenant_id: str, experiment_id: str) -> ExperimentRow:
        key = (tenant_id, experiment_id)
        if key not in self._experiments:
            if len(self._experiments) >= EXPERIMENTS_CACHED:
                self._experiments.pop(next(iter(self._experiments)))
            self._experiments[key] = await self.store.evals.get_experiment(tenant_id, experiment_id)
        return self._experiments[key]

    @activity.defn(name=Activity.EXPERIMENT_PLAN)
    @boundary
    @gives_up(EXPERIMENT_ATTEMPTS)
    async def experiment_plan(self, inp: PlanInput) -> ExperimentPlan:
        cases, more = await self.store.evals.experiment_plan(inp.tenant_id, inp.experiment_id, inp.after, inp.limit)
        return ExperimentPlan(cases, more)

    @activity.defn(name=Activity.EXPERIMENT_CASE)
    @boundary
    @gives_up(EXPERIMENT_ATTEMPTS)
    async def experiment_case(self, inp: CaseInput) -> RunInput:
        exp = await self.experiment(inp.tenant_id, inp.experiment_id)
        case = await self.store.evals.dataset_case(inp.tenant_id, exp.dataset, exp.dataset_version, inp.index)
        if case.source_run_id is not None and not await self.store.evals.existing_runs(
            inp.tenant_id, [case.source_run_id]
        ):
            raise NotFound(f"case {case.case_id!r}'s recorded run {case.source_run_id} was deleted")
        return run_input_of(exp, case)

    @activity.defn(name=Activity.JUDGE_CASE)
    @boundary
    async def judge_case(self, inp: CaseInput) -> float:
        exp = await self.experiment(inp.tenant_id, inp.experiment_id)
        spec = next(s for s in exp.scorers if s.key == inp.judge)
        if inp.run_id is None:
            raise InvalidInput("a judge grades a run: this case has none")
        run = await self.store.evals.eval_run(inp.tenant_id, inp.run_id)
        case = await self.store.evals.dataset_case(inp.tenant_id, exp.dataset, exp.dataset_version, inp.index)
        key = judge_key(spec, case, run)
        telemetry.annotate(**{"experiment.id": exp.experiment_id, "experiment.case": inp.index, "judge": spec.key})
        found = await self.store.evals.recorded_judgement(inp.tenant_id, run.run_id, key)
        if found is not None:
            return found.score
        model = str(spec.args["model"])
        empty = no_answer(run)
        if empty is not None:
            verdict = Judgement(float(empty.value or 0.0), empty.reason, model)
            return (await self.store.evals.record_judgement(inp.tenant_id, run.run_id, key, verdict)).score
        adapter = self.adapter(exp.agent, model)
        attempt = activity.info().attempt
        async with heartbeating(inp.index):
            turn = await adapter.complete(
                judge_messages(str(spec.args["rubric"]), case, run), [], attempt=attempt, retry=JUDGE_SPEC
            )
        try:
            score = parse_verdict(turn.content)
        except ValueError as exc:
            raise MalformedAnswer(str(exc)) from None
        verdict = Judgement(float(score.value or 0.0), score.reason, model)
        kept = await self.store.evals.record_judgement(
            inp.tenant_id,
            run.run_id,
            key,
            verdict,
            input_tokens=turn.usage.input_tokens,
            output_tokens=turn.usage.output_tokens,
            cost_usd=cost_usd(turn.model, turn.usage, self.settings.prices),
        )
        return kept.score

    @activity.defn(name=Activity.SCORE_CASE)
    @boundary
    @gives_up(EXPERIMENT_ATTEMPTS)
    async def score_case(self, inp: CaseInput) -> CaseOutcome:
        exp = await self.experiment(inp.tenant_id, inp.experiment_id)
        telemetry.annotate(**{"experiment.id": exp.experiment_id, "experiment.case": inp.index})
        run = await self.store.evals.eval_run(inp.tenant_id, inp.run_id) if inp.run_id is not None else None
        result = CaseResult(
            experiment_id=exp.experiment_id,
            index=inp.index,
            repetition=inp.repetition,
            status=CaseStatus.SCORED,
            run_id=inp.run_id,
            run_status=run.status if run else None,
            cost_usd=run.cost_usd if run else 0.0,
            tokens=run.input_tokens + run.output_tokens if run else 0,
            latency_ms=run.latency_ms if run else None,
        )
        error = inp.error
        if error is None and run is not None:
            scores, error = await self._scores(exp, inp, run)
            result = replace(result, scores=scores)
        if error is not None:
            result = replace(result, status=CaseStatus.ERRORED, error=error[:2000])
            log.warning(
                "case %s of experiment %s errored: %s",
                inp.index,
                exp.experiment_id,
                error,
                extra={"waypoint_experiment_id": exp.experiment_id, "waypoint_case": inp.index},
            )
        kept = await self.store.evals.record_result(inp.tenant_id, result)
        return CaseOutcome(
            index=kept.index,
            repetition=kept.repetition,
            run_id=kept.run_id,
            errored=kept.status == CaseStatus.ERRORED,
            error=kept.error,
            scores={label: s.get("value") for label, s in kept.scores.items()},
        )

    async def _scores(
        self, exp: ExperimentRow, inp: CaseInput, run: EvalRun
    ) -> tuple[dict[str, dict[str, Any]], str | None]:
        """Every scorer's score of the case's run, and why one could not give it (the first that
        raised; the others' scores are still kept)."""
        case = await self.store.evals.dataset_case(inp.tenant_id, exp.dataset, exp.dataset_version, inp.index)
        judged = {}
        for spec in exp.scorers:
            if spec.name == BuiltinScorer.JUDGE:
                found = await self.store.evals.recorded_judgement(inp.tenant_id, run.run_id, judge_key(spec, case, run))
                if found is not None:
                    judged[spec.key] = Score(found.score, reason=found.reason)
        scores: dict[str, dict[str, Any]] = {}
        error = None
        for spec in exp.scorers:
            try:
                score = await score_case(spec, run, case, self.agents.scorers, judged)
            except Exception as exc:  # a scorer's own failure: the case is errored, the experiment goes on
                error = error or f"scorer {spec.key!r} raised {type(exc).__name__}: {exc}"
                continue
            scores[spec.key] = {"value": score.value, "passed": score.passed, "reason": score.reason}
        return scores, error

    @activity.defn(name=Activity.FINISH_EXPERIMENT)
    @boundary
    @gives_up(EXPERIMENT_ATTEMPTS)
    async def finish_experiment(self, inp: FinishInput) -> None:
        await self.store.evals.set_experiment_status(
            inp.tenant_id, inp.experiment_id, ExperimentStatus(inp.status), inp.error
        )
