"""Chat completions through the `openai` SDK, for any OpenAI-compatible endpoint.

The client has the SDK's own retries off (`max_retries=0`): Temporal owns retries, and SDK
retries inside one activity attempt would hide them. Every failure becomes a
`waypoint.errors.ModelError` by the rules of `waypoint.retry.classify_model_failure`,
including an HTTP 200 whose body is not a chat completion.
"""

from __future__ import annotations

import json
import random
import time
from datetime import timedelta
from typing import Any

import openai

from waypoint.config import Settings
from waypoint.errors import ConfigError, ModelError
from waypoint.retry import classify_model_failure
from waypoint.tokens import estimate_tokens
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


def retry_after(headers: Any) -> timedelta | None:
    """Delay asked for by `retry-after-ms` or `retry-after` (seconds), if any."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = get(name)
        if value:
            try:
                return timedelta(seconds=float(value) * scale)
            except ValueError:
                continue
    return None


class OpenAIChatModel:
    def __init__(self, client: openai.AsyncOpenAI, model: str):
        self.client = client
        self.model = model
        self.name = f"openai:{model}"

    @property
    def endpoint(self) -> str:
        return str(self.client.base_url).rstrip("/") + "/chat/completions"

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        step: int | None = None,
        attempt: int = 1,
        retry: RetrySpec | None = None,
    ) -> ModelTurn:
        spec = retry or RetrySpec()
        started = time.monotonic()
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        try:
            raw = await self.client.chat.completions.with_raw_response.create(**kwargs)
        except openai.OpenAIError as exc:
            raise self.failure(exc, attempt, spec) from exc
        body = raw.text
        try:
            response = raw.parse()
            choice = response.choices[0]
            message = choice.message
            usage = response.usage
            calls = [
                ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "{}")
                for c in (message.tool_calls or [])
                if getattr(c, "function", None) is not None
            ]
            turn = ModelTurn(
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
        except (AttributeError, IndexError, TypeError, ValueError, json.JSONDecodeError, openai.OpenAIError):
            raise classify_model_failure(
                endpoint=self.endpoint, attempt=attempt, spec=spec, jitter=random.uniform(0.5, 1.0), malformed=body
            ) from None
        return turn

    def failure(self, exc: openai.OpenAIError, attempt: int, spec: RetrySpec) -> ModelError:
        """What an SDK error means for the retry policy."""
        common: dict[str, Any] = {
            "endpoint": self.endpoint,
            "attempt": attempt,
            "spec": spec,
            "jitter": random.uniform(0.5, 1.0),
        }
        if isinstance(exc, openai.APIStatusError):
            return classify_model_failure(
                **common, status=exc.status_code, message=exc.message, retry_after=retry_after(exc.response.headers)
            )
        if isinstance(exc, openai.APITimeoutError):
            return classify_model_failure(**common, timed_out=True, message=str(exc))
        if isinstance(exc, openai.APIConnectionError):
            return classify_model_failure(**common, unreachable=True, message=str(exc))
        return classify_model_failure(**common, message=f"{type(exc).__name__}: {exc}")
