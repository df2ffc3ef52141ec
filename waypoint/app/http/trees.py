"""Trees of runs over HTTP: the runs a run's sub-agent calls started, and one stream of a whole tree.

    GET /v1/runs/{id}/tree                   the run and every run below it, depth first in call order,
                                             each with its figures, depth and caller; the tree's totals
    GET /v1/runs/{id}/stream?children=true   the run's events and those of every run below it

A tree's stream merges one stream per run (`run_items`: each run's events in its log's order; the
runs interleave as they commit), and every event names its run (`run_id` in its data, as in a run's
own stream; deltas too). A run started while the stream is open joins it: the hub tells the stream
whenever the log of a run whose id extends the top run's grows (`child_run_id` derives a sub-agent
run's id from its caller's), and the stream reads the tree again to see whether that run is in it.
The stream ends once every run of the tree has ended.

Position. Each run's log has its own seqs, so a tree stream's SSE id is a cursor per run: the seq
reached in the top run, then `,<path>:<seq>` for each run below with events sent, `<path>` being its
id past the top run's id and its dot (`1.0` for `<top>.1.0`, `1.0.2.1` one level further down):

    id: 14,1.0:6,1.1:9,2.0:3

Last-Event-ID with that id resumes every run after its own seq; a run the id does not name is read
from its start. A plain seq, the id of the run's own stream, is a tree id that names no run below.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from sse_starlette import ServerSentEvent

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.streams import NativeFormat, StreamItem, overflow_event, run_items
from waypoint.client import RunRow, tree_json
from waypoint.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from waypoint.app.http.hub import StreamHub
    from waypoint.client import Waypoint

router = APIRouter(prefix="/v1", tags=["runs"], responses=errors.KEYED)

MERGED_ITEMS = 64  # items of all runs waiting for the client; past it each run's own queue takes them
_POSITION = re.compile(r"[0-9]{1,10}(,[0-9]{1,10}(\.[0-9]{1,10})+:[0-9]{1,10})*")
Pumped = tuple[str, StreamItem | BaseException | None]  # (run id, an item, its failure, or its end)


@router.get("/runs/{run_id}/tree", responses=errors.documented(400, 404, 409))
async def tree(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The run and the sub-agent runs below it (theirs too), depth first in call order: run id,
    agent, status, steps, tokens, cost, depth, caller (run, step, call index); then the totals, and
    the budget pool of its tree (per measure: limit, used, reserved by calls in flight, left)."""
    return tree_json(await api.wp.tree(run_id, tenant_id=tenant))


def tree_position(top: str, cursors: dict[str, int]) -> str:
    """The SSE id of a tree stream at `cursors` (run id -> the seq sent last)."""
    below = sorted((run_id[len(top) + 1 :], seq) for run_id, seq in cursors.items() if run_id != top)
    return ",".join([str(cursors.get(top, 0)), *(f"{path}:{seq}" for path, seq in below)])


def parse_tree_position(top: str, text: str) -> dict[str, int]:
    """The cursors a tree stream's id names (see the module docstring)."""
    text = text.strip()
    if not _POSITION.fullmatch(text):
        raise InvalidInput(
            f"Last-Event-ID {text!r} is not an id this stream sent: a tree stream sends "
            "<seq>,<path>:<seq>,... (for instance 14,1.0:6)"
        )
    first, *below = text.split(",")
    cursors = {top: int(first)}
    for entry in below:
        path, _, seq = entry.partition(":")
        cursors[f"{top}.{path}"] = int(seq)
    return cursors


class TreeStream:
    """The items of every run of the tree below `top`, each tagged with its run, from `cursors` on
    (`position()` is the id of the last one handed out)."""

    def __init__(
        self, hub: StreamHub, wp: Waypoint, tenant_id: str, top: str, cursors: dict[str, int], *, deltas: bool
    ):
        self.hub = hub
        self.wp = wp
        self.tenant_id = tenant_id
        self.top = top
        self.deltas = deltas
        self.cursors = {top: 0, **cursors}
        self.runs: dict[str, RunRow] = {}  # the runs of the tree, as last read
        self.queue: asyncio.Queue[Pumped] = asyncio.Queue(MERGED_ITEMS)
        self.pumps: dict[str, asyncio.Task[None]] = {}
        self.open: set[str] = set()  # runs whose stream has not ended
        self.hinted: set[str] = set()  # runs the hub named since the last read of the tree
        self.strangers: set[str] = set()  # ids that look like runs below but are not in the tree
        self.due = asyncio.Event()

    def position(self) -> str:
        return tree_position(self.top, self.cursors)

    def namespace(self, run_id: str) -> list[str]:
        """`<agent>:<run id>` of each run from below the top down to `run_id` (LangGraph's namespace)."""
        path = run_id[len(self.top) + 1 :].split(".")
        ids = [f"{self.top}.{'.'.join(path[:end])}" for end in range(2, len(path) + 1, 2)]
        return [f"{self.runs[i].agent}:{i}" if i in self.runs else i for i in ids]

    async def items(self) -> AsyncIterator[StreamItem]:
        self.hub.watch(self.top, self._hint)
        reader = asyncio.create_task(self._read_on_hints())
        try:
            self._pump(self.top)
            await self._read_tree()
            while True:
                run_id, item = await self.queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    self.open.discard(run_id)
                    if not self.open:
                        await self._read_tree()  # a run that started as the last one ended
                        if not self.open:
                            return
                    continue
                if item.kind == "overflow":
                    yield replace(item, run_id=self.top, last_seq=self.cursors[self.top])
                    return
                if item.kind == "event" and item.event is not None:
                    self.cursors[run_id] = item.event.seq
                yield replace(item, run_id=run_id)
        finally:
            self.hub.unwatch(self.top, self._hint)
            tasks = [reader, *self.pumps.values()]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _hint(self, run_id: str) -> None:
        if run_id == self.top:  # the hub's connection came back: notifications may have been lost
            self.due.set()
        elif run_id not in self.pumps and run_id not in self.strangers:
            self.hinted.add(run_id)
            self.due.set()

    async def _read_on_hints(self) -> None:
        while True:
            await self.due.wait()
            self.due.clear()
            await self._read_tree()

    async def _read_tree(self) -> None:
        """Read the tree; stream each run of it not streamed yet."""
        asked, self.hinted = self.hinted, set()
        try:
            nodes = (await self.wp.tree(self.top, tenant_id=self.tenant_id)).nodes
        except NotFound:
            return  # the top run's row is not written yet: nothing can be below it
        for node in nodes:
            self.runs[node.run.run_id] = node.run
            self._pump(node.run.run_id)
        # A run's row is written with its first event, before anyone hears of it: not in the tree, never in it.
        self.strangers |= asked - self.runs.keys()

    def _pump(self, run_id: str) -> None:
        if run_id in self.pumps:
            return
        self.open.add(run_id)
        self.pumps[run_id] = asyncio.create_task(self._run_pump(run_id))

    async def _run_pump(self, run_id: str) -> None:
        end: Exception | None = None
        after = self.cursors.get(run_id, 0)
        try:
            async for item in run_items(self.hub, self.wp, self.tenant_id, run_id, after, deltas=self.deltas):
                await self.queue.put((run_id, item))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            end = exc
        await self.queue.put((run_id, end))


class TreeFormat:
    """Waypoint's own stream format for a tree: each event's SSE id is the tree's position."""

    def __init__(self, stream: TreeStream):
        self.stream = stream
        self.native = NativeFormat(stream.top)

    def render(self, item: StreamItem) -> list[ServerSentEvent]:
        if item.kind == "overflow":
            return [overflow_event(self.stream.position())]
        out = self.native.render(item)
        if item.kind == "event":
            for event in out:
                event.id = self.stream.position()
        return out
