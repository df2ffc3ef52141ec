"""Following runs in the protocol's formats: one run's stream items once it has started (a fork's
conversation so far given to its format), and a thread's stream, its runs one after another.

    GET /threads/{thread_id}/stream?stream_mode=...      langgraph-sdk `client.threads.join_stream`

A thread stream begins with the thread's current run (the first not finished) from its start, or,
when the thread is idle, with its next run; then every run after it, for as long as the client
stays. Each run opens with `metadata` (`{"run_id", "attempt"}`) and closes with `run_done`
(`{"run_id", "status"}`), its parts in between as the run's own stream renders them.

Modes: the thread modes langgraph-sdk sends, `run_modes` (the default: `values`, `updates` and
`messages-tuple`), `state_update` (`values`) and `lifecycle` (only `metadata` and `run_done`), or
any run stream mode.

Position. A part's SSE id is `<run_id>:<seq>`, the run it is of and the seq of the log event
behind it; `run_done`'s is `<run_id>:done`. Last-Event-ID with one resumes after it: the rest of
that run (none of it after `done`), then the thread's runs after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence

from fastapi import Response
from sse_starlette import ServerSentEvent

from waypoint.app.http.limits import StreamSlot
from waypoint.app.http.protocol.shapes import conversation, flatten, run_status
from waypoint.app.http.protocol.stream import SUPPORTED_MODES, ProtocolFormat, sse, wants_deltas
from waypoint.app.http.state import ApiState
from waypoint.app.http.streams import StreamItem, parts_response, run_items
from waypoint.client import RunRow
from waypoint.errors import InvalidInput, NotFound
from waypoint.names import FINISHED, WAITING_TO_START

THREAD_MODES = {
    "run_modes": ("values", "updates", "messages-tuple"),
    "state_update": ("values",),
    "lifecycle": (),
}
POLL_SECONDS = 0.25  # how often an idle thread stream looks for the thread's next run
DONE = "done"


async def written(api: ApiState, tenant: str, run_id: str, wait: float = 30.0) -> RunRow | None:
    """The run's row, once its worker has written it (a run started a moment ago has none yet; its
    first event comes with the row, so waiting here delays nothing)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return await api.wp.run(run_id, tenant_id=tenant)
        except NotFound:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.02)


async def follow_run(
    api: ApiState,
    tenant: str,
    run_id: str,
    fmt: ProtocolFormat,
    items: Callable[[], AsyncIterator[StreamItem]] | None = None,
) -> AsyncIterator[StreamItem]:
    """The run's items (`items()`, else its own log and deltas) once it has started: a delayed or
    enqueued run is waited for; a fork's format gets the conversation of the runs it came from."""
    row = await written(api, tenant, run_id)
    while row is not None and row.status in WAITING_TO_START:
        await asyncio.sleep(0.2)
        row = await api.wp.run(run_id, tenant_id=tenant)
    if row is not None and row.parent_run_id:
        entries = await conversation(api.wp, tenant, run_id)
        fmt.messages = flatten([e for e in entries if e.run_id != run_id])
        fmt.forked = True
    stream = items() if items else run_items(api.hub, api.wp, tenant, run_id, 0, deltas=wants_deltas(fmt.modes))
    async for item in stream:
        yield item


def thread_modes(value: Sequence[str] | None) -> list[str]:
    """The run modes a thread stream renders (none for `lifecycle` alone: its runs' opening and end)."""
    asked = [m for m in value or [] if m] or ["run_modes"]
    unknown = [m for m in asked if m not in THREAD_MODES and m not in SUPPORTED_MODES]
    if unknown:
        raise InvalidInput(
            f"stream mode {', '.join(unknown)} is not supported on a thread's stream: use "
            f"{', '.join([*THREAD_MODES, *SUPPORTED_MODES])}"
        )
    modes = [m for a in asked for m in THREAD_MODES.get(a, (a,))]
    return list(dict.fromkeys(modes))


def thread_position(text: str | None) -> tuple[str, int | None] | None:
    """(run id, the seq seen last, None after its `run_done`) from a thread stream's Last-Event-ID."""
    if not text or not text.strip():
        return None
    run_id, _, seq = text.strip().rpartition(":")
    if not run_id or not (seq == DONE or (seq.isascii() and seq.isdigit() and len(seq) <= 10)):
        raise InvalidInput(
            f"Last-Event-ID {text!r} is not an id a thread stream sent: it sends <run_id>:<seq> and <run_id>:done"
        )
    return run_id, None if seq == DONE else int(seq)


class ThreadFollower:
    """A thread's runs, one after another, rendered into one stream (see the module docstring)."""

    def __init__(self, api: ApiState, tenant: str, thread_id: str, modes: list[str]):
        self.api = api
        self.tenant = tenant
        self.thread_id = thread_id
        self.modes = modes
        self.cut_off = False

    async def start(self, resume: tuple[str, int | None] | None) -> tuple[tuple[str, int] | None, int]:
        """(the run to begin with and the seq to resume it after, or none; the position after which
        the next runs come). Answered before the stream opens, so a bad id is a 400."""
        thread = await self.api.wp.threads.get(self.thread_id, tenant_id=self.tenant)
        if resume is not None:
            run_id, seq = resume
            member = next((m for m in thread.runs if m.run_id == run_id), None)
            if member is None:
                raise InvalidInput(f"Last-Event-ID names run {run_id!r}, which is not on thread {self.thread_id}")
            return (None if seq is None else (run_id, seq)), member.position
        for member in thread.runs:
            if member.run is None or member.run.status not in FINISHED:
                return (member.run_id, 0), member.position
        return None, thread.last.position if thread.last else -1

    async def _next_run(self, after_position: int) -> tuple[str, int] | None:
        """The thread's first run after the position, once there is one; None once the thread is gone."""
        while True:
            try:
                thread = await self.api.wp.threads.get(self.thread_id, tenant_id=self.tenant)
            except NotFound:
                return None
            for member in thread.runs:
                if member.position > after_position:
                    return member.run_id, member.position
            await asyncio.sleep(POLL_SECONDS)

    async def events(self, first: tuple[str, int] | None, position: int) -> AsyncIterator[ServerSentEvent]:
        current = first
        while True:
            if current is None:
                found = await self._next_run(position)
                if found is None:
                    return
                current, position = (found[0], 0), found[1]
            run_id, after = current
            async for part in self._run(run_id, after):
                yield part
            if self.cut_off:
                return  # a slow client: it reconnects with the id the error names
            current = None

    async def _run(self, run_id: str, after: int) -> AsyncIterator[ServerSentEvent]:
        fmt = ProtocolFormat(run_id, self.modes, [], forked=False, resume_after=after, thread_id=self.thread_id)
        if after == 0:
            yield sse("metadata", {"run_id": run_id, "attempt": 1})
        async for item in follow_run(self.api, self.tenant, run_id, fmt):
            if item.kind == "overflow":
                message = (
                    f"this client read too slowly and was cut off after {run_id}:{item.last_seq}: "
                    f"reconnect with Last-Event-ID: {run_id}:{item.last_seq}"
                )
                self.cut_off = True
                yield sse("error", {"error": "SlowClient", "message": message})
                return
            for part in fmt.render(item):
                if part.id is not None:
                    part.id = f"{run_id}:{part.id}"
                yield part
        try:
            status = run_status(await self.api.wp.run(run_id, tenant_id=self.tenant))
        except NotFound:
            status = "error"
        done = sse("run_done", {"run_id": run_id, "status": status})
        done.id = f"{run_id}:{DONE}"
        yield done


async def follow_thread(
    api: ApiState,
    tenant: str,
    slot: StreamSlot,
    thread_id: str,
    stream_mode: Sequence[str] | None,
    last_event_id: str | None,
) -> Response:
    """The thread's stream (`GET /threads/{thread_id}/stream`); a bad mode or id is a 400 before it opens."""
    follower = ThreadFollower(api, tenant, thread_id, thread_modes(stream_mode))
    first, position = await follower.start(thread_position(last_event_id))
    return parts_response(follower.events(first, position), slot=slot, keepalive=api.settings.api_keepalive_seconds)
