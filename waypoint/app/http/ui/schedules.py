"""The viewer's scheduled agents: the tenant's schedules (when each fires next, its last runs with
their statuses), one schedule with every run it fired, and the pause, resume and trigger forms.
Each form goes back to the page it was posted from, with what happened or why it was refused."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse, Response

from waypoint.app.console import schedule_spec_text
from waypoint.app.http.ui.render import Api, Tenant, answers_errors, own_form, render, templates
from waypoint.errors import WaypointError
from waypoint.names import FINISHED

LISTED = 200  # schedules on the page (newest first)
FIRED_RUNS = 50  # runs on a schedule's page
NEXT_SHOWN = 3  # next fire times in the list (a schedule's page shows all Temporal lists)

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])
templates.env.filters["spec_text"] = schedule_spec_text


@router.get("/schedules")
async def schedules_page(request: Request, api: Api, tenant: Tenant) -> Response:
    rows = await api.wp.schedules.list(tenant_id=tenant, limit=LISTED)
    return render(request, "schedules.html", schedules=rows, tenant=tenant, next_shown=NEXT_SHOWN, back="list")


@router.get("/schedules/{schedule_id}")
async def schedule_page(request: Request, schedule_id: str, api: Api, tenant: Tenant) -> Response:
    row = await api.wp.schedules.get(schedule_id, tenant_id=tenant)
    runs = await api.wp.runs(schedule_id=schedule_id, tenant_id=tenant, limit=FIRED_RUNS)
    return render(request, "schedule.html", schedule=row, runs=runs, finished=FINISHED, back="schedule")


# --- the forms ----------------------------------------------------------------------------------

Back = Annotated[str, Form()]  # "schedule": back to the schedule's page; else the list


def back_to(schedule_id: str, back: str, **query: str) -> RedirectResponse:
    path = f"/ui/schedules/{schedule_id}" if back == "schedule" else "/ui/schedules"
    return RedirectResponse(f"{path}?{urlencode(query)}", 303)


def as_refusal(params: dict[str, Any], exc: WaypointError) -> Response:
    return back_to(params["schedule_id"], params.get("back", ""), refusal=str(exc))


@router.post("/schedules/{schedule_id}/pause")
@answers_errors(as_refusal)
async def pause(schedule_id: str, api: Api, tenant: Tenant, back: Back = "") -> Response:
    await api.wp.schedules.pause(schedule_id, note="paused in the viewer", tenant_id=tenant)
    return back_to(schedule_id, back, notice=f"paused {schedule_id}: it fires no more until resumed")


@router.post("/schedules/{schedule_id}/resume")
@answers_errors(as_refusal)
async def resume(schedule_id: str, api: Api, tenant: Tenant, back: Back = "") -> Response:
    row = await api.wp.schedules.resume(schedule_id, note="resumed in the viewer", tenant_id=tenant)
    when = f": next at {row.next_runs[0]:%Y-%m-%d %H:%M:%S} UTC" if row.next_runs else ""
    return back_to(schedule_id, back, notice=f"resumed {schedule_id}{when}")


@router.post("/schedules/{schedule_id}/trigger")
@answers_errors(as_refusal)
async def trigger(schedule_id: str, api: Api, tenant: Tenant, back: Back = "") -> Response:
    row = await api.wp.schedules.trigger(schedule_id, tenant_id=tenant)
    return back_to(
        schedule_id,
        back,
        notice=f"fired {schedule_id} now (overlap policy {row.spec.get('overlap', 'skip')}): "
        "its run is listed once it starts; reload to see it",
    )


__all__ = ["router"]
