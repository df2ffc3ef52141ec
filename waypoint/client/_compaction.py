"""Compaction as the client reaches it: its Temporal Schedule, a pass run now, and the passes' record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from waypoint.access import Action, Target, TargetKind
from waypoint.client._runs import Runs
from waypoint.client._scope import Scope, TemporalLink, run_target
from waypoint.compaction_types import CompactionReport
from waypoint.store import RunStore
from waypoint.store.compactions import CompactionRow

if TYPE_CHECKING:
    from waypoint.gateway.schedule import ScheduleInfo


class Compaction:
    def __init__(self, store: RunStore, temporal: TemporalLink, scope: Scope, runs: Runs):
        self._store = store
        self._temporal = temporal
        self._scope = scope
        self._runs = runs

    async def apply_compaction_schedule(self) -> str:
        """Create or update the compaction Schedule; "created", "updated" or "unchanged"."""
        async with self._scope.act(Action.COMPACTION_WRITE, None, Target(TargetKind.SETTING, "compaction")):
            from waypoint.gateway.schedule import apply_schedule

            return await apply_schedule((await self._temporal()).client, self._scope.settings)

    async def compaction_schedule(self) -> ScheduleInfo:
        """The compaction Schedule and the outcome of its last passes."""
        from waypoint.gateway.schedule import describe_schedule

        return await describe_schedule((await self._temporal()).client, self._scope.settings)

    async def compact(self, run_id: str | None = None, *, tenant_id: str | None = None) -> CompactionReport:
        """Run a compaction pass now (of one run, or of the tenant's runs past the threshold) and wait."""
        async with self._scope.act(Action.COMPACTION_WRITE, tenant_id, run_target(run_id)) as tenant_id:
            from waypoint.gateway.schedule import compact_now

            tenant = self._scope.scoped(tenant_id, run_id)
            if run_id is not None:
                await self._runs.run(run_id, tenant_id=tenant)  # an unknown run is named before Temporal is asked
            client = (await self._temporal()).client
            return await compact_now(client, self._scope.settings, run_id=run_id, tenant_id=tenant)

    async def compactions(
        self, run_id: str | None = None, *, tenant_id: str | None = None, limit: int = 20
    ) -> list[CompactionRow]:
        tenant = self._scope.scoped(tenant_id, run_id)
        return await self._store.compaction.compactions(tenant, run_id=run_id, limit=limit)
