"""A webhook's receiving end for the tests: an HTTP server on 127.0.0.1 that answers with the status
codes it is given and keeps every request it was sent."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that answers each POST with the next of `statuses` (the last one
    again once they run out) and keeps what it was sent."""

    statuses: list[int]
    got: list[Received] = field(default_factory=list)
    url: str = ""

    @property
    def delivered(self) -> list[Received]:
        return [r for r, code in zip(self.got, self.answered, strict=False) if 200 <= code < 300]

    @property
    def answered(self) -> list[int]:
        return [self.statuses[min(i, len(self.statuses) - 1)] for i in range(len(self.got))]


@contextlib.contextmanager
def receiving(statuses: list[int], port: int = 0) -> Iterator[Receiver]:
    """A Receiver serving in a thread until the block ends (on `port`: one that was closed until now)."""
    found = Receiver(statuses=statuses)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            found.got.append(Received(dict(self.headers.items()), body, time.time()))
            code = found.answered[-1]
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no" if code >= 300 else b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    found.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/waypoint?token=t0k"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
