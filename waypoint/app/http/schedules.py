"""Scheduled agents under /v1/schedules: create, list, read, pause, resume, trigger, delete.

Each route is one call of the Python client's `wp.schedules` for the tenant of the API key (another
tenant's schedule is 404); answers are `as_json` of its ScheduleRow. The runs a schedule fired are
`GET /v1/runs?schedule_id=ID`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import Field

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.runs import Body
from waypoint.checks import (
    CATCHUP_MAX_SECONDS,
    CATCHUP_MIN_SECONDS,
    EVERY_MAX_SECONDS,
    EVERY_MIN_SECONDS,
    JITTER_MAX_SECONDS,
    NAME_MAX,
)
from waypoint.client import CATCHUP_DEFAULT_SECONDS, as_json
from waypoint.names import ScheduleOverlap

router = APIRouter(prefix="/v1", tags=["schedules"], responses=errors.KEYED)


class CreateSchedule(Body):
    agent: str = Field(description="Agent name (GET /v1/agents lists them).", max_length=NAME_MAX)
    task: str = Field(description="What each run should do.")
    every: float | None = Field(
        None, ge=EVERY_MIN_SECONDS, le=EVERY_MAX_SECONDS, description="Seconds between fires (or give cron)."
    )
    cron: str | None = Field(
        None, max_length=200, description="A cron expression: five fields ('0 9 * * mon-fri') or @daily."
    )
    tz: str = Field("UTC", max_length=100, description="Time zone of cron (an IANA name).")
    overlap: ScheduleOverlap = Field(
        ScheduleOverlap.SKIP,
        description="When the last fired run still runs: skip, buffer_one, allow_all, cancel_other.",
    )
    catchup_seconds: float = Field(
        CATCHUP_DEFAULT_SECONDS,
        ge=CATCHUP_MIN_SECONDS,
        le=CATCHUP_MAX_SECONDS,
        description="After an outage, fire times missed within this many seconds still fire.",
    )
    jitter_seconds: float = Field(0, ge=0, le=JITTER_MAX_SECONDS, description="Random delay of each fire, at most.")
    end_at: datetime | None = Field(None, description="No fire after this time (ISO 8601).")
    model: str | None = Field(None, max_length=NAME_MAX, description="Model spec of each run.")
    max_steps: int | None = Field(None, gt=0, description="Step budget of each run.")
    priority: int | None = Field(None, ge=1, le=5, description="1 (first) to 5 (last); default 3.")
    webhook: str | None = Field(None, max_length=NAME_MAX, description="Post each run's end to this URL.")
    thread_id: str | None = Field(None, max_length=NAME_MAX, description="Each run joins this thread.")
    schedule_id: str | None = Field(None, max_length=NAME_MAX, description="The id (default: sched-...).")
    paused: bool = Field(False, description="Create it paused.")


class Note(Body):
    note: str | None = Field(None, max_length=1000, description="Why (shown with the schedule).")


def schedule_json(row: Any) -> dict[str, Any]:
    data: dict[str, Any] = as_json(row)
    return data


@router.post("/schedules", status_code=201, responses=errors.documented(400, 404, 409))
async def create_schedule(body: CreateSchedule, api: Api, tenant: Tenant, response: Response) -> dict[str, Any]:
    """Create a scheduled agent (exactly one of `every` or `cron`): Temporal starts a run of the
    agent at each fire time; each fired run is an ordinary run with `schedule_id` set."""
    row = await api.wp.schedules.create(**body.model_dump(), tenant_id=tenant)
    response.headers["Location"] = f"/v1/schedules/{row.schedule_id}"
    return schedule_json(row)


@router.get("/schedules", responses=errors.documented(400))
async def list_schedules(
    api: Api,
    tenant: Tenant,
    agent: str | None = None,
    thread_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
) -> dict[str, Any]:
    """The tenant's schedules, newest first, each with its next fire times and last runs."""
    rows = await api.wp.schedules.list(tenant_id=tenant, agent=agent, thread_id=thread_id, limit=limit, offset=offset)
    return {"schedules": [schedule_json(r) for r in rows]}


@router.get("/schedules/{schedule_id}", responses=errors.documented(400, 404))
async def get_schedule(schedule_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return schedule_json(await api.wp.schedules.get(schedule_id, tenant_id=tenant))


@router.post("/schedules/{schedule_id}/pause", responses=errors.documented(400, 404))
async def pause_schedule(schedule_id: str, api: Api, tenant: Tenant, body: Note | None = None) -> dict[str, Any]:
    """Stop firing until resumed (a run already fired goes on)."""
    note = body.note if body else None
    return schedule_json(await api.wp.schedules.pause(schedule_id, note=note, tenant_id=tenant))


@router.post("/schedules/{schedule_id}/resume", responses=errors.documented(400, 404))
async def resume_schedule(schedule_id: str, api: Api, tenant: Tenant, body: Note | None = None) -> dict[str, Any]:
    note = body.note if body else None
    return schedule_json(await api.wp.schedules.resume(schedule_id, note=note, tenant_id=tenant))


@router.post("/schedules/{schedule_id}/trigger", responses=errors.documented(400, 404, 409))
async def trigger_schedule(schedule_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Fire now, under the schedule's overlap policy."""
    return schedule_json(await api.wp.schedules.trigger(schedule_id, tenant_id=tenant))


@router.delete("/schedules/{schedule_id}", status_code=204, responses=errors.documented(400, 404))
async def delete_schedule(schedule_id: str, api: Api, tenant: Tenant) -> Response:
    """Delete the schedule (the runs it fired stay)."""
    await api.wp.schedules.delete(schedule_id, tenant_id=tenant)
    return Response(status_code=204)
