"""Chat completions through the `openai` SDK, for any OpenAI-compatible endpoint.

The client has the SDK's own retries off (`max_retries=0`): Temporal owns retries, and SDK
retries inside one activity attempt would hide them. Every failure becomes a
`waypoint.errors.ModelError` by the rules of `waypoint.retry.classify_model_failure`,
including an HTTP 200 whose body is not a chat completion.

Calls stream (`stream=True`, usage in the last chunk): each text and tool-call piece goes to
the optional `DeltaSink` as it arrives (`waypoint.deltas`), and the pieces are joined into the
same `ModelTurn` a plain completion gives. A stream that ends before its finish reason (a
dropped connection) is a retryable failure; an endpoint that answers plain JSON anyway is read
as a plain completion.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai

from waypoint.config import Settings
from waypoint.deltas import AttemptText, DeltaSink
from waypoint.errors import ConfigError, ModelError
from waypoint.models._base import Call, Incomplete, StreamingAdapter
from waypoint.retry import retry_after_header as retry_after
from waypoint.tokens import estimate_tokens
from waypoint.transcript import chat_messages
from waypoint.types import Message, ModelTurn, RetrySpec, ToolCall, Usage


def openai_client(settings: Settings, *, timeout: float | None = None) -> openai.AsyncOpenAI:
    """The one way Waypoint builds an OpenAI client: key and base URL from the settings, no SDK retries."""
    key = settings.openai_api_key
    if key is None:
        raise ConfigError("OPENAI_API_KEY is not set on the worker: export it, or use a scripted model")
    return openai.AsyncOpenAI(
        api_key=key.get_secret_value(),
        base_url=settings.openai_base_url,
        max_retries=0,  # Temporal owns retries
        timeout=timeout or settings.model_timeout_seconds,
    )


def usage_of(usage: Any, messages: list[Message]) -> Usage:
    """The SDK's usage as ours: OpenAI reports the prompt tokens its cache served in
    `prompt_tokens_details.cached_tokens` (part of `prompt_tokens`); caching is automatic, so it
    reports no cache writes."""
    if usage is None:
        return Usage(input_tokens=estimate_tokens(messages), output_tokens=0)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) or 0
    return Usage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens, cache_read_tokens=cached)


class OpenAIChatModel(StreamingAdapter):
    sdk_errors = (openai.OpenAIError,)
    transport_errors = (httpx.TransportError,)

    def __init__(self, client: openai.AsyncOpenAI, model: str):
        self.client = client
        self.model = model
        self.name = f"openai:{model}"

    @property
    def official(self) -> bool:
        """Whether the endpoint is OpenAI's own API (not an OpenAI-compatible server)."""
        return self.client.base_url.host == "api.openai.com"

    @property
    def endpoint(self) -> str:
        return str(self.client.base_url).rstrip("/") + "/chat/completions"

    async def answer(self, call: Call) -> ModelTurn:
        # The messages and tools go as `extra_body`, which the SDK sends as they are: passed as
        # parameters, it walks every message and tool schema against its TypedDicts first (about
        # 20 ms a call on 2 cores with a full window) to change nothing in our plain JSON.
        payload: dict[str, Any] = {"messages": chat_messages(call.messages)}
        if call.tools:
            payload["tools"] = call.tools
        if call.max_tokens is not None:
            # OpenAI's own API takes max_completion_tokens (its reasoning models refuse max_tokens);
            # OpenAI-compatible servers take max_tokens.
            payload["max_completion_tokens" if self.official else "max_tokens"] = call.max_tokens
        async with self.client.chat.completions.with_streaming_response.create(
            model=self.model,
            messages=[],
            stream=True,
            stream_options={"include_usage": True},
            extra_body=payload,
        ) as raw:
            if "text/event-stream" not in raw.headers.get("content-type", ""):
                call.body = await raw.text()
                return self.plain_turn(call.body, call.messages)
            return await self.streamed_turn(await raw.parse(), call.messages, call.deltas)

    async def streamed_turn(self, stream: Any, messages: list[Message], deltas: DeltaSink | None) -> ModelTurn:
        """Join a stream of chat.completion.chunk objects into one turn, handing out each piece."""
        said = AttemptText(step=0, attempt=0)
        model, finish, usage = self.model, None, None
        async for chunk in stream:
            model = chunk.model or model
            usage = chunk.usage or usage
            for choice in chunk.choices[:1]:
                delta = choice.delta
                if delta.content:
                    said.add(["text", delta.content])
                    if deltas is not None:
                        deltas.text(delta.content)
                for call in delta.tool_calls or []:
                    fn = call.function
                    piece = ["tool", call.index, call.id, fn.name if fn else None, (fn.arguments if fn else None) or ""]
                    said.add(piece)
                    if deltas is not None:
                        deltas.tool_call(*piece[1:])
                finish = choice.finish_reason or finish
        if finish is None:
            raise Incomplete(
                "the answer stream ended before the model finished (no finish reason): the connection dropped"
            )
        return ModelTurn(
            model=model,
            content=said.text or None,
            tool_calls=[
                ToolCall(id=c["id"] or f"call_{i}", name=c["name"] or "", arguments=c["arguments"] or "{}")
                for i, c in sorted(said.tool_calls.items())
            ],
            usage=usage_of(usage, messages),
            finish_reason=finish,
        )

    def plain_turn(self, body: str, messages: list[Message]) -> ModelTurn:
        """A whole chat completion (an endpoint that does not stream)."""
        from openai.types.chat import ChatCompletion

        response = ChatCompletion.model_validate_json(body)
        choice = response.choices[0]
        message = choice.message
        usage = response.usage
        functions = [(c.id, getattr(c, "function", None)) for c in (message.tool_calls or [])]
        calls = [ToolCall(id=i, name=f.name, arguments=f.arguments or "{}") for i, f in functions if f is not None]
        return ModelTurn(
            model=response.model or self.model,
            content=message.content,
            tool_calls=calls,
            usage=usage_of(usage, messages),
            finish_reason=choice.finish_reason,
        )

    def failure(self, exc: Exception, attempt: int, spec: RetrySpec) -> ModelError:
        """What an SDK error means for the retry policy."""
        if isinstance(exc, openai.APIStatusError):
            status, after = exc.status_code, retry_after(exc.response.headers)
            return self.classify(attempt, spec, status=status, message=exc.message, retry_after=after)
        if isinstance(exc, openai.APITimeoutError):
            return self.classify(attempt, spec, timed_out=True, message=str(exc))
        if isinstance(exc, openai.APIConnectionError):
            return self.classify(attempt, spec, unreachable=True, message=str(exc))
        return self.classify(attempt, spec, message=f"{type(exc).__name__}: {exc}")
