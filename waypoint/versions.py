"""Agent versions: what a run's agent was when the run started, and its fingerprint.

A run records the fingerprint of the agent it started with: a sha256 over the agent's name, its
instructions as the run uses them (a rerun's or an assistant's override counts), the tool schemas
its model is offered (its own tools, its sub-agents as tools, the typed-answer tool), its model
spec(s) in failover order, and the names of the MCP tools the run listed at start. The version
itself is kept in Postgres under (tenant, fingerprint), so a fingerprint can be shown and two
diffed; it is content-addressed, so a version never changes once written.

A run in flight across a deploy keeps what it started with: its instructions live in checkpoint 0,
and its model calls offer the tool schemas of its version, not the worker's current ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from waypoint.names import FINAL_ANSWER_TOOL
from waypoint.typed_answers import final_answer_tool

if TYPE_CHECKING:
    from waypoint.agents import Agent, AgentRegistry

# How many hex digits a fingerprint is shown with (`waypoint runs`, the viewer); filters take any prefix.
SHORT = 12


def agent_tool_schemas(agent: Agent, agents: AgentRegistry) -> list[dict[str, Any]]:
    """The schemas a run's model is offered, besides MCP tools: the agent's own tools, its
    sub-agents, then the typed-answer tool (MCP tools go before that one: see `offered`)."""
    tools = [t.openai_schema() for t in agent.tools]
    tools += [agents.get(name).as_tool_schema() for name in agent.agent_names]
    if agent.output_schema is not None:  # a typed agent answers through this tool
        tools.append(final_answer_tool(agent.output_schema))
    return tools


def offered(tools: Sequence[dict[str, Any]], mcp: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools of one model call: `tools` (agent_tool_schemas) with the run's MCP tools before
    the typed-answer tool, the order the model has always seen."""
    tools = list(tools)
    if tools and tools[-1].get("function", {}).get("name") == FINAL_ANSWER_TOOL:
        return [*tools[:-1], *mcp, tools[-1]]
    return [*tools, *mcp]


@dataclass(frozen=True)
class AgentVersion:
    """One version of an agent, as a run started with it."""

    agent: str
    instructions: str
    tools: list[dict[str, Any]]  # agent_tool_schemas
    models: list[str]  # the run's model, then the ones it may fail over to
    mcp_tools: list[str] = field(default_factory=list)  # names of the MCP tools listed at start
    created_at: datetime | None = None  # when a run of this tenant first started with it

    @property
    def fingerprint(self) -> str:
        """sha256 (hex) of the canonical JSON of what defines the version."""
        return fingerprint_of(self.agent, self.instructions, self.tools, self.models, self.mcp_tools)

    @property
    def short(self) -> str:
        return self.fingerprint[:SHORT]

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("function", {}).get("name")) for t in self.tools]

    @classmethod
    def of(cls, row: Any) -> AgentVersion:
        return cls(
            agent=row["agent"],
            instructions=row["instructions"],
            tools=list(row["tool_schemas"] or []),
            models=list(row["models"] or []),
            mcp_tools=list(row["mcp_tools"] or []),
            created_at=row.get("created_at"),
        )


def fingerprint_of(
    agent: str, instructions: str, tools: Sequence[Any], models: Sequence[str], mcp_tools: Sequence[str]
) -> str:
    body = {
        "agent": agent,
        "instructions": instructions,
        "tools": list(tools),
        "models": list(models),
        "mcp_tools": list(mcp_tools),
    }
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def current_version(agent: Agent, agents: AgentRegistry) -> AgentVersion:
    """The version a fresh run of `agent` would start with on this worker, without its MCP tools
    (those are listed when a run starts) and without a run's own instructions or model."""
    return AgentVersion(agent.name, agent.instructions, agent_tool_schemas(agent, agents), agent.models)


def diff(a: AgentVersion, b: AgentVersion) -> dict[str, Any]:
    """What changed from `a` to `b`: instructions, tools added/removed/changed, models, MCP tools."""
    a_tools = {n: t for n, t in zip(a.tool_names, a.tools, strict=True)}
    b_tools = {n: t for n, t in zip(b.tool_names, b.tools, strict=True)}
    return {
        "instructions": a.instructions != b.instructions,
        "tools_added": [n for n in b_tools if n not in a_tools],
        "tools_removed": [n for n in a_tools if n not in b_tools],
        "tools_changed": [n for n in a_tools if n in b_tools and a_tools[n] != b_tools[n]],
        "models": a.models != b.models,
        "mcp_added": [n for n in b.mcp_tools if n not in a.mcp_tools],
        "mcp_removed": [n for n in a.mcp_tools if n not in b.mcp_tools],
    }
