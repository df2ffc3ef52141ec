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
    with pytest.raises(ConfigError, match="two tools \\(or sub-agents\\) with the same name"):
        Agent(name="b", instructions="i", tools=(search, search))
    with pytest.raises(UnknownAgent, match="WAYPOINT_AGENTS"):
        AgentRegistry([agent]).get("zzz")
    with pytest.raises(ConfigError, match="cannot import agent module 'no.such.module'"):
        AgentRegistry.from_modules(["no.such.module"])


def test_registry_loads_every_agent_of_a_module():
    from tests.agents import TEST_AGENTS
    from waypoint.demo_research import research

    names = AgentRegistry.from_modules(["tests.agents"]).names()
    builtin = ["demo", research.name, *research.agent_names]  # the two demos' agents
    assert names == sorted([*builtin, *(a.name for a in TEST_AGENTS)])


def one_line(error: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("agents", "cycle"),
    [
        ([Agent(name="a", instructions="i", agents=("a",))], "a -> a"),
        (
            [Agent(name="a", instructions="i", agents=("b",)), Agent(name="b", instructions="i", agents=("a",))],
            "a -> b -> a",
        ),
        # a cycle deeper down, through an agent given as an object: the cycle alone is named
        (
            [
                Agent(name="top", instructions="i", agents=("a",)),
                Agent(name="a", instructions="i", agents=(Agent(name="b", instructions="i", agents=("c",)),)),
                Agent(name="c", instructions="i", agents=("a",)),
            ],
            "a -> b -> c -> a",
        ),
    ],
    ids=["itself", "a-b-a", "deeper"],
)
def test_registry_refuses_sub_agents_that_make_a_cycle(agents: list[Agent], cycle: str):
    with pytest.raises(ConfigError) as caught:
        AgentRegistry(agents)
    assert one_line(caught) == f"sub-agents make a cycle: {cycle}; an agent may not reach itself"


def test_registry_refuses_an_unknown_sub_agent_and_a_sub_agent_named_like_a_tool():
    with pytest.raises(ConfigError) as caught:
        AgentRegistry([Agent(name="a", instructions="i", agents=("ghost",))])
    assert one_line(caught) == "agent 'a' lists sub-agent 'ghost', which no module defines (known: a)"
    for sub in ("search", Agent(name="search", instructions="i")):
        with pytest.raises(ConfigError) as clash:
            Agent(name="a", instructions="i", tools=(search,), agents=(sub,))
        assert one_line(clash) == ("agent 'a' has two tools (or sub-agents) with the same name: ['search', 'search']")
    # a tree without a cycle, diamonds included, is fine
    leaf = Agent(name="leaf", instructions="i")
    AgentRegistry(
        [Agent(name="top", instructions="i", agents=(Agent(name="l", instructions="i", agents=(leaf,)), leaf))]
    )


def test_a_sub_agent_runs_plan_takes_the_smaller_depth_limit_of_its_agent_and_its_caller():
    from waypoint.activities.checkpoints import CheckpointActivities
    from waypoint.types import Budget, ParentRef, StartRunInput

    leaf = Agent(name="leaf", instructions="i", max_agent_depth=3)
    plans = CheckpointActivities(None, AgentRegistry([leaf]))  # type: ignore[arg-type]  # plan() reads no store

    def limit(parent: ParentRef | None) -> int:
        return plans.plan(StartRunInput("r", "t", "leaf", "task", None, Budget(), parent=parent)).max_agent_depth

    assert limit(None) == 3  # a root: its agent's own
    assert limit(ParentRef("p", 1, 0, "p", depth=1, max_depth=1)) == 1  # the caller's tree stops at 1
    assert limit(ParentRef("p", 1, 0, "p", depth=1, max_depth=4)) == 3
    assert limit(ParentRef("p", 1, 0, "p", depth=1)) == 3  # callers from before passed none
