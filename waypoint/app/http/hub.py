"""The live side of streams: one LISTEN connection per API process, fanned out to subscribers.

A run's log is its stream. A subscriber reads what it has not seen from `events` (from its
Last-Event-ID on), then takes what its run's feed hands it: the rows of each new commit,
fetched once per commit for every subscriber of that run, and the model deltas of the attempt
in flight. Notifications of one run are handled in the order Postgres delivered them (commit
order), so a step's deltas never overtake the events that came before them.

Each subscriber has a bounded queue: when a client reads too slowly and its queue fills, it is
marked overflowed and its stream ends with an event that says so (it reconnects with
Last-Event-ID and loses nothing); the run and the other clients never wait for it.

Deltas are ephemeral: the hub keeps, per run, the text and tool calls of the attempt in flight
(until the step's events commit, or the attempt's failure does), so a client that joins
mid-step starts from them. After a restart of the API process that
text is gone: a client joining then gets the next deltas and, when the step is recorded, the
full answer in its `model_response` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from waypoint.deltas import AttemptText, DeltaBatch, parse_batch
from waypoint.errors import NotFound
from waypoint.names import EventKind

if TYPE_CHECKING:
    from waypoint.client import EventRow, Listener, Waypoint

log = logging.getLogger(__name__)

PAGE = 500  # rows per read of a run's log
MAX_ATTEMPTS_KEPT = 10_000  # runs whose in-flight attempt text is kept (least recently changed go first)

Item = tuple[str, Any]  # ("event", EventRow) | ("delta", DeltaBatch)


@dataclass(eq=False)
class Subscription:
    """One client's view of one run: a bounded queue of live items, and whether it overflowed."""

    tenant_id: str
    run_id: str
    capacity: int
    queue: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    overflowed: bool = False
    snapshot: AttemptText | None = None  # the attempt in flight when it subscribed
    wants_deltas: bool = True

    def put(self, item: Item) -> None:
        if self.overflowed or (item[0] == "delta" and not self.wants_deltas):
            return
        if self.queue.qsize() >= self.capacity:
            self.overflowed = True
            self.queue.put_nowait(("overflow", None))  # wakes the reader, which ends the stream
            return
        self.queue.put_nowait(item)


class RunFeed:
    """Fans one run's new rows and deltas out to its subscribers, in notification order."""

    def __init__(self, hub: StreamHub, tenant_id: str, run_id: str):
        self.hub = hub
        self.tenant_id = tenant_id
        self.run_id = run_id
        self.subscribers: set[Subscription] = set()
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.cursor: int | None = None
        self.task = asyncio.create_task(self._loop())

    def notify(self, kind: str, value: Any) -> None:
        self.inbox.put_nowait((kind, value))

    async def _loop(self) -> None:
        try:
            try:
                self.cursor = await self.hub.wp.last_seq(self.run_id, tenant_id=self.tenant_id)
            except NotFound:
                self.cursor = 0  # the run's row is not written yet: every row is new
            while True:
                kind, value = await self.inbox.get()
                if kind == "delta":
                    for sub in list(self.subscribers):
                        sub.put(("delta", value))
                else:  # "events" (a commit) or "resync" (the LISTEN connection came back)
                    await self._fetch()
        except asyncio.CancelledError:
            raise
        except Exception:  # a database outage: subscribers re-read from their cursor when they reconnect
            log.exception("stream feed of %s failed", self.run_id)
            for sub in list(self.subscribers):
                sub.overflowed = True
                sub.queue.put_nowait(("overflow", None))

    async def _fetch(self) -> None:
        while True:
            try:
                rows = await self.hub.wp.tail(
                    self.run_id, after_seq=self.cursor or 0, limit=PAGE, tenant_id=self.tenant_id
                )
            except NotFound:
                return
            for row in rows:
                self.cursor = row.seq
                if row.kind in (EventKind.MODEL_RESPONSE, EventKind.RUN_FINISHED):
                    self.hub.forget_attempt(self.run_id, row.step)
                for sub in list(self.subscribers):
                    sub.put(("event", row))
            if len(rows) < PAGE:
                return


class StreamHub:
    """`await StreamHub(wp).start()`; `subscribe` / `unsubscribe` per client."""

    def __init__(self, wp: Waypoint, *, buffer: int = 1000):
        self.wp = wp
        self.buffer = buffer
        self.feeds: dict[str, RunFeed] = {}
        self.attempts: OrderedDict[str, AttemptText] = OrderedDict()
        self.listener: Listener | None = None
        self.watchers: dict[str, set[Callable[[str], None]]] = {}  # run id -> told of each run below it

    async def start(self) -> StreamHub:
        self.listener = await self.wp.listen(
            on_events=self._on_events, on_deltas=self._on_deltas, on_reconnect=self._resync
        )
        return self

    async def close(self) -> None:
        if self.listener is not None:
            await self.listener.close()
        for feed in list(self.feeds.values()):
            feed.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feed.task
        self.feeds.clear()

    # --- notifications (called on the event loop by the listener) --------------------------------

    def _on_events(self, payload: str) -> None:
        run_id, _seq, step = payload.rsplit(" ", 2)
        current = self.attempts.get(run_id)
        if current is not None and current.step <= int(step):
            del self.attempts[run_id]  # that step is recorded (or its attempt failed): its text is history
        feed = self.feeds.get(run_id)
        if feed is not None:
            feed.notify("events", None)
        if self.watchers:
            self._tell_watchers(run_id)

    def _tell_watchers(self, run_id: str) -> None:
        """A sub-agent run's id starts with its caller's and a dot (`child_run_id`), so the runs that
        may be above `run_id` are its prefixes up to each dot: at most one look-up per level."""
        at = run_id.find(".")
        while at > 0:
            for tell in list(self.watchers.get(run_id[:at], ())):
                tell(run_id)
            at = run_id.find(".", at + 1)

    def _on_deltas(self, payload: str) -> None:
        batch = parse_batch(payload)
        current = self.attempts.get(batch.run_id)
        if current is None or (current.step, current.attempt) != (batch.step, batch.attempt):
            if current is not None and (batch.step, batch.attempt) < (current.step, current.attempt):
                return  # a late batch of an attempt already superseded
            current = AttemptText(batch.step, batch.attempt)
            self.attempts[batch.run_id] = current
        for item in batch.items:
            current.add(item)
        self.attempts.move_to_end(batch.run_id)
        while len(self.attempts) > MAX_ATTEMPTS_KEPT:
            self.attempts.popitem(last=False)
        feed = self.feeds.get(batch.run_id)
        if feed is not None:
            feed.notify("delta", batch)

    def _resync(self) -> None:
        for feed in self.feeds.values():
            feed.notify("resync", None)
        for run_id, tells in list(self.watchers.items()):
            for tell in list(tells):
                tell(run_id)  # notifications may have been missed: look the tree up again

    # --- subscribers ----------------------------------------------------------------------------

    def subscribe(self, tenant_id: str, run_id: str, *, deltas: bool = True) -> Subscription:
        """Live items of the run from now on; the caller reads the log before them itself.
        The attempt in flight is captured in the same instant, so no delta is both in the
        snapshot and in the queue."""
        sub = Subscription(tenant_id, run_id, self.buffer, wants_deltas=deltas)
        current = self.attempts.get(run_id)
        if current is not None:
            sub.snapshot = AttemptText(
                current.step, current.attempt, current.text, {i: dict(c) for i, c in current.tool_calls.items()}
            )
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = RunFeed(self, tenant_id, run_id)
        feed.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        feed = self.feeds.get(sub.run_id)
        if feed is None:
            return
        feed.subscribers.discard(sub)
        if not feed.subscribers:
            del self.feeds[sub.run_id]
            feed.task.cancel()

    def watch(self, run_id: str, tell: Callable[[str], None]) -> None:
        """Call `tell(id)` (on the event loop) whenever the log of a run whose id says it may be below
        `run_id` grows; `tell(run_id)` itself after the LISTEN connection came back. A hint: the
        caller checks the tree, since any run may be given an id with a dot."""
        self.watchers.setdefault(run_id, set()).add(tell)

    def unwatch(self, run_id: str, tell: Callable[[str], None]) -> None:
        tells = self.watchers.get(run_id)
        if tells is not None:
            tells.discard(tell)
            if not tells:
                del self.watchers[run_id]

    def forget_attempt(self, run_id: str, step: int) -> None:
        """The step is recorded: its deltas are history now."""
        current = self.attempts.get(run_id)
        if current is not None and current.step <= step:
            del self.attempts[run_id]


async def read_log(wp: Waypoint, tenant_id: str, run_id: str, after_seq: int) -> list[EventRow]:
    """One page of the run's log after `after_seq`; empty while the run has no row yet."""
    try:
        return await wp.tail(run_id, after_seq=after_seq, limit=PAGE, tenant_id=tenant_id)
    except NotFound:
        return []


__all__ = ["DeltaBatch", "Item", "StreamHub", "Subscription", "read_log"]
