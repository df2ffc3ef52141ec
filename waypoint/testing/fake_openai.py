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

Capacity (waypoint/testing/capacity.py): with `capacity=Capacity(in_flight=4, per_minute=600,
latency=0.5)` a chat call beyond either limit gets OpenAI's 429 with `retry-after`, and every served
call takes `latency` seconds; `served`, `refused` and `served_at` count them either way (a refused
call is not in `seen`, and never reaches the script or the responder).

Bursts: `burst(503, 5.0)` answers every chat call of the next five seconds with a 503 (or a 429
with `retry-after`, with `retry_after=1`), as a provider's outage or rate-limit storm does, whatever
the script says; `burst_answers` counts them by status. Like a refused call, a burst's answer is not
in `seen` and never reaches the script or the responder.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import re
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from waypoint.testing.capacity import Capacity, Gate, rate_limited
from waypoint.testing.prompt_cache import PrefixTracker, conversation_key, openai_cached


@dataclass
class Turn:
    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    prompt_tokens: int = 11
    completion_tokens: int = 7
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens when set
    chunk_delay: float = 0.0  # seconds between streamed chunks
    cut_after: int | None = None  # streamed: drop the connection after this many chunks


@dataclass
class Reply:
    status: int = 200
    body: str | dict[str, Any] = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


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


def pieces(text: str) -> list[str]:
    """A text cut as a model streams it: one piece per word, with the spaces that follow it."""
    return re.findall(r"\s*\S+\s*|\s+", text) or [text]


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


Responder = Callable[[dict[str, Any], int], "Turn | Reply | None"]


class _Server(ThreadingHTTPServer):
    # Room for many clients connecting at once (a benchmark's thousand runs), and no traceback when a
    # client hangs up before its answer: a cancelled or timed-out call is something a server sees.
    request_queue_size = 1024
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAI:
    """`FakeOpenAI().start()`; point `OPENAI_BASE_URL` at `.base_url`; `.stop()` when done.

    `responder(body, n)` chooses the answer to the n-th request (1-based); without
    one, queued items are answered in order, and an empty queue answers HTTP 500 (a test
    may queue the answer while the run retries). With `repeat=True` (the command line's
    `--script`) the queue starts over from its first item instead, and says so on stdout.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        port: int = 0,
        repeat: bool = False,
        count_tokens: bool = False,
        capacity: Capacity | None = None,
    ) -> None:
        self.gate = Gate(capacity)
        self.script: list[Turn | Reply] = []
        self.count_tokens = count_tokens
        self.prefixes = PrefixTracker()
        self.repeat = repeat
        self._played: list[Turn | Reply] = []
        self.seen: list[Seen] = []
        self.responder = responder
        # /v1/embeddings is answered apart from the chat script (deterministic vectors of this size),
        # and its requests are kept apart from `seen`, so chat numbering is the same with or without it.
        self.embedding_dim = 32
        self.embedding_requests: list[Seen] = []
        self.burst_answers: Counter[int] = Counter()
        self._burst: tuple[float, Reply] | None = None  # (until, on the monotonic clock; the answer)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def served(self) -> int:
        """Chat calls let in (answered by the script or the responder)."""
        return self.gate.served

    @property
    def refused(self) -> int:
        """Chat calls answered 429 because the capacity was used up."""
        return self.gate.refused

    @property
    def served_at(self) -> list[float]:
        """time.monotonic() of each chat call let in, in order."""
        return list(self.gate.served_at)

    def prefix_stats(self) -> dict[str, Any]:
        """Per chat request, its size and the prefix it repeats of the run's previous one (see
        waypoint/testing/prompt_cache.py), and the share of all input tokens that repeated."""
        return self.prefixes.stats()

    def measured(self, turn: Turn, body: dict[str, Any]) -> Turn:
        """`turn` with the usage a provider with prompt caching would report for `body`."""
        messages = body.get("messages") or []
        record = self.prefixes.observe(conversation_key(messages[:2]), [body.get("tools") or [], *messages])
        if self.count_tokens:
            turn = replace(turn, prompt_tokens=record.tokens, cached_tokens=openai_cached(record.seen_prefix_tokens))
        self.prefixes.report(record, turn.prompt_tokens, turn.cached_tokens or 0)
        return turn

    def burst(self, status: int, seconds: float, *, retry_after: float | None = None) -> None:
        """Answer every chat call of the next `seconds` with HTTP `status` (503, 429...), with a
        `retry-after` header when `retry_after` is set; a later burst replaces this one."""
        kind = "rate_limit_error" if status == 429 else "server_error"
        body = {"error": {"message": f"fake server: a burst of {status}s", "type": kind}}
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        with self._lock:
            self._burst = (time.monotonic() + seconds, Reply(status, body, headers))

    def _bursting(self) -> Reply | None:
        with self._lock:
            if self._burst is None or time.monotonic() >= self._burst[0]:
                return None
            reply = self._burst[1]
            self.burst_answers[reply.status] += 1
            return reply

    def answer(self, *items: Turn | Reply) -> None:
        with self._lock:
            self.script.extend(items)

    def _next(self, body: dict[str, Any], path: str, headers: dict[str, str]) -> tuple[Turn | Reply | None, int]:
        with self._lock:
            self.seen.append(Seen(path=path, headers=headers, body=body))
            index = len(self.seen)
            if self.responder is None:
                if not self.script and self.repeat and self._played:
                    print(
                        f"the script's {len(self._played)} answer(s) are used up: answering from the first again",
                        flush=True,
                    )
                    self.script, self._played = self._played, []
                if not self.script:
                    return None, index
                item = self.script.pop(0)
                if self.repeat:
                    self._played.append(item)
                return item, index
        return self.responder(body, index), index

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/").endswith("/stats"):
                    self._send(Reply(200, fake.prefix_stats()))
                else:
                    self._send(Reply(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}}))

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsed": raw.decode(errors="replace")}
                if self.path.endswith("/embeddings"):
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    with fake._lock:
                        fake.embedding_requests.append(Seen(path=self.path, headers=headers, body=body))
                    self._send(Reply(200, embeddings_answer(body, fake.embedding_dim)))
                    return
                chat = self.path.endswith("/chat/completions")
                storm = fake._bursting() if chat else None
                if storm is not None:
                    self._send(storm)
                    return
                ticket, refusal = fake.gate.admit() if chat else (None, None)
                if refusal is not None:
                    retry_after, why = refusal
                    self._send(Reply(429, rate_limited(retry_after, why), {"retry-after": str(retry_after)}))
                    return
                try:
                    self._answer(body, chat)
                finally:
                    if ticket is not None:
                        fake.gate.release(ticket)

            def _answer(self, body: dict[str, Any], chat: bool) -> None:
                item, index = fake._next(body, self.path, {k.lower(): v for k, v in self.headers.items()})
                if chat and fake.gate.capacity.latency:
                    time.sleep(fake.gate.capacity.latency)
                if not chat:
                    item = Reply(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                elif item is None:
                    item = Reply(500, {"error": {"message": "fake server: no scripted answer left", "type": "x"}})
                if isinstance(item, Turn):
                    item = fake.measured(item, body)
                if isinstance(item, Turn) and body.get("stream"):
                    usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._stream(item, stream_chunks(item, body.get("model", "fake"), index, usage=usage))
                    return
                if isinstance(item, Turn):
                    item = Reply(200, completion(item, body.get("model", "fake"), index))
                if item.delay:
                    time.sleep(item.delay)
                self._send(item)

            def _stream(self, turn: Turn, chunks: list[dict[str, Any]]) -> None:
                if send_stream(self, turn, [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]):
                    self.wfile.write(b"data: [DONE]\n\n")  # a cut stream drops without it

            def _send(self, item: Reply) -> None:
                send_reply(self, item)

        return Handler


def send_reply(handler: BaseHTTPRequestHandler, item: Reply, content_type: str = "application/json") -> None:
    """A whole JSON (or text) answer, with its status and headers: every fake's non-streamed reply."""
    data = (item.body if isinstance(item.body, str) else json.dumps(item.body)).encode()
    handler.send_response(item.status)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(data)))
    for key, value in item.headers.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


def send_stream(handler: BaseHTTPRequestHandler, turn: Turn, frames: list[bytes]) -> bool:
    """Server-sent events, one frame at a time, `turn.chunk_delay` apart; False when the turn's
    `cut_after` drops the connection first. HTTP/1.0 without a length: the body ends when the
    connection closes."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.end_headers()
    for n, frame in enumerate(frames):
        if turn.cut_after is not None and n >= turn.cut_after:
            handler.close_connection = True
            return False
        if n and turn.chunk_delay:
            time.sleep(turn.chunk_delay)
        handler.wfile.write(frame)
        handler.wfile.flush()
    return True


def load_script(path: str, turn: type[Turn] = Turn) -> list[Turn | Reply]:
    """A script file: a JSON list, one item per request, in order. An item with `status` is a raw
    reply (`{"status": 503, "body": {...}, "headers": {...}, "delay": 1.5}`); any other is a turn
    (`{"content": "..."}` or `{"tool_calls": [["add", {"a": 1, "b": 2}]]}`, with optional
    `prompt_tokens`, `completion_tokens`, `chunk_delay` and `cut_after`, and the fields of `turn`,
    a subclass of Turn another fake answers with)."""
    with open(path) as fh:
        items = json.load(fh)
    if not isinstance(items, list):
        raise ValueError(f"{path}: a script is a JSON list of turns and replies")
    script: list[Turn | Reply] = []
    for item in items:
        if "status" in item:
            script.append(Reply(**item))
        else:
            calls = [(name, args) for name, args in item.get("tool_calls", [])]
            script.append(turn(**{**item, "tool_calls": calls}))
    return script


def serve_script(build: Callable[[], tuple[FakeOpenAI, list[Turn | Reply]]], banner: str, exports: str) -> None:
    """What every fake's command line does: build the server and its script (a bad script or a taken
    port is one `error:` line, exit 1), say where it listens and what to export, serve until Ctrl-C.
    `banner` and `exports` are formatted with `url` and `n` (the script's answers)."""
    try:
        server, script = build()
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    server.answer(*script)
    print(banner.format(url=server.base_url, n=len(script)))
    print("  export " + exports.format(url=server.base_url), flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._server.server_close()


def script_parser(module: str, speaks: str, port: int, script_help: str) -> argparse.ArgumentParser:
    """The command line every fake server shares: `python -m MODULE --port N --script FILE`."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=f"A local server that speaks {speaks} and answers from a script."
    )
    parser.add_argument("--port", type=int, default=port, help=f"port on 127.0.0.1 (default {port})")
    parser.add_argument(
        "--script", help=f"JSON list of turns and replies, answered in order and again from the first ({script_help})"
    )
    return parser


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
