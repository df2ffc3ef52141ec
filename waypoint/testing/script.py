"""What a fake model server answers with: the items of its script (`Turn`, `Reply`), a script
file (`load_script`), the command line every fake shares (`script_parser`), and how an answer goes
over the wire, whole (`send_reply`) or as server-sent events (`send_stream`)."""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any


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


@dataclass
class Request:
    """One POST as the hooks see it: `route` is what `FakeServer.route` made of its path."""

    path: str
    route: str | None
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Stream:
    """A streamed answer: the turn (its `chunk_delay` and `cut_after`), its server-sent event frames,
    and what ends a stream that was not cut."""

    turn: Turn
    frames: list[bytes]
    done: bytes = b""


Responder = Callable[[dict[str, Any], int], "Turn | Reply | None"]


def pieces(text: str) -> list[str]:
    """A text cut as a model streams it: one piece per word, with the spaces that follow it."""
    return re.findall(r"\s*\S+\s*|\s+", text) or [text]


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
