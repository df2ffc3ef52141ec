"""Tool registry: schemas from type hints, argument validation, context injection."""

from __future__ import annotations

from pathlib import Path

import pytest

from waypoint import Agent, ToolContext, ToolError, tool
from waypoint.agents import AgentRegistry
from waypoint.errors import ConfigError, UnknownAgent, UnknownTool


@tool
def search(ctx: ToolContext, query: str, limit: int = 5, tags: list[str] | None = None) -> list[str]:
    """Search the notes."""
    return [f"{ctx.idempotency_key}:{query}:{limit}:{tags}"]


CTX = ToolContext(run_id="run-1", tenant_id="t", step=3, call_index=1, workspace=Path("."))


def test_schema_comes_from_type_hints_and_hides_the_context():
    schema = search.openai_schema()
    assert schema["function"]["name"] == "search"
    assert schema["function"]["description"] == "Search the notes."
    params = schema["function"]["parameters"]
    assert params["required"] == ["query"]
    assert set(params["properties"]) == {"query", "limit", "tags"}
    assert params["properties"]["limit"] == {"type": "integer", "default": 5}
    assert params["additionalProperties"] is False


async def test_invoke_validates_and_passes_the_context():
    assert await search.invoke('{"query": "x", "limit": "7"}', CTX) == '["run-1:3:1:x:7:None"]'
    with pytest.raises(ToolError, match="invalid arguments for search: limit"):
        await search.invoke('{"query": "x", "limit": "many"}', CTX)
    with pytest.raises(ToolError, match="not valid JSON"):
        await search.invoke('{"query": ', CTX)
    with pytest.raises(ToolError, match="unexpected|Extra inputs"):
        await search.invoke('{"query": "x", "ctx": 1}', CTX)
    with pytest.raises(ToolError, match="must be a JSON object"):
        await search.invoke("[1]", CTX)


def test_agent_and_registry_errors_name_the_fix():
    agent = Agent(name="a", instructions="i", tools=(search,))
    with pytest.raises(UnknownTool, match="its tools: search"):
        agent.tool("nope")
    with pytest.raises(ConfigError, match="two tools with the same name"):
        Agent(name="b", instructions="i", tools=(search, search))
    with pytest.raises(UnknownAgent, match="WAYPOINT_AGENTS"):
        AgentRegistry([agent]).get("zzz")
    with pytest.raises(ConfigError, match="cannot import agent module 'no.such.module'"):
        AgentRegistry.from_modules(["no.such.module"])


def test_registry_loads_every_agent_of_a_module():
    from tests.agents import TEST_AGENTS

    names = AgentRegistry.from_modules(["tests.agents"]).names()
    assert names == sorted(["demo", *(a.name for a in TEST_AGENTS)])
