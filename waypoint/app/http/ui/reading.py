"""A step as a person reads it: messages with their roles and text, tool calls with their arguments
as a table, results folded past a size, and each record's raw JSON kept for a toggle (shortened:
the page never carries a long text twice). The step page's template renders what this module
builds; nothing here reads the store.

Sizes: a text up to `FOLD_CHARS` characters and `FOLD_LINES` lines shows whole; a longer one folds
behind its first line (a <details>); past `COLLAPSE_CHARS` only its start is sent and "Show all"
fetches the rest. Of a long request, the messages before the last turn fold into one toggle.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from waypoint.names import EventKind

FOLD_CHARS = 400
FOLD_LINES = 8
COLLAPSE_CHARS = 2000  # a tool result or message longer than this is sent as its start only
PREVIEW_CHARS = 600  # ...this long; the rest comes from .../tools/{i} or .../messages/{i} when asked
KEEP_OPEN = 6  # a request's last messages shown open (at least its last turn); the earlier ones fold
RAW_STRING = 300  # a raw record's string longer than this is shown as its start (the page has it whole)
HIGHLIGHT_CHARS = 200_000  # JSON longer than this is shown plain: highlighting it would cost more than it helps

_TOKEN = re.compile(
    r'(?P<key>"(?:\\.|[^"\\])*")(?=\s*:)|(?P<str>"(?:\\.|[^"\\])*")'
    r"|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<lit>\b(?:true|false|null)\b)"
)


def highlight(value: Any) -> Markup:
    """`value` as indented JSON, its keys, strings, numbers and literals in spans (j-key, j-str,
    j-num, j-lit) for the stylesheet to colour; escaped, so it is safe in a page."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > HIGHLIGHT_CHARS:
        return Markup(escape(text))
    out: list[str] = []
    at = 0
    for m in _TOKEN.finditer(text):
        out.append(str(escape(text[at : m.start()])))
        kind = m.lastgroup or "str"
        out.append(f'<span class="j-{kind}">{escape(m.group())}</span>')
        at = m.end()
    out.append(str(escape(text[at:])))
    return Markup("".join(out))


def as_json_value(text: Any) -> Any:
    """The object or array `text` holds when it is JSON text (a tool's output often is), else None."""
    if not isinstance(text, str) or not text.lstrip().startswith(("{", "[")):
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found if isinstance(found, dict | list) else None


def shortened(value: Any, limit: int = RAW_STRING) -> Any:
    """`value` with every string longer than `limit` cut to its start and a note of its length: a raw
    record next to the text it holds, without that text twice."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}… ({len(value):,} characters; shown above)"
    if isinstance(value, dict):
        return {k: shortened(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [shortened(v, limit) for v in value]
    return value


@dataclass(frozen=True)
class Text:
    """A text to show: whole, folded behind its first line, or its start with a "Show all" (`url`)."""

    text: str
    url: str | None = None
    json: Any = None  # the object or array the text is, shown highlighted

    @property
    def size(self) -> int:
        return len(self.text)

    @property
    def lines(self) -> int:
        return self.text.count("\n") + 1

    @property
    def mode(self) -> str:
        """ "whole", "fold" (a <details>), "start" (the first PREVIEW_CHARS and a fetch button)."""
        if self.size > COLLAPSE_CHARS:
            return "start" if self.url else "fold"
        if self.size > FOLD_CHARS or self.lines > FOLD_LINES:
            return "fold"
        return "whole"

    @property
    def first_line(self) -> str:
        line = self.text.strip().split("\n", 1)[0]
        return line if len(line) <= 100 else line[:100] + "…"

    @property
    def start(self) -> str:
        return self.text[:PREVIEW_CHARS]

    @property
    def body(self) -> Markup:
        """The whole text, highlighted when it is JSON."""
        if self.json is not None and self.size <= COLLAPSE_CHARS:
            return highlight(self.json)
        return Markup(escape(self.text))


def text_of(value: Any, url: str | None = None) -> Text:
    if isinstance(value, str):
        return Text(value, url, as_json_value(value))
    return Text(json.dumps(value, indent=2, ensure_ascii=False, default=str), url, value)


@dataclass(frozen=True)
class Call:
    """A tool call the model asked for: its name, id and arguments (an object shows as a table)."""

    call_id: str
    name: str
    arguments: dict[str, Any] | None  # None: not a JSON object, see `raw_arguments`
    raw_arguments: str
    index: int | None = None  # its place among the step's tool results (for a link to its card)

    @property
    def fields(self) -> list[tuple[str, Any, bool]]:
        """(name, value, is_structured) of the arguments."""
        return [(k, v, isinstance(v, dict | list)) for k, v in (self.arguments or {}).items()]


def call_of(call: dict[str, Any], index: int | None = None) -> Call:
    """A call as the model's record writes it ({id, name, arguments}) or as a request's message does
    ({id, function: {name, arguments}})."""
    inner = call.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else call
    raw = fn.get("arguments", "")
    parsed = raw if isinstance(raw, dict) else None
    if isinstance(raw, str):
        try:
            found = json.loads(raw) if raw.strip() else {}
        except ValueError:
            found = None
        parsed = found if isinstance(found, dict) else None
    shown = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    return Call(str(call.get("id") or ""), str(fn.get("name") or "?"), parsed, shown, index)


def fields_of(value: dict[str, Any]) -> list[tuple[str, Any, bool]]:
    return [(k, v, isinstance(v, dict | list)) for k, v in value.items()]


@dataclass(frozen=True)
class ChatMessage:
    index: int
    role: str
    text: Text | None
    calls: list[Call]
    tool_call_id: str | None = None
    tool_name: str | None = None  # the call's tool, for a tool message


def content_text(content: Any) -> str | None:
    """A message's content as text: a string as it is; a list of parts (text parts joined, any other
    part as JSON); None for none."""
    if content is None or content == "":
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                parts.append(json.dumps(part, indent=2, ensure_ascii=False, default=str))
        return "\n\n".join(parts)
    return json.dumps(content, indent=2, ensure_ascii=False, default=str)


def chat(messages: list[Any], url: str) -> list[ChatMessage]:
    """The request's messages, each with its role, text (long ones fetched from `url`/{i}) and calls;
    a tool message names the tool whose call it answers."""
    names: dict[str, str] = {}
    shown = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            shown.append(ChatMessage(i, "?", text_of(m), []))
            continue
        calls = [call_of(c) for c in m.get("tool_calls") or [] if isinstance(c, dict)]
        for c in calls:
            names[c.call_id] = c.name
        body = content_text(m.get("content"))
        call_id = m.get("tool_call_id")
        shown.append(
            ChatMessage(
                i,
                str(m.get("role") or "?"),
                text_of(body, f"{url}/{i}") if body is not None else None,
                calls,
                call_id,
                names.get(call_id) if call_id else None,
            )
        )
    return shown


def open_from(messages: list[ChatMessage]) -> int:
    """Where the messages shown open begin: the last KEEP_OPEN, and at least the last turn (the
    model's last message and the results after it); the ones before fold."""
    last_turn = max((m.index for m in messages if m.role == "assistant"), default=len(messages))
    return max(0, min(len(messages) - KEEP_OPEN, last_turn))


@dataclass(frozen=True)
class Answer:
    """The model's answer at a step: its text, its tool calls, its numbers, its raw record."""

    text: Text | None
    calls: list[Call]
    model: str | None
    attempt: int | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int
    latency_ms: int | None
    cost_usd: float | None
    finish_reason: str | None
    raw: Markup


def answer_of(payload: dict[str, Any], indexes: dict[str, int]) -> Answer:
    usage = payload.get("usage") or {}
    content = content_text(payload.get("content"))
    return Answer(
        text=text_of(content) if content is not None else None,
        calls=[call_of(c, indexes.get(str(c.get("id")))) for c in payload.get("tool_calls") or []],
        model=payload.get("model"),
        attempt=payload.get("attempt"),
        input_tokens=usage.get("input_tokens"),
        output_tokens=usage.get("output_tokens"),
        cached_tokens=int(usage.get("cache_read_tokens") or 0),
        latency_ms=payload.get("latency_ms"),
        cost_usd=payload.get("cost_usd"),
        finish_reason=payload.get("finish_reason"),
        raw=highlight(shortened(payload)),
    )


@dataclass(frozen=True)
class ToolRun:
    """A tool call and its result: name, outcome, time, arguments, output, raw record."""

    index: int
    name: str
    call_id: str
    outcome: str
    is_error: bool
    duration_ms: int | None
    from_ledger: bool
    call: Call | None
    output: Text
    raw: Markup


def tool_runs(results: list[dict[str, Any]], calls: dict[str, Call], url: str) -> list[ToolRun]:
    runs = []
    for i, p in enumerate(results):
        call_id = str(p.get("call_id") or "")
        output = p.get("output")
        runs.append(
            ToolRun(
                index=i,
                name=str(p.get("name") or p.get("tool") or "tool"),
                call_id=call_id,
                outcome=str(p.get("outcome") or ("error" if p.get("is_error") else "ok")),
                is_error=bool(p.get("is_error")),
                duration_ms=p.get("duration_ms"),
                from_ledger=bool(p.get("from_ledger")),
                call=calls.get(call_id),
                output=text_of(output if output is not None else "", f"{url}/{i}"),
                raw=highlight(shortened(p)),
            )
        )
    return runs


def output_text(payload: dict[str, Any]) -> str:
    """A tool result's whole output as text (what "Show all" fetches)."""
    output = payload.get("output")
    if output is None:
        return ""
    return output if isinstance(output, str) else json.dumps(output, indent=2, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class StepReading:
    """Everything the step page shows of its records, ready to render."""

    messages: list[ChatMessage]
    open_from: int
    answers: list[Answer]
    tools: list[ToolRun]
    calls: dict[str, Call]


def read_step(messages: list[Any], events: list[Any], base_url: str) -> StepReading:
    """The step's request (`messages`) and records (`events`, EventRows) as the page shows them;
    `base_url` is the step's page (its .../messages/{i} and .../tools/{i} fetch long texts)."""
    results = [e.payload for e in events if e.kind == EventKind.TOOL_RESULT]
    indexes = {str(p.get("call_id")): i for i, p in enumerate(results)}
    answers = [answer_of(e.payload, indexes) for e in events if e.kind == EventKind.MODEL_RESPONSE]
    calls = {c.call_id: c for a in answers for c in a.calls}
    shown = chat(messages, f"{base_url}/messages")
    return StepReading(
        messages=shown,
        open_from=open_from(shown),
        answers=answers,
        tools=tool_runs(results, calls, f"{base_url}/tools"),
        calls=calls,
    )
