"""Gemini through the official `google-genai` SDK: `google:<model>` (extra `google`).

The SDK's own retries are off (`HttpRetryOptions(attempts=1)`, which also stops its hidden
reconnect loop) and so is its automatic continuation: Temporal owns retries, as for the openai
adapter, and every failure becomes a `waypoint.errors.ModelError` by the rules of
`waypoint.retry.classify_model_failure`. A 429 RESOURCE_EXHAUSTED is retried after the
`retryDelay` of its `google.rpc.RetryInfo` detail (`waypoint.retry.retry_info_delay`).

The key comes from the agent's `provider_key_env`, else GEMINI_API_KEY or GOOGLE_API_KEY; the
SDK sends it as the `x-goog-api-key` header, never in a URL, a body or a message. The endpoint
is the SDK's own default unless GOOGLE_GEMINI_BASE_URL (read by the SDK) names another, such as
`python -m waypoint.testing.fake_gemini`.

Waypoint's chat-completions messages become Gemini contents: leading system messages the
`system_instruction`, later ones (recalled memories, summaries) user text; assistant tool calls
`function_call` parts, tool results `function_response` parts. Gemini's function calls carry no
ids: a call gets the id `call_<step>_<index>`, and its result is sent back by name and position.
Gemini 3 wants the thought signatures of a model turn's function calls back, byte for byte: they
are kept in the turn's `provider_blocks` (`{"google": [{"call": index, "thought_signature": base64}]}`,
stored with the `model_response` event) and put back on those calls. A turn recorded without them
(an older run, another provider's answer after a failover) sends Google's documented placeholder
(`skip_thought_signature_validator`) on its first call instead.

Calls stream (`generate_content_stream`): each text piece goes to the `DeltaSink` as it arrives,
each function call when it is complete (Gemini streams calls whole).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import Any

import httpx
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from waypoint.config import Settings
from waypoint.deltas import DeltaSink
from waypoint.errors import ConfigError, ModelError
from waypoint.models._base import Call, Incomplete, Malformed, StreamingAdapter
from waypoint.models.spec import KEY_VARIABLES, Provider
from waypoint.retry import retry_info_delay
from waypoint.tokens import estimate_tokens
from waypoint.transcript import PROVIDER_BLOCKS
from waypoint.types import Message, ModelTurn, RetrySpec, ToolCall, Usage

PROVIDER = Provider.GOOGLE.value  # the key of this provider's data in a turn's provider_blocks

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
# Google's documented placeholder for a function call whose thought signature the client does not have.
SKIP_SIGNATURE = b"skip_thought_signature_validator"
# Gemini's finish reasons in chat-completions words (the rest: lowercased).
FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
}


def api_key(key_env: str | None) -> tuple[str, str]:
    """(variable, key): the agent's own variable, else the first usual one that is set."""
    names = (key_env,) if key_env else KEY_VARIABLES[Provider.GOOGLE]
    for name in names:
        value = (os.environ.get(name) or "").strip()
        if value:
            return name, value
    raise ConfigError(
        f"{' or '.join(names)} is not set on the worker: export it to call google: models, or use another model"
    )


def gemini_client(settings: Settings, key_env: str | None, clients: dict[Any, Any]) -> genai.Client:
    """The one way Waypoint builds a Gemini client (cached per key variable, key and endpoint)."""
    variable, key = api_key(key_env)
    base_url = os.environ.get("GOOGLE_GEMINI_BASE_URL") or None
    # The key's digest, not the key, names the cache entry: a rotated key gets a new client.
    cache_key = (Provider.GOOGLE, variable, hashlib.sha256(key.encode()).hexdigest()[:16], base_url)
    if cache_key not in clients:
        timeout = settings.model_timeout_seconds
        clients[cache_key] = genai.Client(
            api_key=key,
            http_options=types.HttpOptions(
                base_url=base_url,
                timeout=int(timeout * 1000),  # milliseconds
                retry_options=types.HttpRetryOptions(attempts=1),  # Temporal owns retries
                # An httpx client of our own: the same errors whether or not aiohttp is installed.
                httpx_async_client=httpx.AsyncClient(timeout=timeout),
            ),
        )
    return clients[cache_key]


def make_adapter(settings: Settings, model: str, key_env: str | None, clients: dict[Any, Any]) -> GeminiModel:
    """The adapter for one call of `model`; `clients` caches SDK clients per (provider, key variable)."""
    return GeminiModel(gemini_client(settings, key_env, clients), model)


def function_declarations(tools: list[dict[str, Any]]) -> list[types.FunctionDeclaration]:
    """OpenAI-shaped tool schemas as Gemini declarations; the JSON schema goes as it is
    (`parameters_json_schema` takes full JSON Schema, where `parameters` takes an OpenAPI subset)."""
    out = []
    for tool in tools:
        fn = tool.get("function", tool)
        parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        # The meta-schema marker some MCP servers add is not part of the subset Gemini reads.
        parameters = {k: v for k, v in parameters.items() if k != "$schema"}
        out.append(
            types.FunctionDeclaration(
                name=fn["name"], description=fn.get("description") or "", parameters_json_schema=parameters
            )
        )
    return out


def _text(content: Any) -> str:
    """A message's content as text (a list of parts keeps its text parts)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _arguments(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


def recorded_signatures(message: Message) -> dict[int, bytes]:
    """The thought signatures Gemini gave this assistant turn's calls, by call index (none: {})."""
    blocks = (message.get(PROVIDER_BLOCKS) or {}).get(PROVIDER) or []
    return {
        int(b["call"]): base64.b64decode(b["thought_signature"])
        for b in blocks
        if isinstance(b, dict) and "call" in b and b.get("thought_signature")
    }


def gemini_contents(messages: list[Message]) -> tuple[str | None, list[types.Content]]:
    """(system instruction, contents) for Waypoint's chat-completions messages."""
    leading: list[str] = []
    rest = list(messages)
    while rest and rest[0].get("role") == "system":
        leading.append(_text(rest.pop(0).get("content")))
    contents: list[types.Content] = []
    names: dict[str, str] = {}  # call id -> function name, for the results

    def add(role: str, parts: list[types.Part]) -> None:
        # Gemini wants turns to alternate: consecutive messages of one role share a content.
        if contents and contents[-1].role == role and contents[-1].parts is not None:
            contents[-1].parts.extend(parts)
        elif parts:
            contents.append(types.Content(role=role, parts=parts))

    for message in rest:
        role = message.get("role")
        if role == "assistant":
            parts = [types.Part(text=_text(message.get("content")))] if message.get("content") else []
            signatures = recorded_signatures(message)
            for i, call in enumerate(message.get("tool_calls") or []):
                fn = call.get("function", {})
                names[call.get("id", "")] = fn.get("name", "")
                signature = signatures.get(i) if signatures else (SKIP_SIGNATURE if i == 0 else None)
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(name=fn.get("name", ""), args=_arguments(fn.get("arguments"))),
                        thought_signature=signature,
                    )
                )
            add("model", parts)
        elif role == "tool":
            name = message.get("name") or names.get(message.get("tool_call_id", ""), "")
            response = {"result": _text(message.get("content"))}
            add("user", [types.Part(function_response=types.FunctionResponse(name=name, response=response))])
        elif role == "system":
            add("user", [types.Part(text=_text(message.get("content")))])
        else:
            add("user", [types.Part(text=_text(message.get("content")))])
    return ("\n\n".join(leading) if leading else None), contents


class GeminiModel(StreamingAdapter):
    sdk_errors = (genai_errors.APIError,)
    timeout_errors = (httpx.TimeoutException,)
    transport_errors = (httpx.TransportError,)

    def __init__(self, client: genai.Client, model: str):
        self.client = client
        self.model = model
        self.name = f"google:{model}"

    @property
    def endpoint(self) -> str:
        options = self.client._api_client._http_options  # the SDK's resolved base URL and version
        base = (options.base_url or DEFAULT_BASE_URL).rstrip("/")
        return f"{base}/{options.api_version}/models/{self.model}:streamGenerateContent"

    def config(
        self, system: str | None, tools: list[dict[str, Any]], max_tokens: int | None = None
    ) -> types.GenerateContentConfig:
        return types.GenerateContentConfig(
            system_instruction=system,
            max_output_tokens=max_tokens,  # None: the model's own bound; else what the run's budgets hold
            tools=[types.Tool(function_declarations=function_declarations(tools))] if tools else None,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            automatic_continuation=False,  # a broken stream is Temporal's to retry, not the SDK's
        )

    async def answer(self, call: Call) -> ModelTurn:
        system, contents = gemini_contents(call.messages)
        stream = await self.client.aio.models.generate_content_stream(
            model=self.model, contents=contents, config=self.config(system, call.tools, call.max_tokens)
        )
        return await self.streamed_turn(stream, call.messages, call.step, call.deltas)

    def unusable(self, exc: Exception, call: Call) -> str:
        # An unparsable body (the SDK's UnknownApiResponseError is a ValueError): what it said,
        # without the SDK's prefix.
        return str(exc).split("Raw response: ", 1)[-1]

    async def streamed_turn(
        self, stream: Any, messages: list[Message], step: int | None, deltas: DeltaSink | None
    ) -> ModelTurn:
        """Join a stream of GenerateContentResponse chunks into one turn, handing out each piece."""
        text: list[str] = []
        calls: list[ToolCall] = []
        signed: list[dict[str, Any]] = []  # the calls' thought signatures, to send back with them
        model, finish, usage, blocked = self.model, None, None, None
        async for chunk in stream:
            model = chunk.model_version or model
            usage = chunk.usage_metadata or usage
            if chunk.prompt_feedback is not None and chunk.prompt_feedback.block_reason:
                blocked = chunk.prompt_feedback.block_reason
            for candidate in (chunk.candidates or [])[:1]:
                for part in (candidate.content.parts if candidate.content else None) or []:
                    if part.thought:  # thought summaries (only sent when asked for) are not the answer
                        continue
                    if part.text:
                        text.append(part.text)
                        if deltas is not None:
                            deltas.text(part.text)
                    if part.function_call is not None:
                        index = len(calls)
                        if part.thought_signature:
                            signature = base64.b64encode(part.thought_signature).decode()
                            signed.append({"call": index, "thought_signature": signature})
                        call = ToolCall(
                            id=part.function_call.id or f"call_{step or 0}_{index}",
                            name=part.function_call.name or "",
                            arguments=json.dumps(part.function_call.args or {}),
                        )
                        calls.append(call)
                        if deltas is not None:
                            deltas.tool_call(index, call.id, call.name, call.arguments)
                if candidate.finish_reason:
                    finish = str(candidate.finish_reason.value)
        if finish is None and blocked is not None:
            finish = "SAFETY"  # the prompt itself was blocked: no candidate at all
        if finish is None:
            raise Incomplete(
                "the answer stream ended before the model finished (no finish reason): the connection dropped"
            )
        if finish == "MALFORMED_FUNCTION_CALL":
            raise Malformed("finish reason MALFORMED_FUNCTION_CALL: the model wrote a function call it cannot parse")
        reason = FINISH_REASONS.get(finish, finish.lower())
        if reason == "stop" and calls:
            reason = "tool_calls"
        return ModelTurn(
            model=model,
            content="".join(text) or None,
            tool_calls=calls,
            usage=usage_of(usage, messages),
            finish_reason=reason,
            provider_blocks={PROVIDER: signed} if signed else None,
        )

    def failure(self, exc: Exception, attempt: int, spec: RetrySpec) -> ModelError:
        """What an SDK error answer means for the retry policy (RetryInfo's delay for a 429)."""
        assert isinstance(exc, genai_errors.APIError)
        message = ": ".join(filter(None, [exc.status, exc.message])) or str(exc)
        return self.classify(attempt, spec, status=exc.code, message=message, retry_after=retry_info_delay(exc.details))


def usage_of(metadata: types.GenerateContentResponseUsageMetadata | None, messages: list[Message]) -> Usage:
    """Gemini's usage: the prompt count includes its cached part; thinking counts as output."""
    if metadata is None:
        return Usage(input_tokens=estimate_tokens(messages))
    return Usage(
        input_tokens=metadata.prompt_token_count or 0,
        output_tokens=(metadata.candidates_token_count or 0) + (metadata.thoughts_token_count or 0),
        cache_read_tokens=metadata.cached_content_token_count or 0,
    )
