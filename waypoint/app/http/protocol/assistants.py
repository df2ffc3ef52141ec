"""Agent Protocol assistants: the tenant's configured agents (`wp.assistants`: created, updated as
new versions, set back to a version, deleted) and the agents the workers registered (built in,
read-only: agents are code). An assistant's schemas, graph and subgraphs are its graph's (agent's)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.protocol.shapes import assistant_json, graph, schemas
from waypoint.app.http.state import ApiState
from waypoint.types import AgentInfo

router = APIRouter(tags=["agent protocol: assistants"])


class Search(BaseModel):
    model_config = ConfigDict(extra="ignore")
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class Create(BaseModel):
    model_config = ConfigDict(extra="ignore")
    graph_id: str
    assistant_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    if_exists: str = "raise"
    name: str | None = None
    description: str | None = None


class Patch(BaseModel):
    model_config = ConfigDict(extra="ignore")
    graph_id: str | None = None
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None


class Versions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


class Latest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    version: int = Field(ge=1)


@router.post("/assistants", responses=errors.KEYED | errors.documented(400, 404, 409))
async def create(body: Create, api: Api, tenant: Tenant) -> dict[str, Any]:
    """A new assistant of graph (agent) `graph_id`, at version 1."""
    made = await api.wp.assistants.create(
        body.graph_id,
        config=body.config,
        context=body.context,
        metadata=body.metadata,
        name=body.name,
        description=body.description,
        assistant_id=body.assistant_id,
        if_exists=body.if_exists,
        tenant_id=tenant,
    )
    return assistant_json(made)


@router.post("/assistants/search")
async def search(body: Search, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    """The deployment's agents, then the tenant's assistants (newest first)."""
    found = await api.wp.assistants.search(
        graph_id=body.graph_id,
        name=body.name,
        metadata=body.metadata,
        limit=body.limit,
        offset=body.offset,
        tenant_id=tenant,
    )
    return [assistant_json(a) for a in found]


@router.post("/assistants/count")
async def count(body: Search, api: Api, tenant: Tenant) -> int:
    return await api.wp.assistants.count(
        graph_id=body.graph_id, name=body.name, metadata=body.metadata, tenant_id=tenant
    )


@router.get("/assistants/{assistant_id}")
async def get(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return assistant_json(await api.wp.assistants.get(assistant_id, tenant_id=tenant))


@router.patch("/assistants/{assistant_id}")
async def patch(assistant_id: str, body: Patch, api: Api, tenant: Tenant) -> dict[str, Any]:
    """A new version of the assistant, made the current one (its graph stays: another is refused)."""
    updated = await api.wp.assistants.update(
        assistant_id,
        graph_id=body.graph_id,
        config=body.config,
        context=body.context,
        metadata=body.metadata,
        name=body.name,
        description=body.description,
        tenant_id=tenant,
    )
    return assistant_json(updated)


@router.delete("/assistants/{assistant_id}", status_code=204, responses=errors.KEYED | errors.documented(400, 404))
async def delete(assistant_id: str, api: Api, tenant: Tenant) -> Response:
    """Forget the assistant and its versions (its runs and threads stay)."""
    await api.wp.assistants.delete(assistant_id, tenant_id=tenant)
    return Response(status_code=204)


@router.post("/assistants/{assistant_id}/versions")
async def versions(assistant_id: str, body: Versions, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    """Every version of the assistant, newest first."""
    found = await api.wp.assistants.versions(
        assistant_id, metadata=body.metadata, limit=body.limit, offset=body.offset, tenant_id=tenant
    )
    return [assistant_json(v, version_only=True) for v in found]


@router.post("/assistants/{assistant_id}/latest")
async def set_latest(assistant_id: str, body: Latest, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Make `version` the one new runs of the assistant use."""
    return assistant_json(await api.wp.assistants.set_latest(assistant_id, body.version, tenant_id=tenant))


async def _agent(api: ApiState, tenant: str, assistant_id: str) -> AgentInfo:
    """The agent (graph) the assistant runs."""
    found = await api.wp.assistants.get(assistant_id, tenant_id=tenant)
    info: AgentInfo = await api.wp.agent(found.graph_id)
    return info


@router.get("/assistants/{assistant_id}/schemas")
async def get_schemas(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Input, output and state: `{"messages": [...]}`; config and context: what `waypoint.run_config`
    reads (model, instructions, budgets, priority); and the tools' JSON schemas."""
    return schemas(await _agent(api, tenant, assistant_id))


@router.get("/assistants/{assistant_id}/graph")
async def get_graph(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return graph(await _agent(api, tenant, assistant_id))


@router.get("/assistants/{assistant_id}/subgraphs")
@router.get("/assistants/{assistant_id}/subgraphs/{namespace}")
async def get_subgraphs(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """None: an agent is one graph (model, then tools)."""
    await _agent(api, tenant, assistant_id)
    return {}
