"""The agents the workers serve (the catalog they register), under /v1/agents, and the versions
runs started with, /v1/agent-versions/{fingerprint}; the assistants (the
tenant's configured, versioned agents, and the catalog's), /v1/assistants (read-only here: the Agent
Protocol's /assistants changes them); and the fleet limits they call their models under, /v1/limits."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.client import as_json

router = APIRouter(prefix="/v1", tags=["agents"], responses=errors.KEYED)


@router.get("/agents")
async def list_agents(api: Api, tenant: Tenant) -> dict[str, Any]:
    """Agents of this deployment's task queue: instructions, model, tools with their JSON schemas, limits."""
    return {"agents": as_json(await api.wp.agents())}


@router.get("/agents/{name}", responses=errors.documented(400, 404))
async def get_agent(name: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    data: dict[str, Any] = as_json(await api.wp.agent(name))
    return data


@router.get("/agent-versions/{fingerprint}", responses=errors.documented(400, 404))
async def get_agent_version(fingerprint: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """An agent version a run of the tenant started with (`agent_fingerprint` of a run; a prefix of 4
    or more hex digits will do): its instructions, tool schemas, models and MCP tool names. 404 for
    any fingerprint none of the tenant's runs started with."""
    data: dict[str, Any] = as_json(await api.wp.agent_version(fingerprint, tenant_id=tenant))
    return data


@router.get("/assistants", tags=["assistants"], responses=errors.documented(400))
async def list_assistants(
    api: Api, tenant: Tenant, graph_id: str | None = None, limit: int = 100, offset: int = 0
) -> dict[str, Any]:
    """The agents (their built-in assistants), then the tenant's assistants, newest first."""
    found = await api.wp.assistants.search(graph_id=graph_id, limit=limit, offset=offset, tenant_id=tenant)
    return {"assistants": as_json(found)}


@router.get("/assistants/{assistant_id}", tags=["assistants"], responses=errors.documented(400, 404))
async def get_assistant(assistant_id: str, api: Api, tenant: Tenant, version: int | None = None) -> dict[str, Any]:
    """The assistant at its current version (or `?version=`): graph, config, context, metadata."""
    data: dict[str, Any] = as_json(await api.wp.assistants.get(assistant_id, version=version, tenant_id=tenant))
    return data


@router.get("/assistants/{assistant_id}/versions", tags=["assistants"], responses=errors.documented(400, 404))
async def assistant_versions(assistant_id: str, api: Api, tenant: Tenant, limit: int = 100) -> dict[str, Any]:
    """Every version of the assistant, newest first."""
    return {"versions": as_json(await api.wp.assistants.versions(assistant_id, limit=limit, tenant_id=tenant))}


@router.get("/limits", tags=["limits"])
async def get_limits(api: Api, tenant: Tenant) -> dict[str, Any]:
    """The fleet limits (WAYPOINT_LIMITS_FILE) and, per model key, the calls in flight and waiting, the
    calls and 429s counted, a shared cooldown and the circuit breaker. Keys are the fleet's: no run or
    tenant is named. A run waiting for capacity shows its key and place in `GET /v1/runs/{id}`."""
    data: dict[str, Any] = as_json(await api.wp.limits.report(tenant))
    return data
