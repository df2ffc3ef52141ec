"""What the events of a run's log mean: the chat messages they stand for, the decisions they pin,
the short account of a step that episodic memory keeps.

Pure functions of event payloads (JSON, as stored), shared by the store (working memory by
reference), compaction and memory, so each rule is written once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from waypoint.names import PIN_TOOL, EventKind, ToolOutcome
from waypoint.types import Message

Payload = Mapping[str, Any]

# The key of an assistant message (and of its `model_response` event) that holds the answer's content
# blocks as a provider must get them back, by provider: `{"anthropic": [...thinking, text, tool_use]}`.
# The adapter of that provider sends them instead of content and tool calls; the others drop the key
# (`chat_messages`).
PROVIDER_BLOCKS = "provider_blocks"


def event_messages(kind: str, payload: Payload) -> list[Message]:
    """The chat messages an event stands for (none for bookkeeping events)."""
    if kind == EventKind.RUN_STARTED:
        return [{"role": "system", "content": payload["instructions"]}, {"role": "user", "content": payload["task"]}]
    if kind == EventKind.USER_MESSAGE:
        return [{"role": "user", "content": payload["content"]}]
    if kind == EventKind.MODEL_RESPONSE:
        message: Message = {"role": "assistant", "content": payload["content"]}
        if payload["tool_calls"]:
            message["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in payload["tool_calls"]
            ]
        if payload.get(PROVIDER_BLOCKS):
            message[PROVIDER_BLOCKS] = payload[PROVIDER_BLOCKS]
        return [message]
    if kind == EventKind.TOOL_RESULT:
        return [{"role": "tool", "tool_call_id": payload["call_id"], "content": payload["output"]}]
    return []


def chat_messages(messages: Sequence[Message]) -> list[Message]:
    """The messages in the plain chat-completions shape: without the provider blocks only one provider reads."""
    return [m if PROVIDER_BLOCKS not in m else {k: v for k, v in m.items() if k != PROVIDER_BLOCKS} for m in messages]


def tool_calls(events: Iterable[tuple[str, Payload]]) -> dict[str, dict[str, Any]]:
    """call_id -> the call ({"id", "name", "arguments"}) of every tool call in these (kind, payload) events."""
    return {
        c["id"]: c
        for kind, payload in events
        if kind == EventKind.MODEL_RESPONSE
        for c in payload.get("tool_calls") or []
    }


def decision_text(payload: Payload, call: Mapping[str, Any] | None = None) -> str:
    """A human's approval or denial, verbatim: "a human denied fetch({...}): too risky"."""
    if "text" in payload:  # a decision recorded with its own words
        return str(payload["text"])
    what = f"{call['name']}({call.get('arguments') or ''})" if call else f"tool call {payload.get('call_id', '?')}"
    why = f": {payload['reason']}" if payload.get("reason") else ""
    if payload.get("edited_input") is not None:
        why += f" with its input edited to {json.dumps(payload['edited_input'], sort_keys=True)}"
    if payload.get("answer") is not None:
        why += f", answering: {payload['answer']}"
    return f"a human {payload.get('decision', 'decided')} {what}{why}"


def pinned_call_text(call: Mapping[str, Any]) -> str:
    """The decision text of a `pin_decision` call: its `text` argument."""
    try:
        return str(json.loads(call.get("arguments") or "{}").get("text", "")).strip()
    except (json.JSONDecodeError, AttributeError):
        return str(call.get("arguments") or "").strip()


def is_pin(kind: str, payload: Payload) -> bool:
    """A pinned decision: a human's decision, or the result of a successful `pin_decision` call."""
    return kind == EventKind.DECISION or (
        kind == EventKind.TOOL_RESULT and payload.get("name") == PIN_TOOL and payload.get("outcome") == ToolOutcome.OK
    )


def pin_text(kind: str, payload: Payload) -> str:
    """The verbatim text of a pin: the decision, or the `pin_decision` call's output (its text)."""
    if kind == EventKind.DECISION:
        return decision_text(payload)
    return str(payload.get("output", ""))


def clip(text: str | None, limit: int) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


EPISODE_CHARS = 600  # an episode is a short account of a step, not its transcript


def step_account(step: int, events: Sequence[tuple[str, Payload]]) -> str:
    """What a step did and what came of it, in a few hundred characters."""
    calls: dict[str, str] = {}
    parts: list[str] = []
    for kind, payload in events:
        if kind == EventKind.USER_MESSAGE:
            parts.append(f"user said: {clip(payload['content'], 150)}")
        elif kind == EventKind.MODEL_RESPONSE:
            for call in payload.get("tool_calls", []):
                calls[call["id"]] = f"{call['name']}({clip(call['arguments'], 100)})"
            if payload.get("content"):
                parts.append(f"answered: {clip(payload['content'], 250)}")
        elif kind == EventKind.TOOL_RESULT:
            called = calls.get(payload["call_id"], payload.get("name", "tool"))
            parts.append(f"{called} -> {clip(payload.get('output'), 200)}")
    return clip(f"Step {step}: " + "; ".join(parts), EPISODE_CHARS)
