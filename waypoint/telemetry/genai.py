"""Spans for model and tool calls, after the OpenTelemetry GenAI semantic conventions.

A model call is `chat {model}` (CLIENT) with `gen_ai.*` request, response and
usage attributes (the prompt cache's reads and writes too); a tool call is `execute_tool {name}`. Each activity attempt
has its own RunActivity span, so a failed attempt's chat span (error status,
`http.response.status_code`) and the retry's are siblings under the same
StartActivity span. Prompts and completions are recorded only with
`WAYPOINT_TRACE_CONTENT=true`, and then redacted.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.trace import Span, SpanKind

from waypoint.models.spec import model_label
from waypoint.pricing import cost_usd
from waypoint.telemetry.core import current, mark_error, metrics, span
from waypoint.telemetry.redact import redact
from waypoint.types import ModelTurn


class ChatSpan:
    def __init__(self, target: Span, model: str):
        self.span = target
        self.model = model

    def record(self, turn: ModelTurn) -> None:
        """The answer: response model, finish reason, token usage (and the completion, if captured)."""
        s = self.span
        s.set_attribute("gen_ai.response.model", turn.model)
        if turn.finish_reason:
            s.set_attribute("gen_ai.response.finish_reasons", [turn.finish_reason])
        s.set_attribute("gen_ai.usage.input_tokens", turn.usage.input_tokens)
        s.set_attribute("gen_ai.usage.output_tokens", turn.usage.output_tokens)
        # Of the input tokens, those the provider's prompt cache served and those it wrote (semconv names).
        s.set_attribute("gen_ai.usage.cache_read_input_tokens", turn.usage.cache_read_tokens)
        s.set_attribute("gen_ai.usage.cache_creation_input_tokens", turn.usage.cache_write_tokens)
        telemetry = current()
        if telemetry.capture_content:
            output = {"role": "assistant", "content": turn.content, "tool_calls": [c.__dict__ for c in turn.tool_calls]}
            s.set_attribute("gen_ai.output.messages", json.dumps([redact(output)], default=str))
        found = metrics()
        found.model_attempts.add(1, {"outcome": "ok", "gen_ai.request.model": self.model})
        found.tokens.add(turn.usage.input_tokens, {"direction": "input", "gen_ai.request.model": self.model})
        found.tokens.add(turn.usage.output_tokens, {"direction": "output", "gen_ai.request.model": self.model})
        found.cost.add(cost_usd(turn.model, turn.usage, telemetry.prices), {"gen_ai.request.model": self.model})

    def budget(
        self,
        *,
        pool: str | None,
        reserved: int,
        reserved_cost_usd: float,
        max_tokens: int,
        used: int | None,
        left: int | None,
    ) -> None:
        """What the call reserved from its budgets before it went out: the tokens and cost it holds and
        the max_tokens it asks for; what its tree's pool had spent, and has left once this is held
        (None: no tree token limit)."""
        s = self.span
        s.set_attribute("gen_ai.request.max_tokens", max_tokens)
        s.set_attribute("waypoint.budget.reserved", reserved)
        s.set_attribute("waypoint.budget.reserved_cost_usd", reserved_cost_usd)
        if pool is not None:
            s.set_attribute("waypoint.budget.pool", pool)
        if used is not None:
            s.set_attribute("waypoint.budget.used", used)
        if left is not None:
            s.set_attribute("waypoint.budget.left", left)


@contextlib.contextmanager
def chat_span(
    spec: str,
    messages: list[dict[str, Any]],
    *,
    run_id: str,
    step: int,
    tenant: str,
    attempt: int,
    failed_over_from: Sequence[str] = (),
) -> Iterator[ChatSpan]:
    """`with chat_span(inp.model, messages, ...) as chat: turn = ...; chat.record(turn)`. A call the step
    failed over to names the models it failed over from (`waypoint.failed_over_from`) and carries a
    `model_failover` span event."""
    provider, model = model_label(spec)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the older name, still what many backends group by
        "gen_ai.request.model": model,
    }
    if current().capture_content:
        attributes["gen_ai.input.messages"] = json.dumps(redact(messages), default=str)
    with span(
        f"chat {model}",
        attributes,
        kind=SpanKind.CLIENT,
        run_id=run_id,
        step=step,
        tenant=tenant,
        attempt=attempt,
        failed_over_from=list(failed_over_from) or None,
    ) as target:
        if failed_over_from:
            target.add_event("model_failover", {"from": failed_over_from[-1], "to": spec})
        try:
            yield ChatSpan(target, model)
        except BaseException as exc:
            status = getattr(exc, "status", None)  # a ModelError's HTTP status
            if isinstance(status, int):
                target.set_attribute("http.response.status_code", status)
            outcome = f"http_{status}" if isinstance(status, int) else type(exc).__name__
            metrics().model_attempts.add(1, {"outcome": outcome, "gen_ai.request.model": model})
            raise


@contextlib.contextmanager
def tool_span(
    name: str,
    call_id: str,
    *,
    run_id: str,
    step: int,
    tenant: str,
    attempt: int,
    mcp_server: str | None = None,
) -> Iterator[Span]:
    """`execute_tool {name}` around one tool invocation; a raised ToolError marks it as an error. An
    MCP tool's span names its server (`waypoint.mcp_server`) and the MCP method."""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id}
    if mcp_server is not None:
        attributes["mcp.method.name"] = "tools/call"
    with span(
        f"execute_tool {name}",
        attributes,
        run_id=run_id,
        step=step,
        tenant=tenant,
        attempt=attempt,
        mcp_server=mcp_server,
    ) as target:
        yield target


__all__ = ["ChatSpan", "chat_span", "mark_error", "tool_span"]
