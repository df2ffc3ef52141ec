"""Evaluations in Postgres: datasets (versioned cases), experiments, each case's result, the judge's
recorded verdicts, and the scorers workers registered.

Every read and write names the tenant: another tenant's dataset or experiment is "not found". A
dataset version is written once, whole, in one transaction (its number the next of its name, under
a lock of the name), and never changed. A case's result is written once (insert-or-ignore on
(experiment, case, repetition)), so a retried `score_case` changes nothing; a judge's verdict is
written once per (run, judge key), so a rescoring with the same judge reads it instead of calling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import and_, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.errors import NotFound
from waypoint.evals.cases import EvalCase, EvalRun, EvalStep, ExpectedCall, tools_line
from waypoint.evals.types import CaseRef, ScorerSpec
from waypoint.names import ExperimentStatus
from waypoint.store.base import StoreBase
from waypoint.store.compare import Compare, step_sides
from waypoint.store.schema import (
    dataset_cases,
    datasets,
    eval_judgements,
    experiment_results,
    experiments,
    runs,
    scorers,
)

INSERT_CHUNK = 500  # cases a statement inserts
OUTPUT_START = 2000  # of a case run's output, what its result carries (a report lists every case)


@dataclass(frozen=True)
class DatasetRow:
    """One version of a dataset."""

    tenant_id: str
    name: str
    version: int
    cases: int
    source: dict[str, Any]
    created_at: datetime | None = None
    versions: int = 1  # in a listing: how many versions the name has (this is the newest)


@dataclass(frozen=True)
class ExperimentRow:
    """One experiment: what it runs (a dataset version, an agent, a change) and how it is scored."""

    experiment_id: str
    tenant_id: str
    dataset: str
    dataset_version: int
    agent: str
    model: str | None
    instructions: str | None
    recorded_tools: bool
    repeat: int
    concurrency: int
    scorers: list[ScorerSpec]
    status: str  # an ExperimentStatus
    cases_total: int
    rescored_from: str | None = None
    priority: int | None = None
    error: str | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    done: int = 0  # results written so far (a listing counts them)

    @property
    def labels(self) -> list[str]:
        return [s.key for s in self.scorers]


@dataclass(frozen=True)
class CaseResult:
    """One case's run in an experiment, scored or errored."""

    experiment_id: str
    index: int
    repetition: int
    status: str  # a CaseStatus
    run_id: str | None = None
    run_status: str | None = None
    scores: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> {value, passed, reason}
    error: str | None = None
    cost_usd: float = 0.0
    tokens: int = 0
    latency_ms: int | None = None
    case_id: str = ""
    created_at: datetime | None = None
    source_run_id: str | None = None  # the run the case was made from, for a dataset of runs
    output_start: str | None = None  # the start of its run's output (OUTPUT_START characters), to compare


@dataclass(frozen=True)
class Judgement:
    score: float
    reason: str
    model: str


def dataset_not_found(name: str, version: int | None = None) -> NotFound:
    which = f"{name!r} version {version}" if version is not None else repr(name)
    return NotFound(f"no dataset {which}: list datasets with `waypoint dataset list`")


def experiment_not_found(experiment_id: str) -> NotFound:
    return NotFound(f"no experiment {experiment_id!r}: list experiments with `waypoint eval list`")


def _dataset(r: Any, versions: int = 1) -> DatasetRow:
    return DatasetRow(r["tenant_id"], r["name"], r["version"], r["cases"], dict(r["source"]), r["created_at"], versions)


def _case(r: Any) -> EvalCase:
    tools = r["expected_tools"]
    return EvalCase(
        index=r["idx"],
        task=r["task"],
        case_id=r["case_id"],
        expected_output=r["expected_output"],
        expected_tools=[
            ExpectedCall(t, None) if isinstance(t, str) else ExpectedCall(t["name"], t.get("arguments")) for t in tools
        ]
        if tools is not None
        else None,
        metadata=dict(r["metadata"] or {}),
        source_run_id=r["source_run_id"],
    )


def _experiment(r: Any, done: int = 0) -> ExperimentRow:
    return ExperimentRow(
        experiment_id=r["experiment_id"],
        tenant_id=r["tenant_id"],
        dataset=r["dataset"],
        dataset_version=r["dataset_version"],
        agent=r["agent"],
        model=r["model"],
        instructions=r["instructions"],
        recorded_tools=r["recorded_tools"],
        repeat=r["repeat"],
        concurrency=r["concurrency"],
        scorers=[ScorerSpec(s["name"], dict(s.get("args") or {}), s.get("label") or "") for s in r["scorers"]],
        status=r["status"],
        cases_total=r["cases_total"],
        rescored_from=r["rescored_from"],
        priority=r["priority"],
        error=r["error"],
        created_at=r["created_at"],
        finished_at=r["finished_at"],
        done=done,
    )


def _with_done() -> Any:
    """Experiments with how many results each has so far (`done`)."""
    done = select(func.count()).where(experiment_results.c.experiment_id == experiments.c.experiment_id)
    return select(experiments, done.scalar_subquery().label("done"))


def _money(value: Any) -> float:
    return float(value) if isinstance(value, Decimal) else float(value or 0)


class EvalStore(StoreBase):
    """Datasets, experiments, their results, the judge's verdicts and the scorers catalog; a case's run
    is read as `compare` reads a run, through the store's Compare given at construction (`store.compare`)."""

    def __init__(self, engine: AsyncEngine, compare: Compare):
        super().__init__(engine)
        self._compare = compare

    # --- datasets ----------------------------------------------------------------------------

    async def create_dataset(
        self, tenant_id: str, name: str, source: dict[str, Any], cases: Sequence[EvalCase]
    ) -> DatasetRow:
        """The next version of dataset `name` (1 for a new name), with its cases, in one transaction."""
        async with self.engine.begin() as conn:
            # One writer of a name at a time: two creates of the same name get versions n and n+1.
            await conn.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": f"dataset:{tenant_id}:{name}"}
            )
            here = (datasets.c.tenant_id == tenant_id) & (datasets.c.name == name)
            newest = await conn.scalar(select(func.coalesce(func.max(datasets.c.version), 0)).where(here))
            version = int(newest or 0) + 1
            row = (
                (
                    await conn.execute(
                        insert(datasets)
                        .values(tenant_id=tenant_id, name=name, version=version, source=source, cases=len(cases))
                        .returning(datasets)
                    )
                )
                .mappings()
                .one()
            )
            values = [
                {
                    "tenant_id": tenant_id,
                    "dataset": name,
                    "version": version,
                    "idx": i,
                    "case_id": c.case_id or f"case-{i}",
                    "task": c.task,
                    "expected_output": c.expected_output,
                    "expected_tools": [tools_line(t) for t in c.expected_tools]
                    if c.expected_tools is not None
                    else None,
                    "metadata": c.metadata,
                    "source_run_id": c.source_run_id,
                }
                for i, c in enumerate(cases)
            ]
            for start in range(0, len(values), INSERT_CHUNK):
                await conn.execute(insert(dataset_cases), values[start : start + INSERT_CHUNK])
        return _dataset(row)

    async def get_dataset(self, tenant_id: str, name: str, version: int | None = None) -> DatasetRow:
        """A version of the tenant's dataset (None: the newest), or NotFound."""
        here = (datasets.c.tenant_id == tenant_id) & (datasets.c.name == name)
        query = select(datasets).where(here)
        query = query.where(datasets.c.version == version) if version is not None else query
        async with self.engine.connect() as conn:
            row = (await conn.execute(query.order_by(datasets.c.version.desc()).limit(1))).mappings().first()
            versions = await conn.scalar(select(func.count()).select_from(datasets).where(here))
        if row is None:
            raise dataset_not_found(name, version)
        return _dataset(row, int(versions or 1))

    async def list_datasets(self, tenant_id: str, *, limit: int = 100) -> list[DatasetRow]:
        """The tenant's datasets, newest version of each, by name."""
        mine = datasets.c.tenant_id == tenant_id
        names = (
            select(datasets.c.name, func.max(datasets.c.version).label("newest"), func.count().label("versions"))
            .where(mine)
            .group_by(datasets.c.name)
            .subquery()
        )
        newest = (
            select(datasets, names.c.versions)
            .join(names, and_(datasets.c.name == names.c.name, datasets.c.version == names.c.newest))
            .where(mine)
            .order_by(datasets.c.name)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(newest)).mappings().all()
        return [_dataset(r, r["versions"]) for r in rows]

    async def dataset_cases(
        self, tenant_id: str, name: str, version: int, *, after: int = -1, limit: int | None = None
    ) -> list[EvalCase]:
        """The cases of a dataset version, in order, after index `after`, at most `limit`."""
        query = (
            select(dataset_cases)
            .where(
                dataset_cases.c.tenant_id == tenant_id,
                dataset_cases.c.dataset == name,
                dataset_cases.c.version == version,
                dataset_cases.c.idx > after,
            )
            .order_by(dataset_cases.c.idx)
        )
        if limit is not None:
            query = query.limit(limit)
        async with self.engine.connect() as conn:
            return [_case(r) for r in (await conn.execute(query)).mappings()]

    async def dataset_case(self, tenant_id: str, name: str, version: int, index: int) -> EvalCase:
        found = await self.dataset_cases(tenant_id, name, version, after=index - 1, limit=1)
        if not found or found[0].index != index:
            raise NotFound(f"dataset {name!r} version {version} has no case {index}")
        return found[0]

    # --- what a case's run did -----------------------------------------------------------------

    async def eval_run(self, tenant_id: str, run_id: str) -> EvalRun:
        """A run as scorers see it: its row's outcome and totals, and its steps (with those a rerun
        inherited) with their tool calls."""
        async with self.engine.connect() as conn:
            run = await self._run(conn, tenant_id, run_id)
            sides = step_sides(await self._compare.compared_events(conn, tenant_id, run))
        steps = [
            EvalStep(n, s.content, list(s.calls), s.input_tokens, s.output_tokens, s.cost_usd)
            for n, s in sorted(sides.items())
        ]
        latency = (
            int((run.finished_at - run.created_at).total_seconds() * 1000)
            if run.finished_at is not None and run.created_at is not None
            else 0
        )
        return EvalRun(
            run_id=run.run_id,
            status=run.status,
            output=run.output,
            steps=steps,
            output_json=run.output_json,
            error=run.error,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=run.cost_usd,
            latency_ms=latency,
        )

    # --- experiments -----------------------------------------------------------------------------

    async def create_experiment(self, row: ExperimentRow) -> ExperimentRow:
        values = {
            "experiment_id": row.experiment_id,
            "tenant_id": row.tenant_id,
            "dataset": row.dataset,
            "dataset_version": row.dataset_version,
            "agent": row.agent,
            "model": row.model,
            "instructions": row.instructions,
            "recorded_tools": row.recorded_tools,
            "repeat": row.repeat,
            "concurrency": row.concurrency,
            "scorers": [{"name": s.name, "args": s.args, "label": s.key} for s in row.scorers],
            "rescored_from": row.rescored_from,
            "priority": row.priority,
            "status": row.status,
            "cases_total": row.cases_total,
        }
        async with self.engine.begin() as conn:
            created = (await conn.execute(insert(experiments).values(**values).returning(experiments))).mappings().one()
        return _experiment(created)

    async def get_experiment(self, tenant_id: str, experiment_id: str) -> ExperimentRow:
        query = _with_done().where(experiments.c.tenant_id == tenant_id, experiments.c.experiment_id == experiment_id)
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None:
            raise experiment_not_found(experiment_id)
        return _experiment(row, row["done"])

    async def list_experiments(
        self, tenant_id: str, *, dataset: str | None = None, limit: int = 50
    ) -> list[ExperimentRow]:
        """The tenant's experiments, newest first."""
        query = _with_done().where(experiments.c.tenant_id == tenant_id)
        if dataset is not None:
            query = query.where(experiments.c.dataset == dataset)
        query = query.order_by(experiments.c.created_at.desc(), experiments.c.experiment_id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [_experiment(r, r["done"]) for r in (await conn.execute(query)).mappings()]

    async def experiment_plan(
        self, tenant_id: str, experiment_id: str, after: tuple[int, int] | None, limit: int
    ) -> tuple[list[CaseRef], bool]:
        """The next `limit` runs of cases (after `after`, in (case, repetition) order) without a
        result yet, and whether more follow. A rescoring's are its source's runs."""
        exp = await self.get_experiment(tenant_id, experiment_id)
        done = select(experiment_results.c.idx, experiment_results.c.repetition).where(
            experiment_results.c.experiment_id == experiment_id
        )
        async with self.engine.connect() as conn:
            finished = {(r.idx, r.repetition) for r in await conn.execute(done)}
            if exp.rescored_from is not None:
                source = (
                    select(experiment_results.c.idx, experiment_results.c.repetition, experiment_results.c.run_id)
                    .where(
                        experiment_results.c.experiment_id == exp.rescored_from,
                        experiment_results.c.tenant_id == tenant_id,
                        experiment_results.c.run_id.is_not(None),
                    )
                    .order_by(experiment_results.c.idx, experiment_results.c.repetition)
                )
                every = [CaseRef(r.idx, r.repetition, r.run_id) for r in await conn.execute(source)]
            else:
                every = [CaseRef(i, k) for i in range(exp.cases_total // max(exp.repeat, 1)) for k in range(exp.repeat)]
        todo = [
            c
            for c in every
            if (c.index, c.repetition) not in finished and (after is None or (c.index, c.repetition) > tuple(after))
        ]
        return todo[:limit], len(todo) > limit

    async def record_result(self, tenant_id: str, result: CaseResult) -> CaseResult:
        """Write a case's result once; a retry gets the one written first."""
        values = {
            "experiment_id": result.experiment_id,
            "idx": result.index,
            "repetition": result.repetition,
            "tenant_id": tenant_id,
            "run_id": result.run_id,
            "status": result.status,
            "run_status": result.run_status,
            "scores": result.scores,
            "error": result.error,
            "cost_usd": result.cost_usd,
            "tokens": result.tokens,
            "latency_ms": result.latency_ms,
        }
        async with self.engine.begin() as conn:
            written = await conn.scalar(
                insert(experiment_results)
                .values(**values)
                .on_conflict_do_nothing()
                .returning(experiment_results.c.created_at)
            )
        if written is not None:  # the first write (the usual case): it is what was asked
            return result
        found = await self.experiment_results(tenant_id, result.experiment_id, index=result.index)
        return next(r for r in found if r.repetition == result.repetition)

    async def experiment_results(
        self, tenant_id: str, experiment_id: str, *, index: int | None = None
    ) -> list[CaseResult]:
        """The experiment's results so far, by (case, repetition), each with its case's id."""
        cases = dataset_cases.alias("c")
        query = (
            select(
                experiment_results,
                cases.c.case_id,
                cases.c.source_run_id,
                func.left(runs.c.output, OUTPUT_START).label("output_start"),
            )
            .join(experiments, experiments.c.experiment_id == experiment_results.c.experiment_id)
            .outerjoin(runs, runs.c.run_id == experiment_results.c.run_id)
            .outerjoin(
                cases,
                and_(
                    cases.c.tenant_id == experiments.c.tenant_id,
                    cases.c.dataset == experiments.c.dataset,
                    cases.c.version == experiments.c.dataset_version,
                    cases.c.idx == experiment_results.c.idx,
                ),
            )
            .where(experiment_results.c.experiment_id == experiment_id, experiment_results.c.tenant_id == tenant_id)
            .order_by(experiment_results.c.idx, experiment_results.c.repetition)
        )
        if index is not None:
            query = query.where(experiment_results.c.idx == index)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [
            CaseResult(
                experiment_id=r["experiment_id"],
                index=r["idx"],
                repetition=r["repetition"],
                status=r["status"],
                run_id=r["run_id"],
                run_status=r["run_status"],
                scores=dict(r["scores"] or {}),
                error=r["error"],
                cost_usd=_money(r["cost_usd"]),
                tokens=int(r["tokens"] or 0),
                latency_ms=r["latency_ms"],
                case_id=r["case_id"] or f"case-{r['idx']}",
                created_at=r["created_at"],
                source_run_id=r["source_run_id"],
                output_start=r["output_start"],
            )
            for r in rows
        ]

    async def experiment_means(self, tenant_id: str, experiment_ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """Each experiment's mean per scorer over its scored cases, summed up in Postgres (a listing
        reads no result row)."""
        if not experiment_ids:
            return {}
        query = text(
            """
            SELECT r.experiment_id, s.key AS label, avg((s.value->>'value')::float) AS mean
            FROM experiment_results r, jsonb_each(r.scores) s
            WHERE r.tenant_id = :tenant AND r.experiment_id = ANY(:ids) AND r.status = 'scored'
              AND jsonb_typeof(s.value->'value') = 'number'
            GROUP BY r.experiment_id, s.key
            """
        )
        found: dict[str, dict[str, float]] = {i: {} for i in experiment_ids}
        async with self.engine.connect() as conn:
            for row in await conn.execute(query, {"tenant": tenant_id, "ids": list(experiment_ids)}):
                found[row.experiment_id][row.label] = float(row.mean)
        return found

    async def set_experiment_status(
        self, tenant_id: str, experiment_id: str, status: ExperimentStatus, error: str | None = None
    ) -> None:
        """End a running experiment (a finished one keeps how it ended)."""
        finished = status != ExperimentStatus.RUNNING
        async with self.engine.begin() as conn:
            await conn.execute(
                update(experiments)
                .where(
                    experiments.c.tenant_id == tenant_id,
                    experiments.c.experiment_id == experiment_id,
                    experiments.c.status == ExperimentStatus.RUNNING,
                )
                .values(status=status, error=error, finished_at=func.now() if finished else None)
            )

    # --- the judge's verdicts --------------------------------------------------------------------

    async def recorded_judgement(self, tenant_id: str, run_id: str, key: str) -> Judgement | None:
        query = select(eval_judgements.c.score, eval_judgements.c.reason, eval_judgements.c.model).where(
            eval_judgements.c.tenant_id == tenant_id,
            eval_judgements.c.run_id == run_id,
            eval_judgements.c.judge_key == key,
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else Judgement(row.score, row.reason, row.model)

    async def record_judgement(
        self,
        tenant_id: str,
        run_id: str,
        key: str,
        verdict: Judgement,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost_usd: float = 0.0,
    ) -> Judgement:
        """Keep a verdict once; a second write of the same key keeps the first (and answers it)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(eval_judgements)
                .values(
                    tenant_id=tenant_id,
                    run_id=run_id,
                    judge_key=key,
                    model=verdict.model,
                    score=verdict.score,
                    reason=verdict.reason,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    cost_usd=cost_usd,
                )
                .on_conflict_do_nothing()
            )
        found = await self.recorded_judgement(tenant_id, run_id, key)
        assert found is not None
        return found

    async def judgements(self, tenant_id: str, run_ids: Sequence[str]) -> int:
        """How many verdicts are recorded on these runs (what a rescoring can reuse)."""
        async with self.engine.connect() as conn:
            return int(
                await conn.scalar(
                    select(func.count()).where(
                        eval_judgements.c.tenant_id == tenant_id, eval_judgements.c.run_id.in_(list(run_ids))
                    )
                )
                or 0
            )

    # --- the scorers catalog -----------------------------------------------------------------------

    async def register_scorers(self, task_queue: str, found: Sequence[tuple[str, str]], worker: str) -> None:
        """Upsert the `@scorer`s (name, description) a worker of `task_queue` loaded."""
        if not found:
            return
        stmt = insert(scorers).values(
            [{"task_queue": task_queue, "name": n, "description": d, "worker": worker} for n, d in found]
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["task_queue", "name"],
            set_={"description": stmt.excluded.description, "worker": stmt.excluded.worker, "updated_at": func.now()},
        )
        async with self.engine.begin() as conn:
            await conn.execute(stmt)

    async def scorer_names(self, task_queue: str) -> dict[str, str]:
        """The `@scorer`s the workers of `task_queue` have: name -> description."""
        query = select(scorers.c.name, scorers.c.description).where(scorers.c.task_queue == task_queue)
        async with self.engine.connect() as conn:
            return {r.name: r.description for r in await conn.execute(query.order_by(scorers.c.name))}

    async def existing_runs(self, tenant_id: str, run_ids: Sequence[str]) -> set[str]:
        """Which of these run ids the tenant has (a dataset of given runs, a case whose source run may be gone)."""
        async with self.engine.connect() as conn:
            found = await conn.scalars(
                select(runs.c.run_id).where(runs.c.tenant_id == tenant_id, runs.c.run_id.in_(list(run_ids)))
            )
            return set(found)


__all__ = ["CaseResult", "DatasetRow", "EvalStore", "ExperimentRow", "Judgement"]
