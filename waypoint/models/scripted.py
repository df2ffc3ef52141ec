"""ScriptedModel: canned turns that make an agent run offline (demos, tests)."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from waypoint.errors import ScriptError, WaypointError
from waypoint.tokens import estimate_tokens
from waypoint.types import Message, ModelTurn, RetrySpec, ToolCall, Usage


@dataclass(frozen=True)
class ScriptedTurn:
    """One canned assistant turn: a final answer (`content`) and/or tool calls `(name, arguments)`."""

    content: str | None = None
    tool_calls: Sequence[tuple[str, dict[str, Any]]] = field(default_factory=tuple)


TurnSource = ScriptedTurn | Callable[[list[Message]], ScriptedTurn | Awaitable[ScriptedTurn]]


class ScriptedModel:
    """Plays canned turns in order, turn N at step N; a turn may be a function of the
    conversation so far. A retried call gets the same answer. Past the last turn it answers
    that the script has no more turns; a turn function that raises fails the run with a
    `ScriptError` naming the turn (the same input would fail the same way)."""

    def __init__(self, turns: Sequence[TurnSource], *, name: str = "scripted"):
        self.turns = list(turns)
        self.name = name

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        step: int | None = None,
        attempt: int = 1,
        retry: RetrySpec | None = None,
        deltas: object = None,  # canned turns do not stream: their text arrives with the step's events
        max_tokens: int | None = None,  # canned turns answer what they answer
    ) -> ModelTurn:
        started = time.monotonic()
        # By step, not by counting assistant messages: old turns leave a bounded context.
        index = step - 1 if step is not None else sum(1 for m in messages if m.get("role") == "assistant")
        if index < len(self.turns):
            turn = await self._play(self.turns[index], messages, index)
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

    async def _play(self, source: TurnSource, messages: list[Message], index: int) -> ScriptedTurn:
        try:
            turn = source(messages) if callable(source) else source
            if inspect.isawaitable(turn):  # an async source may wait, as a slow model would
                turn = await turn
        except WaypointError:
            raise
        except Exception as exc:
            where = f"{getattr(source, '__module__', '?')}.{getattr(source, '__qualname__', repr(source))}"
            detail = f"{exc} ({type(exc).__name__})" if str(exc) else type(exc).__name__
            raise ScriptError(
                f"the scripted model's turn {index + 1} ({where}) failed on this conversation: {detail}; "
                "fix that turn of the script"
            ) from exc
        return turn
