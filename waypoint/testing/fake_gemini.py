"""A real local HTTP server that speaks Gemini's REST API, for tests, benchmarks and trying a
`google:` agent offline: `python -m waypoint.testing.fake_gemini --port 8766 --script turns.json`
(the same script format as `waypoint.testing.fake_openai`, played in a loop).

It answers `POST /{version}/models/{model}:generateContent` with a GenerateContentResponse and
`:streamGenerateContent?alt=sse` with one as server-sent events: one chunk per word of the
content, the function calls whole in one chunk (the first with a thought signature, as Gemini 3
sends), then the finish reason with the usage. `Turn.chunk_delay` spaces the chunks out and
`Turn.cut_after` drops the connection after that many chunks. A `Reply` goes out as it is; one
with an error status and no body gets Google's error body for that status (`rpc_error` builds
one with a `google.rpc.RetryInfo`, as a 429 RESOURCE_EXHAUSTED carries).

Usage is estimated, not scripted: a request's prompt is its system instruction, tools and
contents as JSON, a token per 4 characters, and the part of it that repeats a recent request's
prefix (the same model's last 32) is reported as `cachedContentTokenCount`, as Gemini's
implicit caching does (from `min_cached_tokens`, 1024 by default as for Gemini 2.5 Flash;
`waypoint.testing.prompt_cache.ImplicitCache`). The
share per request is in `stats()` and at `GET /stats`, for benchmarks. With `api_key` set, a
request without that key (the `x-goog-api-key` header or the `key` parameter) gets Google's
400 API_KEY_INVALID. Capacity and bursts are every fake's (waypoint/testing/fake_server.py),
answered with Google's error bodies.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from waypoint.testing.capacity import Capacity
from waypoint.testing.fake_server import MODEL, STATS, FakeServer, serve_script
from waypoint.testing.prompt_cache import GEMINI_MIN_CACHED, ImplicitCache, conversation_key
from waypoint.testing.script import Reply, Request, Responder, Seen, Stream, Turn, load_script, pieces, script_parser

# google.rpc.Code names of the HTTP statuses Gemini answers with.
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
SIGNATURE = base64.b64encode(b"fake-thought-signature").decode()


def rpc_error(status: int, message: str | None = None, *, retry_delay: str | None = None) -> Reply:
    """Google's error answer: `{"error": {"code", "message", "status", "details"}}`; `retry_delay`
    ("7s") adds the google.rpc.RetryInfo detail Gemini sends with a 429."""
    name = STATUS_NAMES.get(status, "UNKNOWN")
    error: dict[str, Any] = {"code": status, "message": message or f"fake Gemini: {name}", "status": name}
    if retry_delay is not None:
        error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}]
    return Reply(status, {"error": error})


def prompt_text(body: dict[str, Any]) -> str:
    """What a request asks about, as one text: later turns extend an earlier request's text."""
    parts = [body.get("systemInstruction"), body.get("tools"), body.get("contents") or []]
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def usage(prompt: int, cached: int, completion: int) -> dict[str, Any]:
    counts = {"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion}
    if cached:
        counts["cachedContentTokenCount"] = cached
    return counts


def response(turn: Turn, model: str, index: int, prompt: int, cached: int) -> dict[str, Any]:
    """The whole GenerateContentResponse for `turn`."""
    parts: list[dict[str, Any]] = [{"text": turn.content}] if turn.content else []
    parts += function_parts(turn)
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": usage(prompt, cached, turn.completion_tokens),
        "modelVersion": model,
        "responseId": f"fake-{index}",
    }


def function_parts(turn: Turn) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"functionCall": {"name": name, "args": args}} for name, args in turn.tool_calls]
    if parts:
        parts[0]["thoughtSignature"] = SIGNATURE
    return parts


def stream_chunks(turn: Turn, model: str, index: int, prompt: int, cached: int) -> list[dict[str, Any]]:
    """The GenerateContentResponse chunks that stream `turn`: text by word, calls whole, then the finish."""
    base = {"modelVersion": model, "responseId": f"fake-{index}"}

    def chunk(parts: list[dict[str, Any]], finish: str | None = None, completion: int = 0) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {"candidates": [candidate], "usageMetadata": usage(prompt, cached, completion), **base}

    chunks = [chunk([{"text": piece}]) for piece in pieces(turn.content)] if turn.content else []
    if turn.tool_calls:
        chunks.append(chunk(function_parts(turn)))
    chunks.append(chunk([{"text": ""}], "STOP", turn.completion_tokens))
    return chunks


class FakeGemini(FakeServer):
    """`FakeGemini().start()`; set GOOGLE_GEMINI_BASE_URL to `.base_url`; `.stop()` when done.
    Answers come from `answer()` (or a `responder`), as with every fake."""

    content_type = "application/json; charset=UTF-8"

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        port: int = 0,
        repeat: bool = False,
        api_key: str | None = None,
        capacity: Capacity | None = None,
        min_cached_tokens: int = GEMINI_MIN_CACHED,
    ) -> None:
        self.api_key = api_key
        self.cache = ImplicitCache(min_cached_tokens)
        self.rejected: list[Seen] = []  # requests refused for their key (they take no scripted answer)
        self.usage: list[dict[str, Any]] = []  # per answered request: model, prompt and cached tokens
        super().__init__(responder, port=port, repeat=repeat, capacity=capacity)

    def stats(self) -> dict[str, Any]:
        """Prompt and cached tokens so far, with the cached share per request and overall."""
        with self._lock:
            rows = list(self.usage)
        prompt = sum(r["prompt_tokens"] for r in rows)
        cached = sum(r["cached_tokens"] for r in rows)
        return {
            "requests": len(rows),
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "cached_share": round(cached / prompt, 4) if prompt else 0.0,
            "per_request": rows,
        }

    def measure(self, model: str, body: dict[str, Any]) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of one request, remembered for the next ones."""
        contents = body.get("contents") or []
        # The run-level prefix record every fake keeps (`prefix_stats`, benchmarks/providers.py).
        parts = [body.get("systemInstruction"), body.get("tools"), *contents]
        record = self.prefixes.observe(conversation_key(body.get("systemInstruction"), contents[:1]), parts)
        prompt, cached = self.cache.use(model, prompt_text(body))
        self.prefixes.report(record, prompt, cached)
        with self._lock:
            self.usage.append(
                {
                    "model": model,
                    "prompt_tokens": prompt,
                    "cached_tokens": cached,
                    "cached_share": round(cached / prompt, 4) if prompt else 0.0,
                }
            )
        return prompt, cached

    def route(self, method: str, path: str) -> str | None:
        url = urlsplit(path)
        if method == "GET":
            return STATS if url.path == "/stats" else None
        route, _, call = url.path.rpartition(":")
        return MODEL if "/models/" in route and call in ("generateContent", "streamGenerateContent") else None

    def error(self, status: int, message: str) -> Reply:
        return rpc_error(status, message)

    def not_found(self, path: str) -> Reply:
        return rpc_error(404, f"no route {urlsplit(path).path}")

    def unscripted(self, request: Request) -> Reply | None:
        """A request without the key: Google's 400 API_KEY_INVALID, before any route."""
        given = request.headers.get("x-goog-api-key") or next(
            iter(parse_qs(urlsplit(request.path).query).get("key", [])), None
        )
        if self.api_key is None or given == self.api_key:
            return None
        with self._lock:
            self.rejected.append(Seen(path=request.path, headers=request.headers, body=request.body))
        refused = rpc_error(400, "API key not valid. Please pass a valid API key.")
        assert isinstance(refused.body, dict)
        refused.body["error"]["details"] = [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}
        ]
        return refused

    def answer_turn(self, request: Request, turn: Turn, index: int) -> Reply | Stream:
        route, _, call = urlsplit(request.path).path.rpartition(":")
        model = route.rpartition("/models/")[2]
        prompt, cached = self.measure(model, request.body)
        if call == "streamGenerateContent":
            # A cut drops the connection before the finish reason.
            chunks = stream_chunks(turn, model, index, prompt, cached)
            return Stream(turn, [f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks])
        return Reply(200, response(turn, model, index, prompt, cached))

    def finish(self, reply: Reply) -> Reply:
        """An error status scripted without a body gets Google's error body for it."""
        if reply.status != 200 and not reply.body:
            return Reply(reply.status, rpc_error(reply.status).body, reply.headers)
        return reply

    def stats_body(self) -> Any:
        return self.stats()


def main(argv: list[str] | None = None) -> None:
    """`python -m waypoint.testing.fake_gemini --port N --script FILE`: serve until Ctrl-C."""
    parser = script_parser(
        "waypoint.testing.fake_gemini",
        "Gemini's generateContent API",
        8766,
        "the format of waypoint.testing.fake_openai's load_script",
    )
    parser.add_argument("--api-key", help="refuse requests without this key, as Gemini does (default: any key)")
    parser.add_argument(
        "--min-cache-tokens",
        type=int,
        default=1024,
        help="shortest repeated prefix reported as cached, in tokens (default 1024)",
    )
    args = parser.parse_args(argv)
    serve_script(
        lambda: (
            FakeGemini(port=args.port, repeat=True, api_key=args.api_key, min_cached_tokens=args.min_cache_tokens),
            load_script(args.script) if args.script else [],
        ),
        "fake Gemini server on {url} with {n} scripted answer(s), played in a loop; "
        "cache stats at {url}/stats; Ctrl-C stops it",
        "GOOGLE_GEMINI_BASE_URL={url} GEMINI_API_KEY=" + (args.api_key or "fake"),
    )


if __name__ == "__main__":
    main()
