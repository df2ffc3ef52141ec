"""The agents the workers serve (the catalog they register), under /v1/agents."""

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
