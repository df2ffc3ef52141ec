"""Agent definitions and the registry the worker loads them into.

A user defines agents in their own module and points the worker at it with
`WAYPOINT_AGENTS=myapp.agents`; every module-level `Agent` is registered.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from waypoint.checks import check_budget
from waypoint.errors import ConfigError, InvalidInput, UnknownAgent, UnknownTool
from waypoint.mcp.servers import MCPServer
from waypoint.models.scripted import ScriptedModel
from waypoint.models.spec import Provider
from waypoint.tools import Tool
from waypoint.types import AgentInfo, RetrySpec, ToolInfo, ToolSpec

BUILTIN_AGENT_MODULES = ("waypoint.demo",)


@dataclass(frozen=True)
class Agent:
    """An agent: instructions, a model, tools and limits.

    `model` is a spec such as `openai:gpt-4o-mini`, or a `ScriptedModel` whose
    canned turns make the agent run offline (its spec is then `scripted`). `mcp` lists MCP servers
    whose tools the agent's runs use too (listed when a run starts; see `waypoint.mcp`).
    """

    name: str
    instructions: str
    model: str | ScriptedModel = "openai:gpt-4o-mini"
    tools: Sequence[Tool] = field(default_factory=tuple)
    max_steps: int = 20
    # Budgets: a run that reaches one ends with status `budget_exceeded`. None: no limit.
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_seconds: float | None = None
    # Steps in a row with a bad tool call (unknown tool, invalid arguments) before the run fails.
    max_repairs: int = 3
    model_retry: RetrySpec = field(default_factory=RetrySpec)
    # Working memory: the oldest turns leave the checkpoint once the messages pass this estimate.
    context_tokens: int = 16_000
    # The workflow continues as new after this many steps (or sooner, when Temporal suggests it).
    continue_as_new_every: int = 500
    # Long-term memory: recall this many episodes before each model call (when `memory` is on
    # and the deployment has a memory worker); every step is remembered either way.
    memory: bool = True
    recall_k: int = 5
    # Compact the run's history inline once the model reports more input tokens than this
    # share of `context_tokens` (1.0 or more: never inline; the Schedule still compacts).
    compact_at: float = 0.8
    # MCP servers whose tools a run lists when it starts, records, and calls like its own.
    mcp: Sequence[MCPServer] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(names) != len(set(names)):
            raise ConfigError(f"agent {self.name!r} has two tools with the same name: {names}")
        if self.max_steps < 1:
            raise ConfigError(f"agent {self.name!r}: max_steps must be at least 1")
        budget = {"max_steps": self.max_steps, "max_tokens": self.max_tokens, "max_cost_usd": self.max_cost_usd}
        try:
            check_budget({**budget, "deadline_seconds": self.deadline_seconds})
        except InvalidInput as exc:
            raise ConfigError(f"agent {self.name!r}: {exc}") from None
        if self.continue_as_new_every < 1:
            raise ConfigError(f"agent {self.name!r}: continue_as_new_every must be at least 1")
        servers = [s.name for s in self.mcp]
        if len(servers) != len(set(servers)):
            raise ConfigError(f"agent {self.name!r} has two MCP servers named alike: {servers}; pass name=...")

    def tool_specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=t.name,
                timeout_seconds=t.timeout,
                requires_approval=t.requires_approval,
                max_attempts=t.max_attempts,
                memory=t.memory,
                local=t.local,
                replay_safe=t.replay_safe,
            )
            for t in self.tools
        ]

    def info(self, *, openai: bool, worker: str = "") -> AgentInfo:
        """This agent for the catalog; `openai`: its worker can call OpenAI-compatible models."""
        providers = [Provider.SCRIPTED.value] if isinstance(self.model, ScriptedModel) else []
        if openai:
            providers.append(Provider.OPENAI.value)
        tools = [
            ToolInfo(
                name=t.name,
                description=t.description,
                parameters=t.parameters_schema,
                requires_approval=t.requires_approval,
                memory=t.memory,
                timeout_seconds=t.timeout,
                max_attempts=t.max_attempts,
                local=t.local,
            )
            for t in self.tools
        ]
        settings = {
            "max_steps": self.max_steps,
            "max_tokens": self.max_tokens,
            "max_cost_usd": self.max_cost_usd,
            "deadline_seconds": self.deadline_seconds,
            "max_repairs": self.max_repairs,
            "context_tokens": self.context_tokens,
            "memory": self.memory,
            "recall_k": self.recall_k,
            "compact_at": self.compact_at,
            "mcp_servers": [s.name for s in self.mcp],
        }
        return AgentInfo(self.name, self.instructions, self.model_spec, providers, tools, settings, worker)

    @property
    def model_spec(self) -> str:
        return "scripted" if isinstance(self.model, ScriptedModel) else self.model

    def tool(self, name: str, *, also: Iterable[str] = ()) -> Tool:
        """Its tool `name`; UnknownTool lists the names the model may use (its own and `also`)."""
        for t in self.tools:
            if t.name == name:
                return t
        known = ", ".join([*(t.name for t in self.tools), *also]) or "none"
        raise UnknownTool(f"agent {self.name!r} has no tool {name!r} (its tools: {known})")

    def has_tool(self, name: str) -> bool:
        return any(t.name == name for t in self.tools)

    def mcp_server(self, name: str) -> MCPServer:
        for server in self.mcp:
            if server.name == name:
                return server
        raise UnknownTool(f"agent {self.name!r} has no MCP server {name!r} any more (it had when the run started)")


class AgentRegistry:
    def __init__(self, agents: Iterable[Agent] = ()):
        self._agents: dict[str, Agent] = {}
        for agent in agents:
            self.add(agent)

    def add(self, agent: Agent) -> None:
        if agent.name in self._agents and self._agents[agent.name] is not agent:
            raise ConfigError(f"two agents are named {agent.name!r}: rename one")
        self._agents[agent.name] = agent

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            known = ", ".join(sorted(self._agents)) or "none"
            raise UnknownAgent(f"unknown agent {name!r} (known: {known}); add its module to WAYPOINT_AGENTS") from None

    def names(self) -> list[str]:
        return sorted(self._agents)

    def __iter__(self) -> Iterator[Agent]:
        return iter(self._agents[name] for name in sorted(self._agents))

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> AgentRegistry:
        registry = cls()
        for module_name in (*BUILTIN_AGENT_MODULES, *modules):
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise ConfigError(f"cannot import agent module {module_name!r}: {exc}") from None
            for value in vars(module).values():
                if isinstance(value, Agent):
                    registry.add(value)
        return registry
