"""Server-sent events of one run: its log from a position on, then live, in one of three formats.

    GET /v1/runs/{id}/stream            Last-Event-ID (or ?after=N) resumes after that seq
    id: 12                              every log event carries its seq as its SSE id
    event: model_response               the event's kind
    data: {"seq": 12, "step": 3, "kind": "model_response", "payload": {...}, ...}

Model deltas (`attempt_started`, `model_delta`) carry no id: they are not part of the log, so a
client's Last-Event-ID is always a position in it. A joining client gets the attempt in flight
as one `model_delta` with `"snapshot": true` (replace, do not append), and a new
`attempt_started` tells it to drop the previous attempt's partial text. The stream ends after
`run_finished`; a client too slow for its buffer gets `event: error` with code `slow_client`
and its last id, and the stream ends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from waypoint.app.http.hub import PAGE, StreamHub, read_log
from waypoint.app.http.limits import StreamSlot
from waypoint.client import EventRow, as_json
from waypoint.deltas import AttemptText, DeltaBatch
from waypoint.errors import NotFound
from waypoint.names import FINISHED, EventKind

if TYPE_CHECKING:
    from waypoint.client import Waypoint

SEND_TIMEOUT_SECONDS = 60.0  # a client that takes no bytes for this long is dropped


@dataclass(frozen=True)
class StreamItem:
    """What a format renders: a log event, a delta batch, the attempt in flight, or the cut-off."""

    kind: str  # "event" | "delta" | "snapshot" | "overflow"
    event: EventRow | None = None
    batch: DeltaBatch | None = None
    snapshot: AttemptText | None = None
    last_seq: int = 0
    run_id: str = ""  # the run it is of, in a stream of several (a tree's); "" in a run's own stream


async def run_items(
    hub: StreamHub, wp: Waypoint, tenant_id: str, run_id: str, after_seq: int, *, deltas: bool = True
) -> AsyncIterator[StreamItem]:
    """Every event of the run after `after_seq`, in order, none twice, then live ones (and deltas)
    until `run_finished`. A long backlog is read before subscribing (so it never fills the live
    queue), then once more after, so nothing committed in between is missed."""
    sent = after_seq
    recorded = -1  # the newest step whose model_response went out: its deltas are history

    async def backlog() -> AsyncIterator[EventRow]:
        nonlocal sent, recorded
        while True:
            rows = await read_log(wp, tenant_id, run_id, sent)
            for row in rows:
                sent = row.seq
                if row.kind == EventKind.MODEL_RESPONSE:
                    recorded = max(recorded, row.step)
                yield row
            if len(rows) < PAGE:
                return

    async for row in backlog():
        yield StreamItem("event", event=row)
        if row.kind == EventKind.RUN_FINISHED:
            return
    sub = hub.subscribe(tenant_id, run_id, deltas=deltas)
    try:
        async for row in backlog():
            yield StreamItem("event", event=row)
            if row.kind == EventKind.RUN_FINISHED:
                return
        if await finished(wp, tenant_id, run_id):
            return  # the client was past `run_finished` already: nothing more will come
        if deltas and sub.snapshot is not None and sub.snapshot.step > recorded:
            yield StreamItem("snapshot", snapshot=sub.snapshot)
        while True:
            kind, value = await sub.queue.get()
            if kind == "overflow":
                yield StreamItem("overflow", last_seq=sent)
                return
            if kind == "delta":
                if deltas and value.step > recorded:
                    yield StreamItem("delta", batch=value)
                continue
            new: EventRow = value
            if new.seq <= sent:
                continue
            if new.seq == sent + 1:
                sent = new.seq
                if new.kind == EventKind.MODEL_RESPONSE:
                    recorded = max(recorded, new.step)
                yield StreamItem("event", event=new)
                if new.kind == EventKind.RUN_FINISHED:
                    return
                continue
            async for row in backlog():  # a gap is read from the log (there never should be one)
                yield StreamItem("event", event=row)
                if row.kind == EventKind.RUN_FINISHED:
                    return
    finally:
        hub.unsubscribe(sub)


async def finished(wp: Waypoint, tenant_id: str, run_id: str) -> bool:
    try:
        return (await wp.run(run_id, tenant_id=tenant_id)).status in FINISHED
    except NotFound:
        return False


def event_data(row: EventRow) -> dict[str, Any]:
    data: dict[str, Any] = as_json(row)
    return data


def delta_data(run_id: str, step: int, attempt: int, text: str, calls: dict[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "step": step,
        "attempt": attempt,
        "text": text,
        "tool_calls": [calls[i] for i in sorted(calls)],
    }


def merged(batch: DeltaBatch) -> tuple[bool, AttemptText]:
    """(whether the batch opens its attempt, its pieces joined)."""
    joined = AttemptText(batch.step, batch.attempt)
    for item in batch.items:
        joined.add(item)
    return any(item[0] == "start" for item in batch.items), joined


class NativeFormat:
    """Waypoint's own stream: log events by kind, then deltas."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def render(self, item: StreamItem) -> list[ServerSentEvent]:
        run_id = item.run_id or self.run_id
        if item.kind == "event" and item.event is not None:
            row = item.event
            return [ServerSentEvent(json.dumps(event_data(row)), event=row.kind, id=str(row.seq))]
        if item.kind == "snapshot" and item.snapshot is not None:
            snap = item.snapshot
            data = delta_data(run_id, snap.step, snap.attempt, snap.text, snap.tool_calls)
            start = {"run_id": run_id, "step": snap.step, "attempt": snap.attempt}
            return [
                ServerSentEvent(json.dumps(start), event="attempt_started"),
                ServerSentEvent(json.dumps({**data, "snapshot": True}), event="model_delta"),
            ]
        if item.kind == "delta" and item.batch is not None:
            opens, joined = merged(item.batch)
            out = []
            if opens:
                start = {"run_id": run_id, "step": joined.step, "attempt": joined.attempt}
                out.append(ServerSentEvent(json.dumps(start), event="attempt_started"))
            if joined.text or joined.tool_calls:
                data = delta_data(run_id, joined.step, joined.attempt, joined.text, joined.tool_calls)
                out.append(ServerSentEvent(json.dumps({**data, "snapshot": False}), event="model_delta"))
            return out
        return [overflow_event(item.last_seq)]


def overflow_event(last_id: int | str) -> ServerSentEvent:
    """The cut-off, naming the id to resume from: a seq, or a tree stream's position."""
    data = {
        "error": {
            "code": "slow_client",
            "message": f"this client read the stream too slowly and was cut off after event {last_id}: "
            f"reconnect with Last-Event-ID: {last_id} to go on from there",
        },
        "last_event_id": last_id,
    }
    return ServerSentEvent(json.dumps(data), event="error")


# One event of an SSE route's answer, for its OpenAPI document (`SSE_DOCUMENTED`).
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "description": "What it is: a log event's kind, model_delta, ..."},
        "data": {"type": "string", "contentMediaType": "application/json", "description": "The event, as JSON."},
        "id": {"type": "string", "description": "Where it is: resume after it with Last-Event-ID."},
        "retry": {"type": "integer", "minimum": 0},
    },
    "required": ["data"],
}
SSE_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-sent events, until the stream ends.",
        "content": {"text/event-stream": {"itemSchema": SSE_EVENT}},
    }
}
"""A SSE route's `responses=`, with `response_class=EventSourceResponse` (whose media type is unset,
so FastAPI adds no JSON answer of its own)."""


class LiveStream(EventSourceResponse):
    """An SSE response holding its key's stream slot until it ends: finished, the client gone, or
    the server stopping."""

    def __init__(self, *args: Any, slot: StreamSlot, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.slot = slot
        slot.streaming = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


def sse_response(
    items: AsyncIterator[StreamItem],
    render: Callable[[StreamItem], list[ServerSentEvent]],
    *,
    slot: StreamSlot,
    keepalive: float,
    headers: dict[str, str] | None = None,
    opening: list[ServerSentEvent] | None = None,
    closing: Callable[[], list[ServerSentEvent]] | None = None,
) -> EventSourceResponse:
    """The SSE response: `opening` events, every item rendered, then `closing` ones; a comment
    every `keepalive` seconds while nothing happens. `slot` (the route's `auth.OpenStream`) is
    held until the stream ends."""

    async def events() -> AsyncIterator[ServerSentEvent]:
        for event in opening or []:
            yield event
        async for item in items:
            for event in render(item):
                yield event
        for event in closing() if closing else []:
            yield event

    return parts_response(events(), slot=slot, keepalive=keepalive, headers=headers)


def parts_response(
    parts: AsyncIterator[ServerSentEvent], *, slot: StreamSlot, keepalive: float, headers: dict[str, str] | None = None
) -> EventSourceResponse:
    """The SSE response of events rendered already (a stream of several runs renders its own)."""
    return LiveStream(
        parts,
        slot=slot,
        ping=keepalive,
        ping_message_factory=lambda: ServerSentEvent(comment="keep-alive"),
        sep="\n",
        send_timeout=SEND_TIMEOUT_SECONDS,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **(headers or {})},
    )
