"""A run's record as a whole: checked (hash chains, checkpoints, the mirror against Temporal's
history) or deleted with every trace of it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from waypoint.access import Action
from waypoint.checks import check_count, parse_when
from waypoint.client._scope import Scope, TemporalLink
from waypoint.names import MemoryOp
from waypoint.store import RunStore
from waypoint.store.integrity import Verdict
from waypoint.store.rows import RunRow
from waypoint.types import MemoryRequest

if TYPE_CHECKING:
    from waypoint.gateway.invariants import VerifyAllReport

VERIFY_ALL_MAX = 100_000  # runs one `verify_all` call checks at most (`limit`)


class Records:
    def __init__(self, store: RunStore, temporal: TemporalLink, scope: Scope):
        self._store = store
        self._temporal = temporal
        self._scope = scope

    async def verify(self, run_id: str, *, tenant_id: str | None = None) -> Verdict:
        """Recompute the run's hash chain and checkpoint hashes, and those of every sub-agent run below
        it (`Verdict.below`); check that each sub-agent answer in a caller's ledger is its child's."""
        return await self._store.integrity.verify_tree(self._scope.scoped(tenant_id, run_id), run_id)

    async def verify_all(
        self,
        since: datetime | str | None = None,
        *,
        limit: int | None = None,
        tenant_id: str | None = None,
        settle_seconds: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> VerifyAllReport:
        """Check every run of the tenant created since `since` (a datetime, an age such as `2h`, or an
        ISO time; every run without), oldest first, at most `limit`: its Postgres mirror against its
        Temporal history (every completed model and tool activity has its event), its hash chain and
        checkpoints, its status against its workflow's, and that no tool effect is recorded twice.
        `progress(done, total)` is called as runs are checked. See `waypoint.gateway.invariants`."""
        from waypoint.gateway.invariants import SETTLE_SECONDS, VerifyAll

        tenant = self._scope.tenant(tenant_id)
        when = parse_when("since", since) if isinstance(since, str) else since
        if limit is not None:
            check_count("limit", limit, high=VERIFY_ALL_MAX)
        check = VerifyAll(
            self._store,
            await self._temporal(),
            tenant,
            settle_seconds=SETTLE_SECONDS if settle_seconds is None else settle_seconds,
            progress=progress,
        )
        return await check.run(when, limit)

    async def delete(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """Remove a finished run and every trace of it: its episodes in long-term memory, its spans in
        the local span file, then its rows (the only way rows leave the append-only log). In that
        order, so a delete cut half-way (a crash, an unreachable memory worker) finishes when run again:
        the run's row is the last thing to go."""
        async with self._scope.on_run(Action.DELETE, tenant_id, run_id) as tenant_id:
            tenant = self._scope.scoped(tenant_id, run_id)
            for node in reversed((await self._store.trees.tree(tenant, run_id))[1:]):  # its sub-agent runs first
                await self._delete_one(tenant, node.run.run_id)
            await self._delete_one(tenant, run_id)

    async def _delete_one(self, tenant: str, run_id: str) -> None:
        run = await self._store.integrity.deletable(tenant, run_id)
        settings = self._scope.settings
        if settings.memory and await self._has_episodes(run):
            await (await self._temporal()).memory(MemoryRequest(MemoryOp.FORGET, tenant, run_id=run_id))
        if run.trace_id:
            from waypoint.telemetry.spanfile import remove_trace, span_file

            remove_trace(span_file(settings.state_dir), run.trace_id)
        await self._store.integrity.delete_run(tenant, run_id)

    async def _has_episodes(self, run: RunRow) -> bool:
        """Whether long-term memory may hold episodes of the run: its steps were stored (by the run,
        or by a compaction pass), or it ran with memory (its memory tools write episodes too)."""
        if run.remembered_step > (run.fork_step or 0):
            return True
        plan = await self._store.recorded_plan(run.tenant_id, run.run_id)
        return plan is not None and plan.memory_queue is not None
