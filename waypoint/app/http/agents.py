"""The agents the workers serve (the catalog they register), under /v1/agents, and the fleet
limits they call their models under, /v1/limits."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from waypoint.app.client import as_json
from waypoint.app.http.auth import Api, Tenant

router = APIRouter(prefix="/v1", tags=["agents"])


@router.get("/agents")
async def list_agents(api: Api, tenant: Tenant) -> dict[str, Any]:
    """Agents of this deployment's task queue: instructions, model, tools with their JSON schemas, limits."""
    return {"agents": as_json(await api.wp.agents())}


@router.get("/agents/{name}")
async def get_agent(name: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    data: dict[str, Any] = as_json(await api.wp.agent(name))
    return data


@router.get("/limits", tags=["limits"])
async def get_limits(api: Api, tenant: Tenant) -> dict[str, Any]:
    """The fleet limits (WAYPOINT_LIMITS_FILE) and, per model key, the calls in flight and waiting, the
    calls and 429s counted, a shared cooldown and the circuit breaker. Keys are the fleet's: no run or
    tenant is named. A run waiting for capacity shows its key and place in `GET /v1/runs/{id}`."""
    data: dict[str, Any] = as_json(await api.wp.limits.report(tenant))
    return data
