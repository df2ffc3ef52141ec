"""`wp.evals`: datasets, experiments and their reports, tenant-scoped and validated here for every
surface (CLI `waypoint dataset` and `waypoint eval`, HTTP `/v1/datasets` and `/v1/experiments`, the
viewer's experiments pages, MCP).

    ds = await wp.evals.create_dataset("notes", select="agent=demo status=completed")
    exp = await wp.evals.start_experiment("notes", agent="demo", recorded_tools=True, scorers=["exact"])
    report = await wp.evals.wait(exp.experiment_id)
    print(report.summary.scorers[0].mean)

An experiment is a row in Postgres (what it runs and how it is scored) and a Temporal workflow of
the same id that runs each case as a child run and writes each case's result; the report is read
from Postgres, so it can be read while the experiment runs, after its worker died, or years later.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from waypoint.access import Action, Target, TargetKind
from waypoint.checks import (
    check_count,
    check_instructions,
    check_name,
    check_priority,
)
from waypoint.client._catalog import Catalog
from waypoint.client._datasets import RUN_IDS_MAX, Datasets
from waypoint.client._eval_reports import (
    ExperimentComparison,
    ExperimentReport,
    GateFailure,
    case_scores,
    check_gates,
    gate,
    new_experiment_id,
    parse_gates,
)
from waypoint.client._scope import Scope, TemporalLink
from waypoint.errors import Conflict, InvalidInput
from waypoint.evals.cases import check_dataset_name
from waypoint.evals.scorers import DEFAULT_SCORERS, check_scorers, parse_scorer
from waypoint.evals.stats import compare, summarize
from waypoint.evals.types import ExperimentInput, ScorerSpec
from waypoint.names import BuiltinScorer, ExperimentStatus
from waypoint.store import RunStore
from waypoint.store.evals import ExperimentRow

REPEAT_MAX = 10
CONCURRENCY_MAX = 100
POLL_SECONDS = 0.5


def eval_target(experiment_id: str | None) -> Target | None:
    return Target(TargetKind.EVAL, experiment_id) if experiment_id is not None else None


class Evals(Datasets):
    """Datasets (see `Datasets`), and experiments that run and score them."""

    def __init__(self, store: RunStore, temporal: TemporalLink, scope: Scope, catalog: Catalog):
        super().__init__(store, scope)
        self._temporal = temporal
        self._catalog = catalog

    async def scorer_names(self) -> dict[str, str]:
        """Every scorer an experiment can use: the built-ins, then the workers' `@scorer`s."""
        custom = await self._store.evals.scorer_names(self._scope.settings.task_queue)
        return {**{s.value: "built in" for s in BuiltinScorer}, **custom}

    async def check_scorers(self, scorers: Sequence[str | ScorerSpec]) -> list[ScorerSpec]:
        specs = [s if isinstance(s, ScorerSpec) else parse_scorer(s) for s in scorers]
        return check_scorers(specs, await self._store.evals.scorer_names(self._scope.settings.task_queue))

    async def start_experiment(
        self,
        dataset: str,
        *,
        agent: str,
        model: str | None = None,
        instructions: str | None = None,
        recorded_tools: bool = False,
        repeat: int = 1,
        concurrency: int = 4,
        scorers: Sequence[str | ScorerSpec] = DEFAULT_SCORERS,
        version: int | None = None,
        priority: int | None = None,
        tenant_id: str | None = None,
        experiment_id: str | None = None,
    ) -> ExperimentRow:
        """Run every case of a dataset version (the newest unless `version`) `repeat` times as a durable
        run of `agent` (with `model` and `instructions` in place of its own), `concurrency` at a time,
        and score each; answers at once with the experiment (`wait` follows it). A case made from a
        run is a rerun of that run from step 0; `recorded_tools` answers its tool calls from the
        record (the dataset must then be made from runs)."""
        async with self._scope.act(Action.EVALUATE, tenant_id, eval_target(experiment_id)) as tenant_id:
            check_count("the repeat count", repeat, high=REPEAT_MAX)
            check_count("the concurrency", concurrency, high=CONCURRENCY_MAX)
            check_instructions(instructions)
            check_name("the agent", agent)
            check_name("the model", model)
            check_priority(priority)
            found = await self.dataset(dataset, version=version, tenant_id=tenant_id)
            tenant = found.tenant_id
            checked = await self.check_scorers(scorers)
            await self._catalog.check_start(agent, model)
            cases = await self._store.evals.dataset_cases(tenant, found.name, found.version)
            if not cases:
                raise InvalidInput(f"dataset {found.name!r} version {found.version} is empty: add cases to it")
            if recorded_tools:
                live = next((c for c in cases if c.source_run_id is None), None)
                if live is not None:
                    raise InvalidInput(
                        f"case {live.case_id!r} of dataset {found.name!r} has no recorded run, so --recorded-tools "
                        "cannot answer its tools: drop --recorded-tools, or make the dataset --from-runs"
                    )
            row = ExperimentRow(
                experiment_id=experiment_id or new_experiment_id(),
                tenant_id=tenant,
                dataset=found.name,
                dataset_version=found.version,
                agent=agent,
                model=model,
                instructions=instructions,
                recorded_tools=recorded_tools,
                repeat=repeat,
                concurrency=concurrency,
                scorers=checked,
                status=ExperimentStatus.RUNNING,
                cases_total=len(cases) * repeat,
                priority=priority,
            )
            return await self._launch(row)

    async def rescore(
        self, experiment_id: str, *, scorers: Sequence[str | ScorerSpec], tenant_id: str | None = None
    ) -> ExperimentRow:
        """A new experiment that scores the runs of `experiment_id` again with `scorers` (no run starts;
        a judge's recorded verdict on the same run, model and rubric is reused, not asked again)."""
        async with self._scope.act(Action.EVALUATE, tenant_id, eval_target(experiment_id)) as tenant_id:
            source = await self.experiment(experiment_id, tenant_id=tenant_id)
            if source.status == ExperimentStatus.RUNNING:
                raise Conflict(f"experiment {experiment_id} is still running: rescore it once it ends")
            checked = await self.check_scorers(scorers)
            scored = await self._store.evals.experiment_results(source.tenant_id, experiment_id)
            row = ExperimentRow(
                experiment_id=new_experiment_id(),
                tenant_id=source.tenant_id,
                dataset=source.dataset,
                dataset_version=source.dataset_version,
                agent=source.agent,
                model=source.model,
                instructions=source.instructions,
                recorded_tools=source.recorded_tools,
                repeat=source.repeat,
                concurrency=max(source.concurrency, 8),
                scorers=checked,
                status=ExperimentStatus.RUNNING,
                cases_total=sum(1 for r in scored if r.run_id),
                rescored_from=experiment_id,
                priority=source.priority,
            )
            return await self._launch(row)

    async def _launch(self, row: ExperimentRow) -> ExperimentRow:
        created = await self._store.evals.create_experiment(row)
        inp = ExperimentInput(
            experiment_id=row.experiment_id,
            tenant_id=row.tenant_id,
            concurrency=row.concurrency,
            judges=[s.key for s in row.scorers if s.name == BuiltinScorer.JUDGE],
        )
        try:
            gateway = await self._temporal()
            # The experiment's trace: its workflow, every case run (child workflows inherit the
            # context), the judges' calls. A case run's row carries this trace id.
            with self._traced(gateway.traced, row):
                await gateway.start_experiment(inp, row.priority)
        except BaseException as exc:
            await self._store.evals.set_experiment_status(
                row.tenant_id, row.experiment_id, ExperimentStatus.FAILED, str(exc)
            )
            raise
        return created

    @contextlib.contextmanager
    def _traced(self, traced: bool, row: ExperimentRow) -> Iterator[None]:
        if not traced:
            yield
            return
        from waypoint import telemetry  # only starts need it: reads stay fast

        attributes: dict[str, Any] = {
            "experiment.id": row.experiment_id,
            "experiment.dataset": f"{row.dataset}@{row.dataset_version}",
            "experiment.cases": row.cases_total,
        }
        with telemetry.span("start_experiment", tenant=row.tenant_id, agent=row.agent, **attributes):
            yield

    async def experiment(self, experiment_id: str, *, tenant_id: str | None = None) -> ExperimentRow:
        check_name("the experiment id", experiment_id)
        return await self._store.evals.get_experiment(self._scope.tenant(tenant_id), experiment_id)

    async def experiments(
        self, *, dataset: str | None = None, limit: int = 50, tenant_id: str | None = None
    ) -> list[ExperimentRow]:
        check_count("the limit", limit, high=1000)
        if dataset is not None:
            check_dataset_name(dataset)
        return await self._store.evals.list_experiments(self._scope.tenant(tenant_id), dataset=dataset, limit=limit)

    async def means(self, experiments: Sequence[ExperimentRow]) -> dict[str, dict[str, float | None]]:
        """Each listed experiment's mean per scorer (in its scorers' order; None: nothing scored yet)."""
        if not experiments:
            return {}
        found = await self._store.evals.experiment_means(
            experiments[0].tenant_id, [e.experiment_id for e in experiments]
        )
        return {e.experiment_id: {label: found[e.experiment_id].get(label) for label in e.labels} for e in experiments}

    async def report(self, experiment_id: str, *, tenant_id: str | None = None) -> ExperimentReport:
        """The experiment's table and its cases' results, as far as it got."""
        exp = await self.experiment(experiment_id, tenant_id=tenant_id)
        results = await self._store.evals.experiment_results(exp.tenant_id, experiment_id)
        return ExperimentReport(exp, summarize(exp.labels, case_scores(results)), results)

    async def wait(
        self,
        experiment_id: str,
        *,
        on_progress: Callable[[ExperimentRow], None] | None = None,
        timeout: float | None = None,
        tenant_id: str | None = None,
    ) -> ExperimentReport:
        """Follow the experiment until it ends (`on_progress` gets its row at each change), then its report."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        seen = -1
        while True:
            exp = await self.experiment(experiment_id, tenant_id=tenant_id)
            if on_progress is not None and exp.done != seen:
                on_progress(exp)
                seen = exp.done
            if exp.status != ExperimentStatus.RUNNING:
                return await self.report(experiment_id, tenant_id=tenant_id)
            if deadline is not None and loop.time() > deadline:
                raise TimeoutError(f"experiment {experiment_id} is still running ({exp.done}/{exp.cases_total})")
            await asyncio.sleep(POLL_SECONDS)

    async def cancel(self, experiment_id: str, *, tenant_id: str | None = None) -> ExperimentRow:
        async with self._scope.act(Action.EVALUATE, tenant_id, eval_target(experiment_id)) as tenant_id:
            exp = await self.experiment(experiment_id, tenant_id=tenant_id)
            if exp.status != ExperimentStatus.RUNNING:
                raise Conflict(f"experiment {experiment_id} is {exp.status} already")
            gateway = await self._temporal()
            await gateway.cancel_experiment(experiment_id)
            return exp

    async def compare(
        self, experiment_a: str, experiment_b: str, *, tenant_id: str | None = None
    ) -> ExperimentComparison:
        """B against A on the cases both scored, per scorer both have (by label)."""
        a = await self.report(experiment_a, tenant_id=tenant_id)
        b = await self.report(experiment_b, tenant_id=tenant_id)
        if (a.experiment.dataset, a.experiment.dataset_version) != (b.experiment.dataset, b.experiment.dataset_version):
            which = f"{a.experiment.dataset} v{a.experiment.dataset_version}"
            other = f"{b.experiment.dataset} v{b.experiment.dataset_version}"
            raise InvalidInput(
                f"the experiments ran different datasets ({which}, {other}): compare runs of one dataset version"
            )
        labels = [label for label in a.experiment.labels if label in b.experiment.labels]
        if not labels:
            raise InvalidInput("the experiments have no scorer in common: compare experiments scored alike")
        scorers, cases = compare(labels, case_scores(a.results), case_scores(b.results))
        ids = {r.index: r.case_id for r in [*a.results, *b.results]}
        return ExperimentComparison(a.experiment, b.experiment, scorers, cases, ids, a.results, b.results)


__all__ = [
    "CONCURRENCY_MAX",
    "REPEAT_MAX",
    "RUN_IDS_MAX",
    "Evals",
    "ExperimentComparison",
    "ExperimentReport",
    "GateFailure",
    "check_gates",
    "gate",
    "parse_gates",
]
