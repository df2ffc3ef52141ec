"""A real local HTTP server that speaks Anthropic's Messages API, for tests, benchmarks and trying
an `anthropic:` agent offline: `python -m waypoint.testing.fake_anthropic --port 8766 --script turns.json`.

It is a `FakeServer` (waypoint/testing/fake_server.py) like `FakeOpenAI`, in Anthropic's wire format:
the same script (`load_script`: turns with content and tool calls, raw `status` replies with
headers, `chunk_delay`, `cut_after`, played in a loop from the command line), the same queue,
request log (`seen`), capacity and bursts (answered with Anthropic's error bodies). A
`ClaudeTurn` may also carry `thinking` (a signed thinking block before its text: the signature is
derived from the text, and a request that sends a thinking block back altered gets the API's 400),
`redacted_thinking` (its opaque data) and `stream_error` (an `error` event in the 200 stream, as
Anthropic sends `overloaded_error`).

POST /v1/messages answers JSON, or with `"stream": true` the API's server-sent events
(message_start, content_block_start / content_block_delta with text_delta, input_json_delta,
thinking_delta, signature_delta / content_block_stop, message_delta with the usage, message_stop);
`cut_after` drops the connection after that many events. A request is checked as the API checks
it (the key, `x-api-key` or a bearer token, when the fake has one, non-empty text blocks, tool results that answer the
previous turn's tool_use blocks, thinking signatures) and refused with its 400 or 401.

Usage is computed from the request, as the API computes it (tokens estimated at 4 characters
each), by Anthropic's documented caching rules (`PromptCache`): the prompt cache holds the prefixes
that ended at a `cache_control` breakpoint of an earlier request (at least the model's minimum
cacheable length, 1,024 tokens for Sonnet and Opus: `min_cached_tokens`); a request reads the
longest of them that ends at one of its breakpoints or at most 20 blocks before one
(`cache_read_input_tokens`), writes the rest up to its last breakpoint
(`cache_creation_input_tokens`), and the remainder is `input_tokens`; more than 4 breakpoints get
the API's 400. `stats()` (and GET /stats) reports per request the tokens,
how many of them repeat the previous request's prefix (`repeated_prefix`, whatever the
breakpoints), and the cache reads and writes: what a benchmark of prompt caching reads.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from waypoint.testing.capacity import Capacity
from waypoint.testing.fake_server import MODEL, STATS, FakeServer, serve_script
from waypoint.testing.prompt_cache import conversation_key
from waypoint.testing.script import (
    Reply,
    Request,
    Responder,
    Seen,
    Stream,
    Turn,
    load_script,
    pieces,
    script_parser,
)

__all__ = ["ClaudeTurn", "FakeAnthropic", "Reply", "Seen", "load_script", "repeated_prefix", "sent_key", "signature_of"]

CHARS_PER_TOKEN = 4
# Anthropic: "up to approximately 20 blocks before your explicit breakpoint" are checked for hits;
# at most 4 breakpoints a request.
LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4


@dataclass
class ClaudeTurn(Turn):
    thinking: str | None = None  # a thinking block (signed) before the text
    redacted_thinking: str | None = None  # a redacted_thinking block's opaque data
    stream_error: str | None = None  # streamed: an `error` event of this type after message_start


def signature_of(thinking: str) -> str:
    """The fake's signature of a thinking text (the API's is opaque; this one can be checked)."""
    return base64.b64encode(hashlib.sha256(b"fake-signature:" + thinking.encode()).digest()).decode()


def tokens(chars: int) -> int:
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def units(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """The request's prompt in cache order (tools, system, messages), one (text, breakpoint) per
    tool, system block and message block; the text leaves `cache_control` out."""

    def text(item: Any, prefix: str = "") -> str:
        if isinstance(item, dict):
            item = {k: v for k, v in item.items() if k != "cache_control"}
        return prefix + json.dumps(item, sort_keys=True, ensure_ascii=False)

    def marked(item: Any) -> bool:
        return isinstance(item, dict) and "cache_control" in item

    found = [(text(t, "tool:"), marked(t)) for t in body.get("tools") or []]
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    found += [(text(b, "system:"), marked(b)) for b in system]
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        found += [(text(b, f"{message.get('role')}:"), marked(b)) for b in content or []]
    return found


def prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(t for t, _ in units(body))


def repeated_prefix(previous: dict[str, Any] | None, body: dict[str, Any]) -> tuple[int, int]:
    """(tokens of `body`'s prompt that repeat `previous`'s from the start, tokens of `body`'s prompt):
    how much of a request a prompt cache could serve, whatever its breakpoints."""
    current = prompt_text(body)
    if previous is None:
        return 0, tokens(len(current))
    before = prompt_text(previous)
    same = 0
    for a, b in zip(before, current, strict=False):
        if a != b:
            break
        same += 1
    return tokens(same), tokens(len(current))


def min_cached_tokens(model: str) -> int:
    """The shortest prompt Anthropic caches for `model`: 1,024 tokens for Sonnet- and Opus-class models,
    2,048 for Haiku 3 and 3.5, 4,096 for Haiku 4.5."""
    if "haiku" not in model:
        return 1024
    return 4096 if "haiku-4" in model else 2048


class PromptCache:
    """Anthropic's prompt cache, by its documented rules. A request's prompt is its blocks in order
    (tools, system, messages: `units`). A `cache_control` breakpoint writes the prefix that ends at
    its block; a request reads the longest prefix written by an earlier request (same model) that
    ends at one of its breakpoints or at one of the `lookback` blocks before each of them; a
    prefix shorter than `min_tokens` (None: the model's minimum) is neither written nor read.
    Read and written tokens come out of `input_tokens`: written is from the end of what was read
    to the last breakpoint."""

    def __init__(self, min_tokens: int | None = None, lookback: int = LOOKBACK_BLOCKS) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self.written: set[str] = set()

    def use(self, body: dict[str, Any]) -> dict[str, int]:
        """The usage counts of one request, writing its breakpoints' prefixes."""
        model = str(body.get("model"))
        least = self.min_tokens if self.min_tokens is not None else min_cached_tokens(model)
        chain = hashlib.sha256(model.encode())
        hashes, sizes, marks = [], [], []
        size = 0
        for n, (text, mark) in enumerate(units(body)):
            chain.update(b"\x00" + text.encode())
            hashes.append(chain.copy().hexdigest())
            size += len(text) + (1 if n else 0)  # as prompt_text joins them
            sizes.append(size)
            marks.append(mark)
        total = tokens(size)
        breakpoints = [i for i, mark in enumerate(marks) if mark and tokens(sizes[i]) >= least]
        if not breakpoints:
            return {"input_tokens": total, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
        looked = {i for b in breakpoints for i in range(max(0, b - self.lookback), b + 1)}
        hit = max((i for i in looked if hashes[i] in self.written), default=None)
        read = tokens(sizes[hit]) if hit is not None else 0
        write = tokens(sizes[breakpoints[-1]]) - read
        self.written.update(hashes[i] for i in breakpoints)
        return {
            "input_tokens": total - read - write,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }


def refusal(body: dict[str, Any]) -> str | None:
    """Why the API would refuse this request with a 400, if it would."""
    marked = sum(1 for _, mark in units(body) if mark)
    if marked > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {marked}."
    messages = body.get("messages") or []
    if not messages:
        return "messages: at least one message is required"
    if messages[0].get("role") != "user":
        return "messages: the first message must use the `user` role"
    offered: set[str] = set()
    for n, message in enumerate(messages):
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if not blocks:
            return f"messages.{n}: all messages must have non-empty content"
        answered: set[str] = set()
        for block in blocks:
            kind = block.get("type")
            if kind == "text" and not block.get("text"):
                return f"messages.{n}: text content blocks must be non-empty"
            if kind == "thinking" and block.get("signature") != signature_of(block.get("thinking", "")):
                return f"messages.{n}: Invalid `signature` in `thinking` block"
            if kind == "tool_result":
                answered.add(str(block.get("tool_use_id")))
        if message.get("role") == "user" and answered - offered:
            return f"messages.{n}: unexpected `tool_use_id` in `tool_result` blocks: {sorted(answered - offered)}"
        offered = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
    return None


def sent_key(headers: dict[str, str]) -> str | None:
    """The API key a request carries: `x-api-key`, or (as the SDK sends it since 2.x) a bearer token."""
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or (bearer[len("Bearer ") :] if bearer.startswith("Bearer ") else None)


# The API's error types by HTTP status (a burst of 503s or 529s is `overloaded_error`).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def content_blocks(turn: Turn, index: int) -> list[dict[str, Any]]:
    """The answer's content blocks, complete."""
    blocks: list[dict[str, Any]] = []
    if isinstance(turn, ClaudeTurn) and turn.thinking is not None:
        blocks.append({"type": "thinking", "thinking": turn.thinking, "signature": signature_of(turn.thinking)})
    if isinstance(turn, ClaudeTurn) and turn.redacted_thinking is not None:
        blocks.append({"type": "redacted_thinking", "data": turn.redacted_thinking})
    if turn.content:
        blocks.append({"type": "text", "text": turn.content})
    for i, (name, args) in enumerate(turn.tool_calls):
        blocks.append({"type": "tool_use", "id": f"toolu_{index}_{i}", "name": name, "input": args})
    return blocks


def message(turn: Turn, model: str, index: int, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": f"msg_{index}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content_blocks(turn, index),
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": turn.completion_tokens},
    }


def stream_events(turn: Turn, model: str, index: int, usage: dict[str, int]) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events (name, data) that stream `turn`."""
    whole = message(turn, model, index, usage)
    start = {**whole, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    events.append(("ping", {"type": "ping"}))
    if isinstance(turn, ClaudeTurn) and turn.stream_error:
        events.append(("error", error_body(turn.stream_error, "Overloaded")))
        return events
    for n, block in enumerate(whole["content"]):
        kind = block["type"]
        head: dict[str, Any]
        deltas: list[dict[str, Any]]
        if kind == "thinking":
            head = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            head = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
        elif kind == "tool_use":
            head = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(json.dumps(block["input"]))]
        else:  # redacted_thinking comes whole
            head, deltas = block, []
        events.append(("content_block_start", {"type": "content_block_start", "index": n, "content_block": head}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": n, "delta": d}) for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": n}))
    delta = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    events.append(
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": {"output_tokens": turn.completion_tokens}})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class FakeAnthropic(FakeServer):
    """`FakeAnthropic(api_key="k").start()`; point `ANTHROPIC_BASE_URL` at `.base_url`; `.stop()` when done.

    Answers as every fake does (`answer()`, a `responder`, `repeat`), in Anthropic's format. With
    `api_key`, a request without that key (`sent_key`) gets the API's 401."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        port: int = 0,
        repeat: bool = False,
        api_key: str | None = None,
        capacity: Capacity | None = None,
        min_cached_tokens: int | None = None,
    ) -> None:
        self.api_key = api_key
        self.cache = PromptCache(min_cached_tokens)
        self.usage_log: list[dict[str, Any]] = []
        self._previous: dict[str, Any] | None = None  # the body of the last request answered with a turn
        super().__init__(responder, port=port, repeat=repeat, capacity=capacity)

    def stats(self) -> list[dict[str, Any]]:
        """Per request answered with a turn: tokens, the tokens repeating the previous request's
        prefix and their share, cache reads and writes (the usage it reported)."""
        with self._lock:
            return [dict(row) for row in self.usage_log]

    def _usage(self, body: dict[str, Any]) -> dict[str, int]:
        messages = body.get("messages") or []
        # The run-level prefix record every fake keeps (`prefix_stats`, benchmarks/providers.py).
        parts = [body.get("tools") or [], body.get("system"), *messages]
        record = self.prefixes.observe(conversation_key(body.get("system"), messages[:1]), parts)
        with self._lock:
            repeated, total = repeated_prefix(self._previous, body)
            self._previous = body
            usage = self.cache.use(body)
            read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
            self.prefixes.report(record, usage["input_tokens"] + read + written, read, written)
            self.usage_log.append(
                {
                    "request": len(self.seen),
                    "tokens": total,
                    "repeated_tokens": repeated,
                    "repeated_share": round(repeated / total, 4) if total else 0.0,
                    "cache_read_tokens": usage["cache_read_input_tokens"],
                    "cache_write_tokens": usage["cache_creation_input_tokens"],
                }
            )
        return usage

    def route(self, method: str, path: str) -> str | None:
        if method == "GET":
            return STATS if path.rstrip("/") == "/stats" else None
        return MODEL if path.rstrip("/") == "/v1/messages" else None

    def error(self, status: int, message: str) -> Reply:
        return Reply(status, error_body(ERROR_TYPES.get(status, "api_error"), message))

    def refuse(self, request: Request, item: Turn | Reply | None) -> Reply | None:
        if self.api_key is not None and sent_key(request.headers) != self.api_key:
            return self.error(401, "invalid x-api-key")
        why = refusal(request.body)
        if why is not None and isinstance(item, Turn):
            return self.error(400, why)
        return None

    def answer_turn(self, request: Request, turn: Turn, index: int) -> Reply | Stream:
        body = request.body
        model, usage = body.get("model", "fake"), self._usage(body)
        if body.get("stream"):
            # A cut drops the connection before message_stop.
            events = stream_events(turn, model, index, usage)
            return Stream(turn, [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events])
        return Reply(200, message(turn, model, index, usage))

    def stats_body(self) -> Any:
        return {"requests": self.stats()}


def main(argv: list[str] | None = None) -> None:
    """`python -m waypoint.testing.fake_anthropic --port N --script FILE`: serve until Ctrl-C."""
    parser = script_parser(
        "waypoint.testing.fake_anthropic",
        "Anthropic's Messages API",
        8766,
        "see waypoint.testing.fake_openai.load_script; a turn may add thinking, redacted_thinking, stream_error",
    )
    args = parser.parse_args(argv)
    serve_script(
        lambda: (
            FakeAnthropic(port=args.port, repeat=True),
            load_script(args.script, ClaudeTurn) if args.script else [],
        ),
        "fake Anthropic server on {url} with {n} scripted answer(s), played in a loop; "
        "per-request prompt and cache counts on {url}/stats; Ctrl-C stops it",
        "ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=fake",
    )


if __name__ == "__main__":
    main()
