"""Model token deltas: what a streaming model call hands out while it runs, and how it travels.

The recorded events stay the source of truth; deltas are ephemeral (a client that misses some
gets the current attempt's text so far when it joins). Each delta belongs to one attempt of
one step of one run, and each attempt opens with a `start` item, so a client drops a failed
attempt's partial text instead of appending the retry to it.

The worker batches deltas and sends one notification per batch (every `flush_ms`, and at the
end of the call), so a step's hot path never pays a round trip per token:

    {"r": run_id, "s": step, "a": attempt, "n": batch number, "d": [item, ...]}
    item: ["start"] | ["text", piece] | ["tool", index, call id or null, name or null, argument piece]

Standard library only; the sender is injected (the store's `notify`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

Send = Callable[[list[str]], Awaitable[None]]
MAX_PAYLOAD = 7900  # bytes in one Postgres notification (it refuses 8000)
FINAL_FLUSH_SECONDS = 2.0  # the last batch waits at most this long: a slow database never holds a step


class DeltaSink(Protocol):
    """What a streaming adapter calls for each piece it receives (never blocks, never raises)."""

    def text(self, piece: str) -> None: ...

    def tool_call(self, index: int, call_id: str | None, name: str | None, arguments: str) -> None: ...


@dataclass
class AttemptStream:
    """The deltas of one model call attempt, batched; `DeltaPublisher.attempt` makes one."""

    run_id: str
    step: int
    attempt: int
    send: Send
    flush_seconds: float
    pending: list[list[Any]] = field(default_factory=lambda: [["start"]])
    batches: int = 0
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _closing: asyncio.Event = field(default_factory=asyncio.Event)

    def text(self, piece: str) -> None:
        if piece:
            self.pending.append(["text", piece])
            self._wake.set()

    def tool_call(self, index: int, call_id: str | None, name: str | None, arguments: str) -> None:
        self.pending.append(["tool", index, call_id, name, arguments])
        self._wake.set()

    def payloads(self) -> list[str]:
        """The pending items as notification payloads, each under the size limit, in order."""
        items, self.pending = self.pending, []
        out: list[str] = []
        batch: list[list[Any]] = []
        for item in items:
            for part in _split(item):
                if batch and len(self._encode(batch + [part])) > MAX_PAYLOAD:
                    out.append(self._encode(batch))
                    self.batches += 1
                    batch = []
                batch.append(part)
        if batch:
            out.append(self._encode(batch))
            self.batches += 1
        return out

    def _encode(self, items: list[list[Any]]) -> str:
        head = {"r": self.run_id, "s": self.step, "a": self.attempt, "n": self.batches}
        return json.dumps({**head, "d": items}, separators=(",", ":"), ensure_ascii=False)

    async def flush(self) -> None:
        payloads = self.payloads()
        if payloads:
            try:
                await self.send(payloads)
            except Exception as exc:  # deltas are best-effort: the model call goes on without them
                log.warning("model deltas of %s step %s not sent: %s", self.run_id, self.step, exc)

    async def pump(self) -> None:
        """Send what is pending as it comes, at most once per `flush_seconds`, until `close`
        (then what is left goes out, and the pump ends)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
            if self._closing.is_set():
                if self.pending:
                    continue
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.flush_seconds):  # keeps a cancel that lands as it closes
                    await self._closing.wait()

    def close(self) -> None:
        self._closing.set()
        self._wake.set()


def _split(item: list[Any]) -> list[list[Any]]:
    """A text or argument piece too large for one notification, cut in parts."""
    limit = MAX_PAYLOAD // 2 // 4  # characters: a UTF-8 character takes up to 4 bytes, JSON escapes more
    if item[0] == "text" and len(item[1]) > limit:
        return [["text", item[1][i : i + limit]] for i in range(0, len(item[1]), limit)]
    if item[0] == "tool" and len(item[4]) > limit:
        text = item[4]
        head = [["tool", item[1], item[2], item[3], text[:limit]]]
        return head + [["tool", item[1], None, None, text[i : i + limit]] for i in range(limit, len(text), limit)]
    return [item]


class DeltaPublisher:
    """Injected into the model activity: `async with publisher.attempt(run, step, attempt) as sink`."""

    def __init__(self, send: Send, *, flush_ms: int = 40):
        self.send = send
        self.flush_seconds = flush_ms / 1000

    @contextlib.asynccontextmanager
    async def attempt(self, run_id: str, step: int, attempt: int) -> AsyncIterator[AttemptStream]:
        stream = AttemptStream(run_id, step, attempt, self.send, self.flush_seconds)
        stream._wake.set()  # the start marker goes out at once
        pump = asyncio.create_task(stream.pump())
        try:
            yield stream
        finally:
            # The last batch goes out before the call returns, so it reaches listeners before the
            # step's events (Postgres delivers notifications in commit order).
            stream.close()
            try:
                await asyncio.wait_for(asyncio.shield(pump), FINAL_FLUSH_SECONDS)
            except TimeoutError:
                pump.cancel()


@dataclass(frozen=True)
class DeltaBatch:
    run_id: str
    step: int
    attempt: int
    number: int
    items: list[list[Any]]


def parse_batch(payload: str) -> DeltaBatch:
    data = json.loads(payload)
    return DeltaBatch(data["r"], int(data["s"]), int(data["a"]), int(data["n"]), list(data["d"]))


@dataclass
class AttemptText:
    """What one attempt said so far: its text and its tool calls (by index), rebuilt from deltas."""

    step: int
    attempt: int
    text: str = ""
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, item: list[Any]) -> None:
        if item[0] == "text":
            self.text += item[1]
        elif item[0] == "tool":
            call = self.tool_calls.setdefault(item[1], {"index": item[1], "id": None, "name": None, "arguments": ""})
            call["id"] = call["id"] or item[2]
            call["name"] = call["name"] or item[3]
            call["arguments"] += item[4]
