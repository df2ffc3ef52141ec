"""What an Agent Protocol `config.configurable` and `context` mean to a Waypoint run.

A run (and an assistant, which holds them for its runs) may set: `model` (a model spec),
`instructions` (the system prompt in place of the agent's own), the budget (`max_steps`,
`max_tokens`, `max_cost_usd`, `deadline_seconds`) and `priority`. Keys LangGraph clients send on
their own (thread and checkpoint ids, `langgraph_*`, ...) are ignored; any other key is refused,
naming the ones that mean something, so a setting never silently does nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from waypoint.checks import check_budget, check_instructions, check_name, check_priority
from waypoint.errors import InvalidInput
from waypoint.models.spec import parse_model_spec
from waypoint.types import Budget

# Sent by LangGraph clients and servers whatever the graph (ids of where a run is, who runs it).
IGNORED = frozenset(
    {
        "thread_id",
        "checkpoint_id",
        "checkpoint_ns",
        "checkpoint_map",
        "run_id",
        "assistant_id",
        "graph_id",
        "user_id",
        "cron_id",
        "run_attempt",
        "host",
        "__pregel_task_id",
    }
)


@dataclass(frozen=True)
class RunConfig:
    """A run's settings from config and context; None: not set (the agent's own)."""

    model: str | None = None
    instructions: str | None = None
    max_steps: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    deadline_seconds: float | None = None
    priority: int | None = None

    def budget(self) -> Budget:
        return Budget(self.max_steps, self.max_tokens, self.max_cost_usd, self.deadline_seconds)

    def under(self, base: RunConfig) -> RunConfig:
        """These settings, with `base`'s where these set none (a run's own over its assistant's)."""
        mine = asdict(self)
        return RunConfig(**{k: mine[k] if mine[k] is not None else v for k, v in asdict(base).items()})


KEYS = tuple(f.name for f in fields(RunConfig))


def _ignored(key: str) -> bool:
    return key in IGNORED or key.startswith(("langgraph_", "__"))


def run_config(config: dict[str, Any] | None, context: dict[str, Any] | None) -> RunConfig:
    """The settings `config.configurable` and `context` hold (context wins where both set one);
    InvalidInput naming the keys that mean something for any other key, or a value that does not fit."""
    if config is not None and not isinstance(config, dict):
        raise InvalidInput('config must be an object such as {"configurable": {"model": "openai:gpt-4o-mini"}}')
    configurable = (config or {}).get("configurable") or {}
    if not isinstance(configurable, dict) or (context is not None and not isinstance(context, dict)):
        raise InvalidInput("config.configurable and context must be objects")
    found = {k: v for k, v in {**configurable, **(context or {})}.items() if not _ignored(k)}
    unknown = sorted(set(found) - set(KEYS))
    if unknown:
        raise InvalidInput(
            f"config/context key(s) {', '.join(unknown)} mean nothing to a Waypoint agent: "
            f"the keys that do are {', '.join(KEYS)}"
        )
    model = found.get("model")
    if model is not None:
        if not isinstance(model, str):
            raise InvalidInput("config model must be a model spec such as openai:gpt-4o-mini")
        parse_model_spec(check_name("the model", model))
    instructions = found.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidInput("config instructions must be text: the system prompt in place of the agent's")
    check_budget({k: found.get(k) for k in ("max_steps", "max_tokens", "max_cost_usd", "deadline_seconds")})
    return RunConfig(
        model=model,
        instructions=check_instructions(instructions),
        max_steps=found.get("max_steps"),
        max_tokens=found.get("max_tokens"),
        max_cost_usd=found.get("max_cost_usd"),
        deadline_seconds=found.get("deadline_seconds"),
        priority=check_priority(found.get("priority")),
    )
