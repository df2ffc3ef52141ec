"""Evaluations under /v1/datasets and /v1/experiments: datasets made from recorded runs or from
cases, experiments that run every case of one as a durable run and score it, their reports,
comparisons and gates.

Each route is one call of the Python client's `wp.evals` for the tenant of the API key (another
tenant's dataset or experiment is 404); answers are `as_json` of its rows. Starting an experiment
answers at once (201): poll `GET /v1/experiments/{id}` until its status is not `running`. With
`?fail_under=exact=0.9` that answer carries a `gate`, so CI can decide with curl and jq alone.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import Field

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.runs import Body, Ndjson
from waypoint.checks import INSTRUCTIONS_MAX, NAME_MAX
from waypoint.client import CONCURRENCY_MAX, REPEAT_MAX, RUN_IDS_MAX, as_json, gate, parse_gates
from waypoint.errors import InvalidInput
from waypoint.evals.cases import CASES_MAX
from waypoint.evals.scorers import DEFAULT_SCORERS, SCORERS_MAX
from waypoint.evals.types import ScorerSpec

router = APIRouter(prefix="/v1", tags=["evaluations"], responses=errors.KEYED)

DATASET_NAME_MAX = 100
VERSION_MAX = 2**31 - 1
Version = Annotated[int | None, Query(ge=1, le=VERSION_MAX, description="A version (default: the newest).")]


class FromRuns(Body):
    select: str | None = Field(
        None, max_length=1000, description="Which runs, as for rerun --select: 'agent=demo status=completed since=7d'."
    )
    # No maxItems on the lists here: the body cap (413) comes first for a list that long, and a
    # document saying 10,000 would promise a 4xx of its own; `wp.evals` refuses more with a 400.
    run_ids: list[Annotated[str, Field(max_length=NAME_MAX)]] = Field(
        default_factory=list, description=f"These runs (with or without select), at most {RUN_IDS_MAX}."
    )
    limit: int = Field(200, ge=1, le=CASES_MAX, description="At most this many runs of the selection, newest first.")


class CreateDataset(Body):
    name: str = Field(max_length=DATASET_NAME_MAX, description="Letters, digits, '.', '_', '-'; taken: a new version.")
    from_runs: FromRuns | None = Field(
        None, description="Each finished run a case: its task, what it answered and the tools it called."
    )
    cases: list[dict[str, Any]] | None = Field(
        None,
        description='Or the cases themselves, each {"task", "expected_output"?, "expected_tools"?, "metadata"?, '
        f'"id"?}}, as the lines of a --from-file JSONL; at most {CASES_MAX} (and within the body limit).',
    )


class ScorerBody(Body):
    name: str = Field(max_length=NAME_MAX, description="A built-in (exact, contains, trajectory...) or an @scorer.")
    args: dict[str, Any] = Field(default_factory=dict, description="Its arguments: threshold, a built-in's own.")
    label: str = Field("", max_length=NAME_MAX, description="The name its scores go by (default: its name).")


Scorers = list[ScorerBody | Annotated[str, Field(max_length=NAME_MAX)]]
SCORERS_HELP = (
    "Each {name, args, label?}, or a 'NAME:key=value,key=value' text: a built-in (exact, contains, regex, "
    "json_schema, trajectory, numeric, cost, steps, judge) or a worker's @scorer."
)


class StartExperiment(Body):
    dataset: str = Field(max_length=DATASET_NAME_MAX, description="The dataset (its newest version unless version).")
    agent: str = Field(max_length=NAME_MAX, description="The agent each case runs (GET /v1/agents lists them).")
    model: str | None = Field(None, max_length=NAME_MAX, description="A model spec in place of the agent's.")
    instructions: str | None = Field(
        None, max_length=INSTRUCTIONS_MAX, description="A system prompt in place of the agent's."
    )
    recorded_tools: bool = Field(False, description="Answer each case's tool calls from its recorded run.")
    repeat: int = Field(1, ge=1, le=REPEAT_MAX, description="Runs of each case.")
    concurrency: int = Field(4, ge=1, le=CONCURRENCY_MAX, description="Cases running at once.")
    scorers: Scorers = Field(list(DEFAULT_SCORERS), max_length=SCORERS_MAX, description=SCORERS_HELP)
    version: int | None = Field(None, ge=1, le=VERSION_MAX, description="The dataset version (default: the newest).")
    priority: int | None = Field(None, ge=1, le=5, description="1 (first) to 5 (last); default 3.")


class Rescore(Body):
    scorers: Scorers = Field(max_length=SCORERS_MAX, description=SCORERS_HELP)


def specs(scorers: Scorers) -> list[str | ScorerSpec]:
    return [s if isinstance(s, str) else ScorerSpec(s.name, dict(s.args), s.label) for s in scorers]


def json_of(value: Any) -> dict[str, Any]:
    data: dict[str, Any] = as_json(value)
    return data


# --- datasets ------------------------------------------------------------------------------------


@router.get("/datasets", responses=errors.documented(400))
async def list_datasets(api: Api, tenant: Tenant) -> dict[str, Any]:
    """The tenant's datasets, each name once with its newest version and how many versions it has."""
    return {"datasets": as_json(await api.wp.evals.datasets(tenant_id=tenant))}


@router.post("/datasets", status_code=201, responses=errors.documented(400, 404, 409))
async def create_dataset(body: CreateDataset, api: Api, tenant: Tenant, response: Response) -> dict[str, Any]:
    """The next version of a dataset: from recorded runs (`from_runs`) or from `cases`, one of them."""
    if (body.from_runs is None) == (body.cases is None):
        raise InvalidInput("give from_runs or cases, one of them: a dataset is made from recorded runs or from cases")
    if body.from_runs is not None:
        runs = body.from_runs
        if runs.select is None and not runs.run_ids:
            raise InvalidInput("from_runs names no run: give select ('agent=demo status=completed') or run_ids")
        row = await api.wp.evals.create_dataset(
            body.name, select=runs.select, run_ids=runs.run_ids, limit=runs.limit, tenant_id=tenant
        )
    else:
        if not body.cases:
            raise InvalidInput('cases is empty: give at least one case, each with a "task"')
        # As the lines of a JSONL file: one reading and checking of cases for every surface.
        lines = [json.dumps(case) for case in body.cases]
        row = await api.wp.evals.create_dataset(body.name, lines=lines, source="cases", tenant_id=tenant)
    response.headers["Location"] = f"/v1/datasets/{row.name}?version={row.version}"
    return json_of(row)


@router.get("/datasets/{dataset}", responses=errors.documented(400, 404))
async def get_dataset(dataset: str, api: Api, tenant: Tenant, version: Version = None) -> dict[str, Any]:
    return json_of(await api.wp.evals.dataset(dataset, version=version, tenant_id=tenant))


@router.get("/datasets/{dataset}/cases", responses=errors.documented(400, 404))
async def dataset_cases(dataset: str, api: Api, tenant: Tenant, version: Version = None) -> dict[str, Any]:
    """The cases of a dataset version, in order."""
    row = await api.wp.evals.dataset(dataset, version=version, tenant_id=tenant)
    cases = await api.wp.evals.cases(row.name, version=row.version, tenant_id=tenant)
    return {"dataset": row.name, "version": row.version, "cases": as_json(cases)}


@router.get("/datasets/{dataset}/export", response_class=Ndjson, responses=errors.documented(400, 404))
async def export_dataset(dataset: str, api: Api, tenant: Tenant, version: Version = None) -> StreamingResponse:
    """The dataset version as JSON lines, one case a line: what `waypoint dataset create --from-file`
    (or `cases` of POST /v1/datasets) reads back."""
    row = await api.wp.evals.dataset(dataset, version=version, tenant_id=tenant)  # a 404 before the stream
    lines = api.wp.evals.export_dataset(row.name, version=row.version, tenant_id=tenant)
    return StreamingResponse(
        lines,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{row.name}-v{row.version}.jsonl"'},
    )


# --- experiments ---------------------------------------------------------------------------------


@router.get("/experiments", responses=errors.documented(400))
async def list_experiments(
    api: Api,
    tenant: Tenant,
    dataset: Annotated[str | None, Query(max_length=DATASET_NAME_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> dict[str, Any]:
    """The tenant's experiments, newest first (of one dataset with `dataset`), each with its cases done."""
    rows = await api.wp.evals.experiments(dataset=dataset, limit=limit, tenant_id=tenant)
    return {"experiments": as_json(rows)}


@router.post("/experiments", status_code=201, responses=errors.documented(400, 404, 409))
async def start_experiment(body: StartExperiment, api: Api, tenant: Tenant, response: Response) -> dict[str, Any]:
    """Run every case of the dataset as a durable run of the agent and score it; answers at once with
    the experiment (status `running`): GET /v1/experiments/{id} follows it."""
    options = body.model_dump(exclude={"scorers"})
    row = await api.wp.evals.start_experiment(**options, scorers=specs(body.scorers), tenant_id=tenant)
    response.headers["Location"] = f"/v1/experiments/{row.experiment_id}"
    return json_of(row)


@router.get("/experiments/{experiment_id}", responses=errors.documented(400, 404))
async def get_experiment(
    experiment_id: str,
    api: Api,
    tenant: Tenant,
    fail_under: Annotated[
        list[Annotated[str, Query(max_length=NAME_MAX)]] | None,
        Query(max_length=50, description="SCORER=THRESHOLD (repeatable): adds `gate`, passed or the failures."),
    ] = None,
) -> dict[str, Any]:
    """The report, as far as it got: the experiment, its `summary` (per scorer the mean, its 95% interval,
    the pass rate; cost, tokens, latency) and each case's `results`."""
    gates = parse_gates(fail_under or [])  # a bad gate is a 400 before any read
    report = await api.wp.evals.report(experiment_id, tenant_id=tenant)
    answer = json_of(report)
    if fail_under:
        failures = gate(report, gates)
        answer["gate"] = {
            "passed": not failures and report.finished,
            "finished": report.finished,
            "failures": [{**as_json(f), "message": str(f)} for f in failures],
        }
    return answer


@router.get("/experiments/{experiment_id}/cases", responses=errors.documented(400, 404))
async def experiment_cases(experiment_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Each case's result: its run, status, scores by scorer label, error, cost, tokens, latency."""
    report = await api.wp.evals.report(experiment_id, tenant_id=tenant)
    return {"experiment_id": experiment_id, "status": report.experiment.status, "results": as_json(report.results)}


@router.post("/experiments/{experiment_id}/cancel", responses=errors.documented(400, 404, 409))
async def cancel_experiment(experiment_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Stop a running experiment: its case runs are cancelled, the results so far stay (409 once it ended)."""
    return json_of(await api.wp.evals.cancel(experiment_id, tenant_id=tenant))


@router.post("/experiments/{experiment_id}/rescore", status_code=201, responses=errors.documented(400, 404, 409))
async def rescore_experiment(
    experiment_id: str, body: Rescore, api: Api, tenant: Tenant, response: Response
) -> dict[str, Any]:
    """A new experiment scoring this one's runs again with `scorers` (no run starts)."""
    row = await api.wp.evals.rescore(experiment_id, scorers=specs(body.scorers), tenant_id=tenant)
    response.headers["Location"] = f"/v1/experiments/{row.experiment_id}"
    return json_of(row)


@router.get("/experiments/{experiment_id}/compare/{other_id}", responses=errors.documented(400, 404))
async def compare_experiments(experiment_id: str, other_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """`other_id` (B) against `experiment_id` (A), on one dataset version: per scorer the means, the
    difference with its interval, wins, losses, ties and whether it is significant; per case."""
    return json_of(await api.wp.evals.compare(experiment_id, other_id, tenant_id=tenant))
