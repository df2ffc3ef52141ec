"""A real local HTTP server that speaks the chat-completions API, for tests, the chaos demo, and
anyone trying an agent offline: `python -m waypoint.testing.fake_openai --port 8765 --script turns.json`
(which plays its script in a loop, so every run of an agent gets the same answers).

What it answers is up to a responder: by default, the next item queued with
`answer()`: a `Turn` (a normal completion, with optional tool calls) or a
`Reply` (any status, headers, raw body, delay). So 503s, 429s, slow answers and
broken JSON all go over a real socket, and the `openai` SDK sees them as it
would from a provider.

A request with `"stream": true` gets a `Turn` as server-sent events, the way providers stream:
one chunk per word of the content, the tool calls as a name chunk then argument pieces, the
finish reason, the usage in a last chunk without choices (with `stream_options.include_usage`),
then `data: [DONE]`. `Turn.chunk_delay` spaces the chunks out, and `Turn.cut_after` drops the
connection after that many chunks, as a provider that fails mid-answer does.


Prompt caching: every chat request's tools and messages go through a `PrefixTracker`
(waypoint/testing/prompt_cache.py), which records how much of the request repeats the previous
request of the same run, and the usage answered (`FakeOpenAI.prefix_stats()`, or `GET /stats` on
the server). With `count_tokens=True` the usage it answers is measured from the request instead of
the turn's fixed counts: `prompt_tokens` estimated from the request, and
`prompt_tokens_details.cached_tokens` by OpenAI's rule: the longest prefix (whole messages) an
earlier request had, 1,024 tokens at least, in steps of 128.

Capacity and bursts (`capacity=Capacity(...)`, `burst(503, 5.0)`) are every fake's
(waypoint/testing/fake_server.py): a chat call beyond the capacity gets OpenAI's 429 with
`retry-after`, a burst's answers OpenAI's error body. `POST /v1/embeddings` is answered apart from
the script, with deterministic vectors.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import time
from dataclasses import replace
from typing import Any

from waypoint.testing.capacity import Capacity, rate_limited
from waypoint.testing.fake_server import MODEL, STATS, FakeServer, serve_script
from waypoint.testing.prompt_cache import conversation_key, openai_cached
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


def usage_of(turn: Turn) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }
    if turn.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": turn.cached_tokens}
    return usage


def completion(turn: Turn, model: str, index: int) -> dict[str, Any]:
    calls = [
        {"id": f"call_{index}_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in enumerate(turn.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{index}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": usage_of(turn),
    }


def stream_chunks(turn: Turn, model: str, index: int, *, usage: bool) -> list[dict[str, Any]]:
    """The chat.completion.chunk objects that stream `turn`."""
    base = {"id": f"chatcmpl-{index}", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in pieces(turn.content or "")] if turn.content else []
    for i, (name, args) in enumerate(turn.tool_calls):
        call_id = f"call_{index}_{i}"
        head = {"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        for piece in pieces(json.dumps(args)):
            chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    chunks.append(chunk({}, "tool_calls" if turn.tool_calls else "stop"))
    if usage:
        chunks.append({**base, "choices": [], "usage": usage_of(turn)})
    return chunks


def fake_embedding(text: str, dim: int) -> list[float]:
    """A deterministic unit vector per text: its lowercased words hashed into `dim` buckets, so texts
    that share words are close, as with a real embedding model (which this is not)."""
    vec = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        vec[int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % dim] += 1.0
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm else [1.0] + [0.0] * (dim - 1)


def embeddings_answer(body: dict[str, Any], dim: int) -> dict[str, Any]:
    texts = body.get("input", [])
    texts = [texts] if isinstance(texts, str) else texts
    data = []
    for i, text in enumerate(texts):
        vector = fake_embedding(str(text), dim)
        # The openai SDK asks for base64 (packed little-endian float32) unless told otherwise.
        encoded: Any = vector
        if body.get("encoding_format") == "base64":
            encoded = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": encoded})
    tokens = sum(len(str(t).split()) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": body.get("model", "fake"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


class FakeOpenAI(FakeServer):
    """`FakeOpenAI().start()`; point `OPENAI_BASE_URL` at `.base_url`; `.stop()` when done.

    `responder(body, n)` chooses the answer to the n-th request (1-based); without
    one, queued items are answered in order, and an empty queue answers HTTP 500 (a test
    may queue the answer while the run retries). With `repeat=True` (the command line's
    `--script`) the queue starts over from its first item instead, and says so on stdout.
    """

    url_suffix = "/v1"

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        port: int = 0,
        repeat: bool = False,
        count_tokens: bool = False,
        capacity: Capacity | None = None,
    ) -> None:
        self.count_tokens = count_tokens
        # /v1/embeddings is answered apart from the chat script (deterministic vectors of this size),
        # and its requests are kept apart from `seen`, so chat numbering is the same with or without it.
        self.embedding_dim = 32
        self.embedding_requests: list[Seen] = []
        super().__init__(responder, port=port, repeat=repeat, capacity=capacity)

    def measured(self, turn: Turn, body: dict[str, Any]) -> Turn:
        """`turn` with the usage a provider with prompt caching would report for `body`."""
        messages = body.get("messages") or []
        record = self.prefixes.observe(conversation_key(messages[:2]), [body.get("tools") or [], *messages])
        if self.count_tokens:
            turn = replace(turn, prompt_tokens=record.tokens, cached_tokens=openai_cached(record.seen_prefix_tokens))
        self.prefixes.report(record, turn.prompt_tokens, turn.cached_tokens or 0)
        return turn

    def route(self, method: str, path: str) -> str | None:
        if method == "GET":
            return STATS if path.rstrip("/").endswith("/stats") else None
        if path.endswith("/embeddings"):
            return "embeddings"
        return MODEL if path.endswith("/chat/completions") else None

    def error(self, status: int, message: str) -> Reply:
        kind = {404: "not_found", 429: "rate_limit_error"}.get(status, "server_error")
        return Reply(status, {"error": {"message": message, "type": kind}})

    def no_answer(self) -> Reply:
        return Reply(500, {"error": {"message": "fake server: no scripted answer left", "type": "x"}})

    def over_capacity(self, retry_after: int, why: str) -> Reply:
        return Reply(429, rate_limited(retry_after, why), {"retry-after": str(retry_after)})

    def unscripted(self, request: Request) -> Reply | None:
        if request.route != "embeddings":
            return None
        with self._lock:
            self.embedding_requests.append(Seen(path=request.path, headers=request.headers, body=request.body))
        return Reply(200, embeddings_answer(request.body, self.embedding_dim))

    def answer_turn(self, request: Request, turn: Turn, index: int) -> Reply | Stream:
        body = request.body
        turn = self.measured(turn, body)
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = stream_chunks(turn, body.get("model", "fake"), index, usage=usage)
            return Stream(turn, [f"data: {json.dumps(c)}\n\n".encode() for c in chunks], b"data: [DONE]\n\n")
        return Reply(200, completion(turn, body.get("model", "fake"), index))


def main(argv: list[str] | None = None) -> None:
    """`python -m waypoint.testing.fake_openai --port N --script FILE`: serve until Ctrl-C."""
    parser = script_parser("waypoint.testing.fake_openai", "the OpenAI chat-completions API", 8765, "see load_script")
    parser.add_argument("--in-flight", type=int, help="answer 429 beyond this many chat calls at once")
    parser.add_argument("--per-minute", type=int, help="answer 429 beyond this many chat calls in any 60 s")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every chat call takes (default 0)")
    args = parser.parse_args(argv)

    def build() -> tuple[FakeOpenAI, list[Turn | Reply]]:
        capacity = Capacity(args.in_flight, args.per_minute, args.latency)
        server = FakeOpenAI(port=args.port, repeat=True, capacity=capacity)
        return server, load_script(args.script) if args.script else []

    serve_script(
        build,
        "fake OpenAI server on {url} with {n} scripted answer(s), played in a loop; Ctrl-C stops it",
        "OPENAI_BASE_URL={url} OPENAI_API_KEY=fake",
    )


if __name__ == "__main__":
    main()
