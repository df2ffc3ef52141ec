"""Agent Protocol assistants: the agents the workers registered (read-only: agents are code)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.errors import not_supported
from waypoint.app.http.protocol.shapes import assistant, graph, schemas

router = APIRouter(tags=["agent protocol: assistants"])


class Search(BaseModel):
    model_config = ConfigDict(extra="ignore")
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


async def _found(api: Api, body: Search) -> list[dict[str, Any]]:
    found = []
    for info in await api.wp.agents():
        shaped = assistant(info)
        if body.graph_id and body.graph_id != info.name:
            continue
        if body.name and body.name.lower() not in info.name.lower():
            continue
        if body.metadata and any(shaped["metadata"].get(k) != v for k, v in body.metadata.items()):
            continue
        found.append(shaped)
    return found


@router.post("/assistants/search")
async def search(body: Search, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    """The agents of this deployment (each is its own graph)."""
    return (await _found(api, body))[body.offset : body.offset + body.limit]


@router.post("/assistants/count")
async def count(body: Search, api: Api, tenant: Tenant) -> int:
    return len(await _found(api, body))


@router.get("/assistants/{assistant_id}")
async def get(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return assistant(await api.wp.agent(assistant_id))


@router.get("/assistants/{assistant_id}/schemas")
async def get_schemas(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Input, output and state: `{"messages": [...]}`; config: model and max_steps; and the tools' JSON schemas."""
    return schemas(await api.wp.agent(assistant_id))


@router.get("/assistants/{assistant_id}/graph")
async def get_graph(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return graph(await api.wp.agent(assistant_id))


@router.get("/assistants/{assistant_id}/subgraphs")
@router.get("/assistants/{assistant_id}/subgraphs/{namespace}")
async def get_subgraphs(assistant_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """None: an agent is one graph (model, then tools)."""
    await api.wp.agent(assistant_id)
    return {}


@router.post("/assistants")
@router.patch("/assistants/{assistant_id}")
@router.delete("/assistants/{assistant_id}")
@router.post("/assistants/{assistant_id}/versions")
@router.post("/assistants/{assistant_id}/latest")
async def change(api: Api, tenant: Tenant) -> None:
    """Not supported: assistants are the agents your workers load."""
    raise not_supported(
        "assistants are the agents the workers load from code: define an Agent in a module named by "
        "WAYPOINT_AGENTS and restart the worker"
    )
