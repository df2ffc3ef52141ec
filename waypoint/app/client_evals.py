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
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from waypoint.checks import (
    NAME_MAX,
    check_choice,
    check_count,
    check_instructions,
    check_name,
    check_priority,
    check_text,
    parse_selection,
)
from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.evals.cases import CASES_MAX, EvalCase, ExpectedCall, check_dataset_name, read_cases
from waypoint.evals.scorers import DEFAULT_SCORERS, check_scorers, parse_scorer
from waypoint.evals.stats import CaseDelta, CaseScores, ScorerDelta, Summary, compare, summarize
from waypoint.evals.types import ExperimentInput, ScorerSpec
from waypoint.names import BuiltinScorer, CaseStatus, ExperimentStatus, RunStatus
from waypoint.store import RunStore
from waypoint.store.evals import CaseResult, DatasetRow, ExperimentRow

if TYPE_CHECKING:
    from waypoint.app.client import Waypoint

REPEAT_MAX = 10
CONCURRENCY_MAX = 100
RUN_IDS_MAX = CASES_MAX
POLL_SECONDS = 0.5


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


class Evals:
    def __init__(self, store: RunStore, wp: Waypoint):
        self._store = store
        self._wp = wp

    # --- datasets ------------------------------------------------------------------------------

    async def create_dataset(
        self,
        name: str,
        *,
        select: str | None = None,
        run_ids: Sequence[str] = (),
        limit: int = 200,
        lines: Iterable[str] | None = None,
        cases: Sequence[EvalCase] | None = None,
        source: str | None = None,
        tenant_id: str | None = None,
    ) -> DatasetRow:
        """The next version of dataset `name`: from the tenant's recorded runs (`select`, as for
        `rerun --select`, newest first, reruns left out, at most `limit`; and/or `run_ids`), each run
        a case whose expected output and tools are what it answered and called; or from cases
        (`lines` of JSONL, or `cases`), `source` naming their file."""
        check_dataset_name(name)
        tenant = self._wp.tenant(tenant_id)
        from_runs = select is not None or bool(run_ids)
        if from_runs == (lines is not None or cases is not None):
            raise InvalidInput("make a dataset from runs (--from-runs with --select or --run) or from a file, not both")
        if from_runs:
            made = await self._cases_from_runs(tenant, select, run_ids, limit)
            origin: dict[str, Any] = {"kind": "runs", "select": select, "run_ids": list(run_ids)[:50], "limit": limit}
        else:
            where = check_text("the file name", source or "the cases", high=NAME_MAX)
            made = list(cases) if cases is not None else read_cases(lines or [], where)
            if not made:
                raise InvalidInput(f"{where} has no cases: write one JSON object a line, each with a task")
            if len(made) > CASES_MAX:
                raise InvalidInput(f"{len(made)} cases: keep a dataset to {CASES_MAX}")
            origin = {"kind": "file", "file": where}
        return await self._store.create_dataset(tenant, name, origin, made)

    async def _cases_from_runs(
        self, tenant: str, select: str | None, run_ids: Sequence[str], limit: int
    ) -> list[EvalCase]:
        check_count("the limit", limit, high=CASES_MAX)
        if len(run_ids) > RUN_IDS_MAX:
            raise InvalidInput(f"{len(run_ids)} run ids: keep it to {RUN_IDS_MAX}")
        chosen: list[str] = []
        if select is not None:
            found = parse_selection(check_text("the selection", select))
            if "status" in found:
                check_choice("status", str(found["status"]), RunStatus)
            since = datetime.now(UTC) - timedelta(seconds=int(found["since"])) if "since" in found else None
            rows = await self._store.list_runs(
                tenant,
                limit=limit,
                status=str(found["status"]) if "status" in found else None,
                agent=str(found["agent"]) if "agent" in found else None,
                since=since,
                originals=True,
            )
            chosen += [r.run_id for r in rows]
        for run_id in run_ids:
            check_name("the run id", run_id)
        known = await self._store.existing_runs(tenant, list(run_ids)) if run_ids else set()
        missing = [r for r in run_ids if r not in known]
        if missing:
            raise NotFound(f"no run {missing[0]!r} for tenant {tenant!r}: list runs with `waypoint runs`")
        chosen += [r for r in run_ids if r not in chosen]
        if not chosen:
            raise NotFound(f"no run matches {select!r}: list runs with `waypoint runs`, or give --run ids")
        made = []
        for index, run_id in enumerate(chosen):
            run = await self._store.get_run(tenant, run_id)
            if not RunStatus(run.status).finished:
                raise Conflict(f"run {run_id} is {run.status}: a dataset records finished runs; wait for its end")
            seen = await self._store.eval_run(tenant, run_id)
            calls = [ExpectedCall(c.name, _object(c.arguments)) for c in seen.tool_calls]
            made.append(
                EvalCase(
                    index=index,
                    task=run.task,
                    case_id=run_id,
                    expected_output=run.output_json if run.output_json is not None else run.output,
                    expected_tools=calls,
                    metadata={"agent": run.agent, "status": run.status, "model": run.model},
                    source_run_id=run_id,
                )
            )
        return made

    async def datasets(self, *, tenant_id: str | None = None) -> list[DatasetRow]:
        return await self._store.list_datasets(self._wp.tenant(tenant_id))

    async def dataset(self, name: str, *, version: int | None = None, tenant_id: str | None = None) -> DatasetRow:
        check_dataset_name(name)
        if version is not None:
            check_count("the version", version, high=2**31 - 1)
        return await self._store.get_dataset(self._wp.tenant(tenant_id), name, version)

    async def cases(self, name: str, *, version: int | None = None, tenant_id: str | None = None) -> list[EvalCase]:
        found = await self.dataset(name, version=version, tenant_id=tenant_id)
        return await self._store.dataset_cases(found.tenant_id, found.name, found.version)

    async def export_dataset(
        self, name: str, *, version: int | None = None, tenant_id: str | None = None
    ) -> AsyncIterator[str]:
        """The dataset version as JSONL (what `--from-file` reads back), one line a case."""
        for case in await self.cases(name, version=version, tenant_id=tenant_id):
            yield json.dumps(case.as_line(), ensure_ascii=False) + "\n"

    # --- experiments ------------------------------------------------------------------------------

    async def scorer_names(self) -> dict[str, str]:
        """Every scorer an experiment can use: the built-ins, then the workers' `@scorer`s."""
        custom = await self._store.scorer_names(self._wp.settings.task_queue)
        return {**{s.value: "built in" for s in BuiltinScorer}, **custom}

    async def check_scorers(self, scorers: Sequence[str | ScorerSpec]) -> list[ScorerSpec]:
        specs = [s if isinstance(s, ScorerSpec) else parse_scorer(s) for s in scorers]
        return check_scorers(specs, await self._store.scorer_names(self._wp.settings.task_queue))

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
        check_count("the repeat count", repeat, high=REPEAT_MAX)
        check_count("the concurrency", concurrency, high=CONCURRENCY_MAX)
        check_instructions(instructions)
        check_name("the agent", agent)
        check_name("the model", model)
        check_priority(priority)
        found = await self.dataset(dataset, version=version, tenant_id=tenant_id)
        tenant = found.tenant_id
        checked = await self.check_scorers(scorers)
        await self._wp.check_start(agent, model)
        cases = await self._store.dataset_cases(tenant, found.name, found.version)
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
        source = await self.experiment(experiment_id, tenant_id=tenant_id)
        if source.status == ExperimentStatus.RUNNING:
            raise Conflict(f"experiment {experiment_id} is still running: rescore it once it ends")
        checked = await self.check_scorers(scorers)
        scored = await self._store.experiment_results(source.tenant_id, experiment_id)
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
        created = await self._store.create_experiment(row)
        inp = ExperimentInput(
            experiment_id=row.experiment_id,
            tenant_id=row.tenant_id,
            concurrency=row.concurrency,
            judges=[s.key for s in row.scorers if s.name == BuiltinScorer.JUDGE],
        )
        try:
            gateway = await self._wp.temporal()
            # The experiment's trace: its workflow, every case run (child workflows inherit the
            # context), the judges' calls. A case run's row carries this trace id.
            with self._traced(gateway.traced, row):
                await gateway.start_experiment(inp, row.priority)
        except BaseException as exc:
            await self._store.set_experiment_status(row.tenant_id, row.experiment_id, ExperimentStatus.FAILED, str(exc))
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
        return await self._store.get_experiment(self._wp.tenant(tenant_id), experiment_id)

    async def experiments(
        self, *, dataset: str | None = None, limit: int = 50, tenant_id: str | None = None
    ) -> list[ExperimentRow]:
        check_count("the limit", limit, high=1000)
        if dataset is not None:
            check_dataset_name(dataset)
        return await self._store.list_experiments(self._wp.tenant(tenant_id), dataset=dataset, limit=limit)

    async def means(self, experiments: Sequence[ExperimentRow]) -> dict[str, dict[str, float | None]]:
        """Each listed experiment's mean per scorer (in its scorers' order; None: nothing scored yet)."""
        if not experiments:
            return {}
        found = await self._store.experiment_means(experiments[0].tenant_id, [e.experiment_id for e in experiments])
        return {e.experiment_id: {label: found[e.experiment_id].get(label) for label in e.labels} for e in experiments}

    async def report(self, experiment_id: str, *, tenant_id: str | None = None) -> ExperimentReport:
        """The experiment's table and its cases' results, as far as it got."""
        exp = await self.experiment(experiment_id, tenant_id=tenant_id)
        results = await self._store.experiment_results(exp.tenant_id, experiment_id)
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
        exp = await self.experiment(experiment_id, tenant_id=tenant_id)
        if exp.status != ExperimentStatus.RUNNING:
            raise Conflict(f"experiment {experiment_id} is {exp.status} already")
        gateway = await self._wp.temporal()
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


def _object(arguments: str) -> dict[str, Any] | None:
    """A recorded call's arguments as the object they are (None when they are not one)."""
    try:
        found = json.loads(arguments)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
