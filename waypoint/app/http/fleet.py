"""The fleet over a period, under /v1/fleet (beside /v1/limits, the limiter now):

    GET /v1/fleet?period=24h   runs by status over time, steps a minute, model calls and 429s per model
                               key, runs waiting for capacity or approval, cost per day and agent, the
                               slowest and most expensive runs (period: 1h, 6h, 24h, 7d or 30d)

Model keys are the fleet's: each key's calls and 429s count every tenant's (a provider's limit is
shared), with the caller's own part beside them; every other figure is the caller's tenant's only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.client import as_json
from waypoint.names import FleetPeriod

router = APIRouter(prefix="/v1", tags=["limits"], responses=errors.KEYED)


class Bucket(BaseModel):
    at: datetime = Field(description="The bucket's start (it lasts `bucket_seconds`).")
    runs: dict[str, int] = Field(description="Runs started in it, by their status now.")
    steps: int = Field(description="Steps taken in it (answered model calls) by the tenant's runs.")
    steps_per_minute: float


class ModelKey(BaseModel):
    key: str = Field(description="The model key, as the limiter names it (provider:model, or a limits entry).")
    calls: int = Field(description="Answered calls in the period, every tenant's.")
    failed: int = Field(description="Failed attempts in the period, every tenant's.")
    throttled: int = Field(description="Of the failed attempts, those the provider answered 429 or 529.")
    own_calls: int = Field(description="Of `calls`, the tenant's.")
    own_failed: int
    own_throttled: int
    in_flight: int = Field(description="Calls holding a slot of the key now.")
    waiting: int = Field(description="Calls waiting for the key now.")
    cooldown_until: datetime | None = Field(description="A shared cooldown a 429 set, while it lasts.")
    breaker_open_until: datetime | None


class FleetRun(BaseModel):
    run_id: str
    agent: str
    status: str
    steps: int
    cost_usd: float
    seconds: float = Field(description="From its start to its end (to its last change while live).")
    created_at: datetime | None
    changed_at: datetime | None = Field(None, description="Its last change: for a waiting run, when it began to wait.")
    waiting_key: str | None = None
    waiting_position: int | None = None


class DayCost(BaseModel):
    day: datetime = Field(description="The day (UTC) its runs started.")
    tenant_id: str
    agent: str
    runs: int
    steps: int
    cost_usd: float


class Fleet(BaseModel):
    """The fleet over a period, as the caller's tenant may see it."""

    tenant_id: str
    period: str
    since: datetime
    until: datetime
    bucket_seconds: int
    buckets: list[Bucket]
    totals: dict[str, float] = Field(description="runs, steps and cost_usd of the tenant's runs of the period.")
    by_status: dict[str, int] = Field(description="The period's runs by their status now.")
    model_keys: list[ModelKey]
    waiting: dict[str, int] = Field(description="The tenant's runs waiting now: waiting_capacity, waiting_approval.")
    waiting_runs: list[FleetRun] = Field(description="The longest waiting of them (20 at most), each with its key.")
    costs: list[DayCost] = Field(description="Cost per day and agent, newest day first.")
    slowest: list[FleetRun]
    costliest: list[FleetRun]


@router.get("/fleet", response_model=Fleet, responses=errors.documented(400))
async def fleet(
    api: Api,
    tenant: Tenant,
    period: Annotated[FleetPeriod, Query(description="How far back: 1h, 6h, 24h, 7d or 30d.")] = FleetPeriod.DAY,
) -> Fleet:
    """The fleet over a period: runs by status over time, steps a minute, model calls and 429s per model
    key (every tenant's, with the caller's part), runs waiting for capacity or approval, cost per day and
    agent, the slowest and most expensive runs. The limiter's settings and keys now: GET /v1/limits."""
    return Fleet.model_validate(as_json(await api.wp.fleet_stats(period, tenant_id=tenant)))
