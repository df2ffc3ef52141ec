"""`anthropic:<model>` through the official `anthropic` SDK: the Messages API, streamed.

As with the openai adapter (`waypoint.models.openai`), the SDK's own retries are off
(`max_retries=0`: Temporal owns retries) and every failure becomes a `ModelError` by the rules of
`waypoint.retry.classify_model_failure`: 429 and 529 (overloaded) retry after the answer's
`retry-after`, 5xx, timeouts and dropped connections retry, other 4xx fail the run with the
provider's message, a 200 that is not a message (or a stream cut before `message_stop`) is
malformed or a dropped connection. An `error` event inside a 200 stream (Anthropic sends an
`overloaded_error` that way) counts as the status its error type stands for.

The key comes from the agent's `provider_key_env`, else ANTHROPIC_API_KEY; the SDK reads
ANTHROPIC_BASE_URL (`python -m waypoint.testing.fake_anthropic` prints one). The SDK in use (2.x)
sends the key as `Authorization: Bearer <key>` (older releases used `x-api-key`); it goes there
only: never into an event, a log line or a span (the SDK's own spans are off).

Waypoint's messages are in the chat-completions shape; `anthropic_request` turns them into
Anthropic's: the leading system messages become the `system` parameter, later ones (pinned
decisions, a summary, recalled memories: they sit after the task) user text blocks in place,
tool calls `tool_use` blocks, tool results `tool_result` blocks of the next user turn, and
consecutive messages of one role one turn. An answer with `thinking` or `redacted_thinking`
blocks keeps all its blocks, verbatim with their signatures, in `ModelTurn.provider_blocks`
(`{"anthropic": [...]}`); the assistant message rebuilt from its event carries them
(`waypoint.transcript.PROVIDER_BLOCKS`) and is sent back as those blocks, as the API requires.

Prompt caching: `cache_control: {"type": "ephemeral"}` on the last system block (the prefix
tools then system; on the last tool schema when there is no system prompt), on the last block of
the request, and on the last block before the newest assistant turn. Working memory keeps
everything that changes out of the prefix (`waypoint.working_memory`): each request repeats the
previous one and adds the newest turn at its end. So the last breakpoint writes the whole request,
and the next request reads it back at its breakpoint before the newest turn, exactly where this
one ended, whatever the 20-block lookback would find; only the newest turn is written anew. That
is three of the four breakpoints the API allows.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2

from waypoint.config import Settings
from waypoint.deltas import DeltaSink
from waypoint.errors import ConfigError, ModelError
from waypoint.models import ModelAdapter
from waypoint.models._base import Call, Incomplete, StreamingAdapter
from waypoint.models.spec import KEY_VARIABLES, Provider
from waypoint.retry import retry_after_header
from waypoint.tokens import estimate_tokens
from waypoint.transcript import PROVIDER_BLOCKS
from waypoint.types import Message, ModelTurn, RetrySpec, ToolCall, Usage

PROVIDER = Provider.ANTHROPIC.value
EPHEMERAL = {"type": "ephemeral"}
# The Messages API needs a bound on the answer; Claude 3 models allow at most 4096 tokens.
MAX_TOKENS = 8192
SMALL_MODELS = ("claude-3-haiku", "claude-3-opus", "claude-3-sonnet")
# The status an `error` event inside a 200 stream stands for, by its error type.
STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
THINKING_TYPES = ("thinking", "redacted_thinking")


def make_adapter(settings: Settings, model: str, key_env: str | None, clients: dict[Any, Any]) -> ModelAdapter:
    """The adapter for one call of `model`; `clients` caches SDK clients per (provider, key variable)."""
    variable = key_env or KEY_VARIABLES[Provider.ANTHROPIC][0]
    key = os.environ.get(variable)
    if not key:
        raise ConfigError(f"{variable} is not set on the worker: export it there for anthropic: models")
    base_url = os.environ.get("ANTHROPIC_BASE_URL") or None
    cache_key = (Provider.ANTHROPIC, variable, base_url, settings.model_timeout_seconds)
    client = clients.get(cache_key)
    if client is None or client.api_key != key:  # a rotated key gets a new client
        client = anthropic.AsyncAnthropic(
            api_key=key,
            base_url=base_url,
            max_retries=0,  # Temporal owns retries
            timeout=settings.model_timeout_seconds,
            open_telemetry=False,  # Waypoint's own chat span covers the call
        )
        clients[cache_key] = client
    return AnthropicModel(client, model)


# --- request ---------------------------------------------------------------------------------


def anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function schemas (`{"type": "function", "function": {...}}`) as Anthropic tools."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool)
        item: dict[str, Any] = {
            "name": fn["name"],
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            item["description"] = fn["description"]
        out.append(item)
    return out


def _arguments(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    kept = (message.get(PROVIDER_BLOCKS) or {}).get(PROVIDER)
    if kept:
        return copy.deepcopy(kept)  # verbatim, signatures included; copied so breakpoints stay ours
    blocks: list[dict[str, Any]] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": _arguments(fn["arguments"])})
    return blocks


def anthropic_messages(messages: list[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) in Anthropic's shape; see the module docstring for the rules."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return  # an empty turn is refused by the API; it says nothing anyway
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        role, content = m["role"], m.get("content")
        if role == "system" and not out:
            if content:
                system.append({"type": "text", "text": content})
        elif role in ("system", "user"):
            add("user", [{"type": "text", "text": content}] if content else [])
        elif role == "assistant":
            add("assistant", _assistant_blocks(m))
        elif role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": content or ""}])
    return system, out


def _mark_last(message: dict[str, Any]) -> None:
    # thinking blocks cannot carry a breakpoint: the last other block of the message does
    cacheable = [b for b in message["content"] if b.get("type") not in THINKING_TYPES]
    if cacheable:
        cacheable[-1]["cache_control"] = EPHEMERAL


def mark_cache_breakpoints(
    tools: list[dict[str, Any]], system: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> None:
    """Put the cache breakpoints in place (see the module docstring): the last system block (else
    the last tool), the last block of the request, and the last block before the newest assistant
    turn (where the previous request ended)."""
    if system:
        system[-1]["cache_control"] = EPHEMERAL
    elif tools:
        tools[-1]["cache_control"] = EPHEMERAL
    if not messages:
        return
    _mark_last(messages[-1])
    newest = next((n for n in range(len(messages) - 1, 0, -1) if messages[n]["role"] == "assistant"), None)
    if newest is not None:
        _mark_last(messages[newest - 1])


def anthropic_request(
    model: str, messages: list[Message], tools: list[dict[str, Any]], max_tokens: int | None = None
) -> dict[str, Any]:
    """The body of one Messages API call, without `stream`; `max_tokens` (a budget's room) lowers the
    answer's bound below the model's usual one."""
    system, converted = anthropic_messages(messages)
    schemas = anthropic_tools(tools)
    mark_cache_breakpoints(schemas, system, converted)
    request: dict[str, Any] = {
        "model": model,
        "max_tokens": min(4096 if model.startswith(SMALL_MODELS) else MAX_TOKENS, max_tokens or MAX_TOKENS),
        "messages": converted,
    }
    if system:
        request["system"] = system
    if schemas:
        request["tools"] = schemas
    return request


# --- answer ----------------------------------------------------------------------------------


def usage_of(raw: Any, messages: list[Message]) -> Usage:
    """Waypoint's Usage from Anthropic's, whose `input_tokens` leaves out the cached ones."""
    if raw is None:
        return Usage(input_tokens=estimate_tokens(messages))
    read = getattr(raw, "cache_read_input_tokens", None) or 0
    written = getattr(raw, "cache_creation_input_tokens", None) or 0
    fresh = getattr(raw, "input_tokens", None) or 0
    return Usage(
        input_tokens=fresh + read + written,
        output_tokens=getattr(raw, "output_tokens", None) or 0,
        cache_read_tokens=read,
        cache_write_tokens=written,
    )


def turn_of(model: str, blocks: list[dict[str, Any]], stop_reason: str | None, usage: Usage) -> ModelTurn:
    """A ModelTurn from the answer's content blocks (tool_use inputs as JSON text)."""
    text = "".join(b["text"] for b in blocks if b["type"] == "text")
    calls = [
        ToolCall(id=b["id"], name=b["name"], arguments=b["_arguments"] if "_arguments" in b else json.dumps(b["input"]))
        for b in blocks
        if b["type"] == "tool_use"
    ]
    clean = [{k: v for k, v in b.items() if k != "_arguments"} for b in blocks]
    thinking = any(b["type"] in THINKING_TYPES for b in clean)
    return ModelTurn(
        model=model,
        content=text or None,
        tool_calls=calls,
        usage=usage,
        finish_reason=stop_reason,
        provider_blocks={PROVIDER: clean} if thinking else None,
    )


@dataclass
class _Joined:
    """The blocks of a streamed answer, joined from its events."""

    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    tool_index: dict[int, int] = field(default_factory=dict)  # block index -> tool call ordinal
    model: str = ""
    usage: Any = None
    stop_reason: str | None = None
    stopped: bool = False


class AnthropicModel(StreamingAdapter):
    sdk_errors = (anthropic.AnthropicError,)
    transport_errors = (httpx2.TransportError,)

    def __init__(self, client: anthropic.AsyncAnthropic, model: str):
        self.client = client
        self.model = model
        self.name = f"{PROVIDER}:{model}"

    @property
    def endpoint(self) -> str:
        return str(self.client.base_url).rstrip("/") + "/v1/messages"

    async def answer(self, call: Call) -> ModelTurn:
        request = anthropic_request(self.model, call.messages, call.tools, call.max_tokens)
        async with self.client.messages.with_streaming_response.create(**request, stream=True) as raw:
            if "text/event-stream" not in raw.headers.get("content-type", ""):
                call.body = await raw.text()
                return self.plain_turn(call.body, call.messages)
            return await self.streamed_turn(await raw.parse(), call.messages, call.deltas)

    async def streamed_turn(self, stream: Any, messages: list[Message], deltas: DeltaSink | None) -> ModelTurn:
        """Join the stream's events into one turn, handing out text and tool-input pieces as they come."""
        joined = _Joined(model=self.model)
        async for event in stream:
            self.take(joined, event, deltas)
        if not joined.stopped:
            raise Incomplete("the answer stream ended before message_stop: the connection dropped")
        blocks = [joined.blocks[i] for i in sorted(joined.blocks)]
        return turn_of(joined.model, blocks, joined.stop_reason, usage_of(joined.usage, messages))

    @staticmethod
    def take(joined: _Joined, event: Any, deltas: DeltaSink | None) -> None:
        kind = event.type
        if kind == "message_start":
            joined.model = event.message.model or joined.model
            joined.usage = event.message.usage
        elif kind == "content_block_start":
            block = event.content_block.model_dump(mode="json", exclude_none=True)
            if block["type"] == "tool_use":
                ordinal = joined.tool_index.setdefault(event.index, len(joined.tool_index))
                block["_arguments"] = ""
                if deltas is not None:
                    deltas.tool_call(ordinal, block["id"], block["name"], "")
            elif block["type"] == "text" and block.get("text") and deltas is not None:
                deltas.text(block["text"])
            joined.blocks[event.index] = block
        elif kind == "content_block_delta":
            block, delta = joined.blocks[event.index], event.delta
            if delta.type == "text_delta":
                block["text"] = block.get("text", "") + delta.text
                if deltas is not None:
                    deltas.text(delta.text)
            elif delta.type == "input_json_delta":
                block["_arguments"] += delta.partial_json
                if deltas is not None:
                    deltas.tool_call(joined.tool_index[event.index], None, None, delta.partial_json)
            elif delta.type == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.thinking
            elif delta.type == "signature_delta":
                block["signature"] = block.get("signature", "") + delta.signature
        elif kind == "content_block_stop":
            block = joined.blocks.get(event.index)
            if block is not None and block["type"] == "tool_use":
                block["_arguments"] = block["_arguments"] or "{}"
                block["input"] = _arguments(block["_arguments"])
        elif kind == "message_delta":
            joined.stop_reason = event.delta.stop_reason or joined.stop_reason
            usage = event.usage
            if joined.usage is None:
                joined.usage = usage
            else:  # cumulative counts: the delta's win where it has them
                found = {k: v for k, v in usage.model_dump().items() if v is not None and hasattr(joined.usage, k)}
                joined.usage = joined.usage.model_copy(update=found)
        elif kind == "message_stop":
            joined.stopped = True

    def plain_turn(self, body: str, messages: list[Message]) -> ModelTurn:
        """A whole message (an endpoint that does not stream)."""
        message = anthropic.types.Message.model_validate_json(body)
        blocks = [b.model_dump(mode="json", exclude_none=True) for b in message.content]
        return turn_of(message.model or self.model, blocks, message.stop_reason, usage_of(message.usage, messages))

    def failure(self, exc: Exception, attempt: int, spec: RetrySpec) -> ModelError:
        """What an SDK error means for the retry policy."""
        if isinstance(exc, anthropic.APIStatusError):
            error = exc.body.get("error") if isinstance(exc.body, dict) else None
            error = error if isinstance(error, dict) else {}
            message = str(error.get("message") or exc.message)
            status = exc.status_code
            if status < 400:  # an `error` event inside a 200 stream
                status = STREAM_ERROR_STATUS.get(str(error.get("type")), 500)
            return self.classify(
                attempt, spec, status=status, message=message, retry_after=retry_after_header(exc.response.headers)
            )
        if isinstance(exc, anthropic.APITimeoutError):
            return self.classify(attempt, spec, timed_out=True, message=str(exc))
        if isinstance(exc, anthropic.APIConnectionError):
            return self.classify(attempt, spec, unreachable=True, message=str(exc))
        if isinstance(exc, anthropic.APIResponseValidationError):
            return self.classify(attempt, spec, malformed=str(exc))
        return self.classify(attempt, spec, message=f"{type(exc).__name__}: {exc}")
