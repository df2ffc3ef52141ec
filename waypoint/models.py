"""Model adapters: the one seam between an agent and a language model.

A model spec names the adapter: `openai:<model>` for any OpenAI-compatible
endpoint, `scripted` for the agent's own canned turns (demos, tests, offline).
Messages use the chat-completions shape (role, content, tool_calls,
tool_call_id), which is also how checkpoints store them.
"""

from __future__ import annotations

import inspect
import json
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from waypoint.types import ModelTurn, ToolCall, Usage

Message = dict[str, Any]


class ModelAdapter(Protocol):
    name: str

    async def complete(
        self, messages: list[Message], tools: list[dict[str, Any]], *, step: int | None = None
    ) -> ModelTurn: ...


def estimate_tokens(messages: list[Message]) -> int:
    """Rough token count (4 characters per token), for models that report no usage."""
    return math.ceil(len(json.dumps(messages, ensure_ascii=False)) / 4)


@dataclass(frozen=True)
class ScriptedTurn:
    """One canned assistant turn: a final answer (`content`) and/or tool calls `(name, arguments)`."""

    content: str | None = None
    tool_calls: Sequence[tuple[str, dict[str, Any]]] = field(default_factory=tuple)


TurnSource = ScriptedTurn | Callable[[list[Message]], ScriptedTurn | Awaitable[ScriptedTurn]]


class ScriptedModel:
    """Plays canned turns in order, turn N at step N; a turn may be a function of the
    conversation so far. A retried call gets the same answer."""

    def __init__(self, turns: Sequence[TurnSource], *, name: str = "scripted"):
        self.turns = list(turns)
        self.name = name

    async def complete(
        self, messages: list[Message], tools: list[dict[str, Any]], *, step: int | None = None
    ) -> ModelTurn:
        started = time.monotonic()
        # By step, not by counting assistant messages: old turns leave a bounded context.
        index = step - 1 if step is not None else sum(1 for m in messages if m.get("role") == "assistant")
        if index < len(self.turns):
            source = self.turns[index]
            turn = source(messages) if callable(source) else source
            if inspect.isawaitable(turn):  # an async source may wait, as a slow model would
                turn = await turn
        else:
            turn = ScriptedTurn(content="The script has no more turns.")
        calls = [
            ToolCall(id=f"call_{index + 1}_{i}", name=name, arguments=json.dumps(args, ensure_ascii=False))
            for i, (name, args) in enumerate(turn.tool_calls)
        ]
        answer = {"content": turn.content, "tool_calls": [c.__dict__ for c in calls]}
        return ModelTurn(
            model=self.name,
            content=turn.content,
            tool_calls=calls,
            usage=Usage(input_tokens=estimate_tokens(messages), output_tokens=estimate_tokens([answer])),
            finish_reason="tool_calls" if calls else "stop",
            latency_ms=int((time.monotonic() - started) * 1000),
        )


class OpenAIChatModel:
    """Chat completions through the `openai` SDK. The client must have `max_retries=0`:
    Temporal owns retries, and SDK retries inside one activity attempt would hide them."""

    def __init__(self, client: Any, model: str):
        self.client = client
        self.model = model
        self.name = f"openai:{model}"

    async def complete(
        self, messages: list[Message], tools: list[dict[str, Any]], *, step: int | None = None
    ) -> ModelTurn:
        started = time.monotonic()
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        response = await self.client.chat.completions.create(**kwargs)
        choice = response.choices[0]
        message = choice.message
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
            for c in (message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        usage = response.usage
        return ModelTurn(
            model=response.model or self.model,
            content=message.content,
            tool_calls=calls,
            usage=Usage(
                input_tokens=usage.prompt_tokens if usage else estimate_tokens(messages),
                output_tokens=usage.completion_tokens if usage else 0,
            ),
            finish_reason=choice.finish_reason,
            latency_ms=int((time.monotonic() - started) * 1000),
        )
