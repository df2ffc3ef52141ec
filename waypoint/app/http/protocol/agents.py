"""The open Agent Protocol's agents (langchain-ai/agent-protocol, openapi.json 0.1.6): the same catalog as
LangGraph's assistants (protocol/assistants.py), under the spec's names. An agent is an agent the
workers registered; its id and name are the agent's name."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.protocol.shapes import assistant, schemas
from waypoint.types import AgentInfo

router = APIRouter(tags=["agent protocol (open spec): agents"])

# Every Waypoint agent takes and answers messages, and every run streams.
CAPABILITIES = {"ap.io.messages": True, "ap.io.streaming": True}


class AgentSearch(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = Field(0, ge=0)


def agent_json(info: AgentInfo) -> dict[str, Any]:
    shaped = assistant(info)
    out = {"agent_id": info.name, "name": info.name, "metadata": shaped["metadata"], "capabilities": CAPABILITIES}
    if info.description:
        out["description"] = info.description
    return out


@router.post("/agents/search")
async def search_agents(body: AgentSearch, api: Api, tenant: Tenant) -> list[dict[str, Any]]:
    """The agents of this deployment; `name` matches part of a name, `metadata` every given key."""
    found = []
    for info in await api.wp.agents():
        shaped = agent_json(info)
        if body.name and body.name.lower() not in info.name.lower():
            continue
        if body.metadata and any(shaped["metadata"].get(k) != v for k, v in body.metadata.items()):
            continue
        found.append(shaped)
    return found[body.offset : body.offset + body.limit]


@router.get("/agents/{agent_id}")
async def get_agent(agent_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return agent_json(await api.wp.agent(agent_id))


@router.get("/agents/{agent_id}/schemas")
async def get_agent_schemas(agent_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Input, output and state: `{"messages": [...]}` (and a typed agent's answer); config: model, max_steps,
    priority."""
    shaped = schemas(await api.wp.agent(agent_id))
    return {
        "agent_id": agent_id,
        "input_schema": shaped["input_schema"],
        "output_schema": shaped["output_schema"],
        "state_schema": shaped["state_schema"],
        "config_schema": shaped["config_schema"],
    }
