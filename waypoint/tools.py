"""Tools: plain Python functions registered with `@tool`.

The JSON schema the model sees is derived from the function's type hints (via
pydantic), and the same model validates the arguments the model sends back.
A parameter annotated `ToolContext` is filled in by Waypoint and hidden from
the model.

    @tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

import pydantic

from waypoint.errors import ConfigError, ToolError
from waypoint.names import idempotency_key


def json_arguments(tool: str, raw: str) -> dict[str, Any]:
    """The model's arguments for `tool` as a JSON object, or a ToolError the model can act on."""
    try:
        data = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolError(f"arguments of {tool} are not valid JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(data, dict):
        raise ToolError(f"arguments of {tool} must be a JSON object")
    return data


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call it serves."""

    run_id: str
    tenant_id: str
    step: int
    call_index: int
    workspace: Path
    attempt: int = 1  # Temporal's attempt number of this call: above 1 after a retry
    agent: str = ""
    # The episodic store, for memory tools (`@tool(memory=True)`), which run on the memory worker,
    # and what the run may recall of it (a waypoint.memory.RecallScope: a rerun, not its original's
    # later episodes; None: everything).
    memory: Any = None
    recall: Any = None

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of the same call: `run_id:step:call_index`."""
        return idempotency_key(self.run_id, self.step, self.call_index)


class Tool:
    """A registered tool. Build one with the `@tool` decorator."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float = 300.0,
        requires_approval: bool = False,
        max_attempts: int = 3,
        memory: bool = False,
        local: bool = False,
        replay_safe: bool = False,
        read_only: bool = False,
    ):
        if local and (memory or requires_approval):
            raise ConfigError(
                f"tool {name or fn.__name__!r}: a local tool runs in the workflow's own worker, so it can be "
                "neither a memory tool nor wait for approval; drop local=True"
            )
        self.fn = fn
        self.name = name or fn.__name__
        self.timeout = timeout
        self.requires_approval = requires_approval
        self.max_attempts = max_attempts
        self.memory = memory
        self.local = local
        self.read_only = read_only
        self.asks_human = False  # only the built-in ASK_HUMAN
        # Safe to run again in a rerun with recorded tools: declared so, or without side effects.
        self.replay_safe = replay_safe or read_only
        self.description = (description or inspect.getdoc(fn) or self.name).strip()
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        self._context_param: str | None = None
        for pname, param in inspect.signature(fn).parameters.items():
            annotation = hints.get(pname, Any)
            if annotation is ToolContext:
                self._context_param = pname
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (annotation, default)
        self.args_model: type[pydantic.BaseModel] = pydantic.create_model(
            f"{self.name}_args", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @functools.cached_property
    def parameters_schema(self) -> dict[str, Any]:
        # Built once per tool: pydantic's schema generation costs about 2 ms, on every model call.
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return schema

    def openai_schema(self) -> dict[str, Any]:
        """The tool as the chat-completions API describes it."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters_schema},
        }

    def parse_arguments(self, raw: str) -> dict[str, Any]:
        """Validate the model's JSON arguments; raise ToolError with a message the model can act on."""
        data = json_arguments(self.name, raw)
        try:
            parsed = self.args_model.model_validate(data)
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        return {name: getattr(parsed, name) for name in parsed.__class__.model_fields}

    async def invoke(self, raw_arguments: str, ctx: ToolContext) -> str:
        """Validate the arguments and run the tool; its result is text (JSON for anything but a string)."""
        return await self.call(self.parse_arguments(raw_arguments), ctx)

    async def call(self, kwargs: dict[str, Any], ctx: ToolContext) -> str:
        """Run the tool on arguments already validated by `parse_arguments`."""
        kwargs = dict(kwargs)
        if self._context_param:
            kwargs[self._context_param] = ctx
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:
            # Sync tools run in a thread so they never stall the worker's event loop.
            result = await asyncio.to_thread(self.fn, **kwargs)
        if isinstance(result, str):
            return result
        return json.dumps(result, ensure_ascii=False, default=str)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = 300.0,
    requires_approval: bool = False,
    max_attempts: int = 3,
    memory: bool = False,
    local: bool = False,
    replay_safe: bool = False,
    read_only: bool = False,
) -> Any:
    """Register a function as a tool: `@tool`, or `@tool(timeout=30, requires_approval=True, ...)`.

    `timeout` bounds one attempt in seconds; a tool that fails (any exception but
    ToolError) or times out is retried up to `max_attempts` times. A tool with
    `requires_approval` waits, durably, for `waypoint approve` or `deny` before it runs.
    A `memory` tool runs on the worker that owns episodic memory and finds the store in
    `ToolContext.memory`.

    `local=True` runs it as a Temporal local activity, inside the worker that runs the run's
    workflow, with the same ledger, idempotency key, validation, timeout and span: a few
    milliseconds instead of a round trip through the server. For fast, in-process tools only
    (parsers, calculators, lookups in memory): a local tool holds the run's workflow task while it
    runs (keep it well under a few seconds: no network calls, no long computations), it does not
    heartbeat, and after a worker crash it runs again on whichever worker takes the run over rather
    than moving on its own. Long or remote calls belong in ordinary tools.

    `replay_safe=True` lets the tool run again in a rerun with recorded tools (`waypoint rerun`)
    when the call matches none the original run made: for tools safe to run twice.
    `read_only=True` says the tool has no side effects (it only reads); such a tool is replay-safe.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            timeout=timeout,
            requires_approval=requires_approval,
            max_attempts=max_attempts,
            memory=memory,
            local=local,
            replay_safe=replay_safe,
            read_only=read_only,
        )

    return wrap(fn) if fn is not None else wrap


def _ask_human(question: str) -> str:
    """Ask the human who runs you a question and wait for the answer, which is this call's result.
    Use it when you need information or a choice only they can give."""
    # The workflow answers the call with the human's answer; nothing runs this body.
    raise ToolError(f"{question!r} needs a human's answer: approve the call with one")


def _ask_human_tool() -> Tool:
    from waypoint.names import ASK_HUMAN_TOOL

    built = Tool(_ask_human, name=ASK_HUMAN_TOOL, requires_approval=True, timeout=60.0, max_attempts=1)
    built.asks_human = True
    return built


# `Agent(ask_human=True)` gives the agent this tool: it waits like requires_approval, and the
# approval's answer (`waypoint approve RUN --answer TEXT`, or an Agent Protocol resume) is its result.
ASK_HUMAN = _ask_human_tool()
