"""Agent definitions and the registry the worker loads them into.

A user defines agents in their own module and points the worker at it with
`WAYPOINT_AGENTS=myapp.agents`; every module-level `Agent` is registered.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from waypoint.checks import check_budget
from waypoint.errors import ConfigError, InvalidInput, UnknownAgent, UnknownTool
from waypoint.evals.scorers import Scorer
from waypoint.mcp.servers import MCPServer
from waypoint.models.scripted import ScriptedModel
from waypoint.models.spec import Provider, parse_model_spec
from waypoint.names import ASK_HUMAN_TOOL, FINAL_ANSWER_TOOL
from waypoint.tools import ASK_HUMAN, Tool
from waypoint.typed_answers import OutputType, output_schema
from waypoint.types import AgentInfo, RetrySpec, ToolInfo, ToolSpec

BUILTIN_AGENT_MODULES = ("waypoint.demo", "waypoint.demo_research")
# The argument every sub-agent tool takes: what the sub-agent is asked to do.
TASK_ARGUMENT = "task"


@dataclass(frozen=True)
class Agent:
    """An agent: instructions, a model, tools and limits.

    `model` is a spec such as `openai:gpt-4o-mini`, or a `ScriptedModel` whose
    canned turns make the agent run offline (its spec is then `scripted`), or a tuple of specs
    tried in order: a step whose model still fails after `failover_after` attempts with errors a
    retry may heal (or that the worker cannot call) goes to the next one, and the run stays there.
    `mcp` lists MCP servers whose tools the agent's runs use too (listed when a run starts; see
    `waypoint.mcp`).

    `agents` lists sub-agents (agents, or names of agents the worker loads too): the model sees
    each as a tool taking a `task` (plus the sub-agent's own `parameters`), and calling it starts a
    child run whose final answer is the tool's result. `description` is what a parent's model
    reads about this agent as a sub-agent (its instructions' first line when empty).
    """

    name: str
    instructions: str
    model: str | ScriptedModel | tuple[str, ...] = "openai:gpt-4o-mini"
    tools: Sequence[Tool] = field(default_factory=tuple)
    max_steps: int = 20
    # Budgets: a run that reaches one ends with status `budget_exceeded`. None: no limit.
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_seconds: float | None = None
    # Steps in a row with a bad tool call (unknown tool, invalid arguments) before the run fails.
    max_repairs: int = 3
    model_retry: RetrySpec = field(default_factory=RetrySpec)
    # With several models: failed attempts of one model before a step goes to the next.
    failover_after: int = 3
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
    # The variable the worker reads this agent's provider API key from, in place of the provider's
    # usual one (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY): a name, never the key itself.
    provider_key_env: str | None = None
    # Sub-agents, offered to the model as tools; each call is a child run.
    agents: Sequence[Agent | str] = field(default_factory=tuple)
    description: str = ""
    # JSON-schema properties of the extra arguments a parent passes when it calls this agent.
    parameters: Mapping[str, Any] = field(default_factory=dict)
    # Sub-agent runs of one run at once (the rest wait, in call order), and how deep a tree grows.
    max_parallel_agents: int = 8
    max_agent_depth: int = 4
    # A typed answer: a pydantic model class, or a JSON schema of an object. The model answers by
    # calling a `final_answer` tool with it, validated (see waypoint.typed_answers); None: text.
    output_type: OutputType | None = None
    # Give the model an `ask_human(question)` tool: the run waits (like requires_approval) until a
    # human answers (`waypoint approve RUN --answer TEXT`, an Agent Protocol resume), and the answer
    # is the call's result.
    ask_human: bool = False
    # output_type's JSON schema (what the catalog, the run's plan and the final_answer tool carry).
    output_schema: dict[str, Any] | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ask_human and not any(t is ASK_HUMAN for t in self.tools):
            if any(t.name == ASK_HUMAN_TOOL for t in self.tools):
                raise ConfigError(f"agent {self.name!r} has ask_human=True and its own tool {ASK_HUMAN_TOOL!r}")
            object.__setattr__(self, "tools", (*self.tools, ASK_HUMAN))
        names = [t.name for t in self.tools] + self.agent_names
        if len(names) != len(set(names)):
            raise ConfigError(f"agent {self.name!r} has two tools (or sub-agents) with the same name: {names}")
        if self.max_parallel_agents < 1 or self.max_agent_depth < 1:
            raise ConfigError(f"agent {self.name!r}: max_parallel_agents and max_agent_depth must be at least 1")
        if TASK_ARGUMENT in self.parameters:
            raise ConfigError(f"agent {self.name!r}: {TASK_ARGUMENT!r} is every sub-agent's own argument; rename it")
        if self.max_steps < 1:
            raise ConfigError(f"agent {self.name!r}: max_steps must be at least 1")
        budget = {"max_steps": self.max_steps, "max_tokens": self.max_tokens, "max_cost_usd": self.max_cost_usd}
        try:
            check_budget({**budget, "deadline_seconds": self.deadline_seconds})
        except InvalidInput as exc:
            raise ConfigError(f"agent {self.name!r}: {exc}") from None
        if self.continue_as_new_every < 1:
            raise ConfigError(f"agent {self.name!r}: continue_as_new_every must be at least 1")
        self._check_models()
        servers = [s.name for s in self.mcp]
        if len(servers) != len(set(servers)):
            raise ConfigError(f"agent {self.name!r} has two MCP servers named alike: {servers}; pass name=...")
        if self.output_type is not None:
            object.__setattr__(self, "output_schema", output_schema(self.name, self.output_type))
            if FINAL_ANSWER_TOOL in names:
                raise ConfigError(
                    f"agent {self.name!r} has output_type, so {FINAL_ANSWER_TOOL!r} is its answer tool: rename its own"
                )

    def _check_models(self) -> None:
        if isinstance(self.model, list):  # a list reads as the tuple it means
            object.__setattr__(self, "model", tuple(self.model))
        if not isinstance(self.model, tuple):
            return
        specs = self.model
        if not specs or not all(isinstance(m, str) for m in specs):
            raise ConfigError(f"agent {self.name!r}: model is a spec, a ScriptedModel, or a tuple of specs: {specs!r}")
        for spec in specs:
            try:
                parsed = parse_model_spec(spec)
            except InvalidInput as exc:
                raise ConfigError(f"agent {self.name!r}: {exc}") from None
            if parsed.provider == Provider.SCRIPTED:
                raise ConfigError(f"agent {self.name!r}: a failover list names provider models, not 'scripted'")
        if len(set(specs)) != len(specs):
            raise ConfigError(f"agent {self.name!r} lists a model twice: {list(specs)}")
        if self.failover_after < 1:
            raise ConfigError(f"agent {self.name!r}: failover_after must be at least 1")

    @property
    def models(self) -> list[str]:
        """Its model specs in failover order (one, unless `model` is a tuple)."""
        if isinstance(self.model, tuple):
            return list(self.model)
        return [self.model_spec]

    @property
    def fallback_models(self) -> list[str]:
        """The models a run fails over to, in order, after the first."""
        return self.models[1:]

    @property
    def agent_names(self) -> list[str]:
        return [a if isinstance(a, str) else a.name for a in self.agents]

    @property
    def summary(self) -> str:
        """What a parent's model reads about this agent."""
        return self.description or (self.instructions.strip().splitlines() or [self.name])[0]

    def as_tool_schema(self) -> dict[str, Any]:
        """This agent as a tool of its parents, in the chat-completions shape."""
        properties = {TASK_ARGUMENT: {"type": "string", "description": f"what {self.name} should do"}}
        properties.update(self.parameters)
        parameters = {"type": "object", "properties": properties, "required": [TASK_ARGUMENT]}
        function = {"name": self.name, "description": self.summary, "parameters": parameters}
        return {"type": "function", "function": function}

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
                asks_human=t.asks_human,
            )
            for t in self.tools
        ]

    def info(self, *, callable_providers: Iterable[str], worker: str = "") -> AgentInfo:
        """This agent for the catalog; `callable_providers`: the model providers its worker can call
        for it (the SDK installed, a key set), besides its own scripted turns."""
        providers = [Provider.SCRIPTED.value] if isinstance(self.model, ScriptedModel) else []
        providers += [str(p) for p in callable_providers]
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
            "provider_key_env": self.provider_key_env,
            "agents": self.agent_names,
            "max_parallel_agents": self.max_parallel_agents,
            "max_agent_depth": self.max_agent_depth,
            "output_schema": self.output_schema,
            "models": self.models,
            "failover_after": self.failover_after,
        }
        return AgentInfo(self.name, self.instructions, self.model_spec, providers, tools, settings, worker)

    @property
    def model_spec(self) -> str:
        if isinstance(self.model, tuple):
            return self.model[0]
        return "scripted" if isinstance(self.model, ScriptedModel) else self.model

    def tool(self, name: str, *, also: Iterable[str] = ()) -> Tool:
        """Its tool `name`; UnknownTool lists the names the model may use (its own and `also`)."""
        for t in self.tools:
            if t.name == name:
                return t
        known = ", ".join([*(t.name for t in self.tools), *self.agent_names, *also]) or "none"
        raise UnknownTool(f"agent {self.name!r} has no tool {name!r} (its tools: {known})")

    def has_tool(self, name: str) -> bool:
        return any(t.name == name for t in self.tools)

    def mcp_server(self, name: str) -> MCPServer:
        for server in self.mcp:
            if server.name == name:
                return server
        raise UnknownTool(f"agent {self.name!r} has no MCP server {name!r} any more (it had when the run started)")


class AgentRegistry:
    """The agents a worker serves, and the `@scorer`s of the same modules (waypoint.evals)."""

    def __init__(self, agents: Iterable[Agent] = (), *, scorers: Iterable[Scorer] = ()):
        self._agents: dict[str, Agent] = {}
        self.scorers: dict[str, Scorer] = {}
        for agent in agents:
            self.add(agent)
        for found in scorers:
            self.add_scorer(found)
        self.check_tree()

    def add_scorer(self, found: Scorer) -> None:
        if self.scorers.get(found.name, found) is not found:
            raise ConfigError(f"two scorers are named {found.name!r}: rename one with @scorer(name=...)")
        self.scorers[found.name] = found

    def add(self, agent: Agent) -> None:
        """Register `agent` and the sub-agents it lists as agents (not by name)."""
        if agent.name in self._agents and self._agents[agent.name] is not agent:
            raise ConfigError(f"two agents are named {agent.name!r}: rename one")
        self._agents[agent.name] = agent
        for sub in agent.agents:
            if isinstance(sub, Agent) and self._agents.get(sub.name) is not sub:
                self.add(sub)

    def check_tree(self) -> None:
        """Every sub-agent named is registered, and no agent reaches itself through its sub-agents."""
        for agent in self._agents.values():
            for name in agent.agent_names:
                if name not in self._agents:
                    known = ", ".join(sorted(self._agents))
                    raise ConfigError(
                        f"agent {agent.name!r} lists sub-agent {name!r}, which no module defines (known: {known})"
                    )
        done: set[str] = set()

        def visit(name: str, path: list[str]) -> None:
            if name in path:
                cycle = " -> ".join([*path[path.index(name) :], name])
                raise ConfigError(f"sub-agents make a cycle: {cycle}; an agent may not reach itself")
            if name in done:
                return
            for sub in self._agents[name].agent_names:
                visit(sub, [*path, name])
            done.add(name)

        for name in sorted(self._agents):
            visit(name, [])

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
                elif isinstance(value, Scorer):
                    registry.add_scorer(value)
        registry.check_tree()
        return registry
