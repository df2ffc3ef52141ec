"""The base of every fake model server (`FakeOpenAI`, `FakeAnthropic`, `FakeGemini`): a real local
HTTP server that answers a provider's API from a script, so retries, streams and failures go over
a real socket and each provider's SDK sees them as it would from the provider.

What every fake shares lives here: the script (`answer()` with the items of waypoint/testing/script.py,
a `responder`, `repeat`), the request log (`seen`), the run-level prompt-prefix record (`prefix_stats`),
failure injection and the server itself. A provider fills in the hooks: `route` (what a path asks
for), `error` (its error body), `unscripted` (answers that take no scripted item), `refuse` (what
its API refuses), `answer_turn` (a turn in its wire format, whole or as a `Stream`) and `stats_body`.

Failure injection applies to model calls (the route `MODEL`) of every fake:
- Capacity (waypoint/testing/capacity.py): with `capacity=Capacity(in_flight=4, per_minute=600,
  latency=0.5)` a call beyond either limit gets a 429 with `retry-after`, and every served call
  takes `latency` seconds; `served`, `refused` and `served_at` count them either way (a refused
  call is not in `seen`, and never reaches the script or the responder).
- Bursts: `burst(503, 5.0)` answers every model call of the next five seconds with a 503 (or a 429
  with `retry-after`, with `retry_after=1`), as a provider's outage or rate-limit storm does,
  whatever the script says; `burst_answers` counts them by status. Like a refused call, a burst's
  answer is not in `seen` and never reaches the script or the responder.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from waypoint.testing.capacity import Capacity, Gate
from waypoint.testing.prompt_cache import PrefixTracker
from waypoint.testing.script import Reply, Request, Responder, Seen, Stream, Turn, send_reply, send_stream

MODEL = "model"  # the route of a model call: the script, bursts and the capacity apply to it
STATS = "stats"  # GET: the fake's own counts (`stats_body`)


class _Server(ThreadingHTTPServer):
    # Room for many clients connecting at once (a benchmark's thousand runs), and no traceback when a
    # client hangs up before its answer: a cancelled or timed-out call is something a server sees.
    request_queue_size = 1024
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeServer:
    """`Fake().start()`; point the provider's SDK at `.base_url`; `.stop()` when done.

    `responder(body, n)` chooses the answer to the n-th request (1-based); without
    one, queued items are answered in order, and an empty queue answers HTTP 500 (a test
    may queue the answer while the run retries). With `repeat=True` (the command line's
    `--script`) the queue starts over from its first item instead, and says so on stdout.
    """

    url_suffix = ""  # what `base_url` adds to the address (OpenAI's SDKs expect `/v1`)
    content_type = "application/json"

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        port: int = 0,
        repeat: bool = False,
        capacity: Capacity | None = None,
    ) -> None:
        self.gate = Gate(capacity)
        self.script: list[Turn | Reply] = []
        self.prefixes = PrefixTracker()
        self.repeat = repeat
        self._played: list[Turn | Reply] = []
        self.seen: list[Seen] = []
        self.responder = responder
        self.burst_answers: Counter[int] = Counter()
        self._burst: tuple[float, int, float | None] | None = None  # (until, monotonic; status; retry-after)
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # The hooks a provider fills in.

    def route(self, method: str, path: str) -> str | None:
        """What a request asks for: `STATS` (GET), `MODEL` (POST), another name `unscripted`
        answers, or None: no such route (a POST still takes its scripted item, then gets a 404)."""
        raise NotImplementedError

    def error(self, status: int, message: str) -> Reply:
        """The provider's error answer for `status`."""
        return Reply(status, {"error": {"code": status, "message": message}})

    def unscripted(self, request: Request) -> Reply | None:
        """An answer that takes no scripted item and is not in `seen` (None: the script answers)."""
        return None

    def refuse(self, request: Request, item: Turn | Reply | None) -> Reply | None:
        """What the provider's API would answer instead of the scripted `item`, if it refuses the request."""
        return None

    def answer_turn(self, request: Request, turn: Turn, index: int) -> Reply | Stream:
        """`turn`, the answer to the `index`-th request, in the provider's wire format."""
        raise NotImplementedError

    def finish(self, reply: Reply) -> Reply:
        """The reply as it goes out (after its delay)."""
        return reply

    def stats_body(self) -> Any:
        """What GET /stats answers."""
        return self.prefix_stats()

    def not_found(self, path: str) -> Reply:
        return self.error(404, f"no route {path}")

    def no_answer(self) -> Reply:
        return self.error(500, "fake server: no scripted answer left")

    def burst_reply(self, status: int, retry_after: float | None) -> Reply:
        reply = self.error(status, f"fake server: a burst of {status}s")
        if retry_after is not None:
            reply.headers["retry-after"] = f"{retry_after:g}"
        return reply

    def over_capacity(self, retry_after: int, why: str) -> Reply:
        reply = self.error(429, f"Rate limit reached: {why}. Please try again in {retry_after}s.")
        reply.headers["retry-after"] = str(retry_after)
        return reply

    # What every fake does the same way.

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.url_suffix}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def served(self) -> int:
        """Model calls let in (answered by the script or the responder)."""
        return self.gate.served

    @property
    def refused(self) -> int:
        """Model calls answered 429 because the capacity was used up."""
        return self.gate.refused

    @property
    def served_at(self) -> list[float]:
        """time.monotonic() of each model call let in, in order."""
        return list(self.gate.served_at)

    def prefix_stats(self) -> dict[str, Any]:
        """Per model request, its size and the prefix it repeats of the run's previous one (see
        waypoint/testing/prompt_cache.py), and the share of all input tokens that repeated."""
        return self.prefixes.stats()

    def burst(self, status: int, seconds: float, *, retry_after: float | None = None) -> None:
        """Answer every model call of the next `seconds` with HTTP `status` (503, 429...), with a
        `retry-after` header when `retry_after` is set; a later burst replaces this one."""
        with self._lock:
            self._burst = (time.monotonic() + seconds, status, retry_after)

    def _bursting(self) -> Reply | None:
        with self._lock:
            if self._burst is None or time.monotonic() >= self._burst[0]:
                return None
            _, status, retry_after = self._burst
            self.burst_answers[status] += 1
        return self.burst_reply(status, retry_after)

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

    def _reply(self, request: Request, item: Turn | Reply | None, index: int) -> Reply | Stream:
        if request.route is None:
            item = self.not_found(request.path)
        elif (refused := self.refuse(request, item)) is not None:
            item = refused
        elif item is None:
            item = self.no_answer()
        if isinstance(item, Turn):
            return self.answer_turn(request, item, index)
        return item

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if fake.route("GET", self.path) == STATS:
                    self._send(Reply(200, fake.stats_body()))
                else:
                    self._send(fake.not_found(self.path))

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsed": raw.decode(errors="replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                request = Request(self.path, fake.route("POST", self.path), headers, body)
                early = fake.unscripted(request)
                if early is None and request.route == MODEL:
                    early = fake._bursting()
                if early is not None:
                    self._send(early)
                    return
                ticket, refusal = fake.gate.admit() if request.route == MODEL else (None, None)
                if refusal is not None:
                    self._send(fake.over_capacity(*refusal))
                    return
                try:
                    item, index = fake._next(body, self.path, headers)
                    if ticket is not None and fake.gate.capacity.latency:
                        time.sleep(fake.gate.capacity.latency)
                    answer = fake._reply(request, item, index)
                    if isinstance(answer, Stream):
                        if send_stream(self, answer.turn, answer.frames) and answer.done:
                            self.wfile.write(answer.done)  # a cut stream drops without it
                        return
                    if answer.delay:
                        time.sleep(answer.delay)
                    self._send(fake.finish(answer))
                finally:
                    if ticket is not None:
                        fake.gate.release(ticket)

            def _send(self, item: Reply) -> None:
                send_reply(self, item, fake.content_type)

        return Handler


def serve_script(build: Callable[[], tuple[FakeServer, list[Turn | Reply]]], banner: str, exports: str) -> None:
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
