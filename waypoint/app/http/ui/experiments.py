"""The viewer's evaluations: the tenant's experiments (each with its per-scorer means), one
experiment's table and every case's result linked to its run, and two experiments compared.

A running experiment's page reloads itself every few seconds (a meta refresh, as a starting run's
page does): its results arrive one case at a time, written by its workflow into Postgres."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from waypoint.app.http.ui.render import Api, Tenant, own_form, render, templates
from waypoint.names import ExperimentStatus

LISTED = 50  # experiments on the list page (newest first; each one's means are read from its results)
COMPARABLE = 20  # other experiments of the same dataset version offered for comparison
REFRESH_SECONDS = 2

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])


def score_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


templates.env.filters["score"] = score_text


@router.get("/experiments")
async def experiments_page(request: Request, api: Api, tenant: Tenant) -> Response:
    rows = await api.wp.evals.experiments(limit=LISTED, tenant_id=tenant)
    means = await api.wp.evals.means(rows)
    return render(request, "experiments.html", experiments=rows, means=means, tenant=tenant)


@router.get("/experiments/{experiment_id}")
async def experiment_page(request: Request, experiment_id: str, api: Api, tenant: Tenant) -> Response:
    report = await api.wp.evals.report(experiment_id, tenant_id=tenant)
    exp = report.experiment
    siblings = await api.wp.evals.experiments(dataset=exp.dataset, limit=COMPARABLE + 1, tenant_id=tenant)
    others = [e for e in siblings if e.experiment_id != experiment_id and e.dataset_version == exp.dataset_version]
    running = exp.status == ExperimentStatus.RUNNING
    return render(
        request,
        "experiment.html",
        report=report,
        exp=exp,
        others=others[:COMPARABLE],
        refresh=REFRESH_SECONDS if running else None,
    )


@router.get("/experiments/{experiment_id}/compare/{other_id}")
async def compare_page(request: Request, experiment_id: str, other_id: str, api: Api, tenant: Tenant) -> Response:
    comparison = await api.wp.evals.compare(experiment_id, other_id, tenant_id=tenant)
    return render(request, "experiment_compare.html", c=comparison)


__all__ = ["router"]
