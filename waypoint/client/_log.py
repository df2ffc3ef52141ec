"""Reading one run's record in Postgres: its steps, states, events, log tail, effects, tree and
budget, and two runs side by side."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from waypoint.checks import check_choice, check_count, check_seq
from waypoint.client._scope import Scope
from waypoint.client._views import json_lines
from waypoint.names import EventKind
from waypoint.store import RunStore
from waypoint.store.budget import BudgetView
from waypoint.store.compare import RunComparison
from waypoint.store.ledger import Effect
from waypoint.store.listen import Handler, Listener
from waypoint.store.reads import StepLine
from waypoint.store.rows import EventRow, RunRow
from waypoint.store.streams import DELTAS_CHANNEL, EVENTS_CHANNEL
from waypoint.store.travel import LineageLink, StateDiff, StepState
from waypoint.store.trees import RunTree, tree_totals
from waypoint.waterfall import Waterfall
from waypoint.waterfall import derive as derive_waterfall


class RunLog:
    def __init__(self, store: RunStore, scope: Scope):
        self._store = store
        self._scope = scope

    async def timeline(
        self, run_id: str, *, tenant_id: str | None = None, after_step: int = 0, limit: int | None = None
    ) -> list[StepLine]:
        """Steps after `after_step` (keyset pagination), from the `run_steps` view."""
        if limit is not None:
            check_count("the limit", limit)
        check_count("after_step", after_step, low=0, high=10**9)
        tenant = self._scope.scoped(tenant_id, run_id)
        return await self._store.timeline(tenant, run_id, after_step=after_step, limit=limit)

    async def waterfall(self, run_id: str, *, tenant_id: str | None = None, after_step: int = 0) -> Waterfall:
        """The run as a waterfall: its steps after `after_step`, each with bars for its model call
        (failed attempts, retry waits), tool calls, approval and capacity waits, compactions and
        sub-agent runs, and its tokens, cost and context; a live run's step in flight last."""
        check_count("after_step", after_step, low=0, high=10**9)
        tenant = self._scope.scoped(tenant_id, run_id)
        return derive_waterfall(await self._store.waterfall.waterfall_source(tenant, run_id, after_step=after_step))

    async def state(self, run_id: str, step: int, *, tenant_id: str | None = None) -> StepState:
        """The state (working memory) at `step`, with the step's events."""
        return await self._store.travel.state_at(
            self._scope.scoped(tenant_id, run_id), run_id, check_seq("the step", step)
        )

    async def diff(self, run_id: str, a: int, b: int, *, tenant_id: str | None = None) -> StateDiff:
        check_seq("step a", a)
        check_seq("step b", b)
        return await self._store.travel.diff(self._scope.scoped(tenant_id, run_id), run_id, a, b)

    async def events(
        self,
        run_id: str,
        *,
        kinds: list[str] | None = None,
        since_step: int = 0,
        after_seq: int = 0,
        limit: int | None = None,
        tenant_id: str | None = None,
        step: int | None = None,
    ) -> list[EventRow]:
        """Events in log order (of one `step`, or from `since_step` on); `after_seq` (keyset
        pagination) is the last seq seen."""
        for kind in kinds or []:
            check_choice("event kind", kind, EventKind)
        if limit is not None:
            check_count("the limit", limit, high=1_000_000)
        check_count("since_step", since_step, low=0, high=10**9)
        check_seq("after_seq", after_seq)
        if step is not None:
            check_seq("the step", step)
        return await self._store.travel.events(
            self._scope.scoped(tenant_id, run_id),
            run_id,
            kinds=kinds,
            since_step=since_step,
            step=step,
            after_seq=after_seq,
            limit=limit,
        )

    async def tail(
        self, run_id: str, *, after_seq: int = 0, limit: int = 500, tenant_id: str | None = None
    ) -> list[EventRow]:
        """A stream's read of the log: the events after `after_seq` (with their tools' outputs), at
        most `limit`; NotFound unless the run is the tenant's (or, past seq 0, when it has no more)."""
        tenant = self._scope.scoped(tenant_id, run_id)
        return await self._store.streams.tail(tenant, run_id, after_seq=after_seq, limit=limit)

    async def last_seq(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """The seq of the run's newest event (0 before the first); NotFound unless the run is the tenant's."""
        return await self._store.streams.last_seq(self._scope.scoped(tenant_id, run_id), run_id)

    async def listen(
        self, *, on_events: Handler, on_deltas: Handler, on_reconnect: Callable[[], None] | None = None
    ) -> Listener:
        """Hear each commit to a run's log and each batch of model deltas as Postgres announces them
        (one connection of its own; `close()` it)."""
        url = self._store.engine.url.render_as_string(hide_password=False)
        handlers = {EVENTS_CHANNEL: on_events, DELTAS_CHANNEL: on_deltas}
        return await Listener(url, handlers, on_reconnect=on_reconnect).start()

    async def effects(self, run_id: str, *, tenant_id: str | None = None) -> list[Effect]:
        """The run's tool calls with side effects, as the ledger recorded them."""
        return await self._store.ledger.effects(self._scope.scoped(tenant_id, run_id), run_id)

    def export(self, run_id: str, *, tenant_id: str | None = None) -> AsyncIterator[str]:
        """The full transcript as JSON lines (streamed)."""
        return json_lines(self._store.travel.export(self._scope.scoped(tenant_id, run_id), run_id))

    async def compare(self, run_a: str, run_b: str, *, tenant_id: str | None = None) -> RunComparison:
        """Two runs of the tenant step by step: tool calls, answers, tokens, cost, model time, outcome."""
        return await self._store.compare.compare(self._scope.scoped(tenant_id, run_a, run_b), run_a, run_b)

    async def tree(self, run_id: str, *, tenant_id: str | None = None) -> RunTree:
        """The run and every sub-agent run below it, depth first in call order, with the tree's totals
        and the budget pool of the whole tree it belongs to (None: no budget)."""
        tenant = self._scope.scoped(tenant_id, run_id)
        nodes = await self._store.trees.tree(tenant, run_id)
        return RunTree(
            nodes=nodes, totals=tree_totals(nodes), budget=await self._store.budget.run_budget(tenant, run_id)
        )

    async def budget(self, run_id: str, *, tenant_id: str | None = None) -> BudgetView | None:
        """The budget pool of the run's tree: per measure (tokens, cost, steps) its limit, what the tree
        spent, what its model calls in flight hold, and what is left; None when the tree has no budget."""
        tenant = self._scope.scoped(tenant_id, run_id)
        await self._store.get_run(tenant, run_id)  # an unknown run is NotFound, not "no budget"
        return await self._store.budget.run_budget(tenant, run_id)

    async def children(self, run_id: str, *, tenant_id: str | None = None) -> list[RunRow]:
        """The sub-agent runs this run started itself, in call order."""
        return await self._store.trees.children(self._scope.scoped(tenant_id, run_id), run_id)

    async def lineage(self, run_id: str, *, tenant_id: str | None = None) -> list[LineageLink]:
        return await self._store.travel.lineage(self._scope.scoped(tenant_id, run_id), run_id)
