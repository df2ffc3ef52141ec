"""Episodic memory, served by the memory worker and reached through Temporal."""

from __future__ import annotations

from waypoint.access import Action
from waypoint.checks import check_count, check_name, check_text
from waypoint.client._runs import Runs
from waypoint.client._scope import Scope, TemporalLink
from waypoint.errors import InvalidInput
from waypoint.names import MemoryOp
from waypoint.types import Memory, MemoryRequest


class EpisodicMemory:
    def __init__(self, temporal: TemporalLink, scope: Scope, runs: Runs):
        self._temporal = temporal
        self._scope = scope
        self._runs = runs

    async def memory_search(
        self,
        query: str,
        *,
        k: int = 5,
        agent: str | None = None,
        run_id: str | None = None,
        tenant_id: str | None = None,
    ) -> list[Memory]:
        """Episodes of this tenant most relevant to `query` (optionally of one agent or run)."""
        if not check_text("the query", query).strip():
            raise InvalidInput("the query is empty: say what to search for")
        check_count("k", k, high=100)
        check_name("the agent", agent)
        tenant = self._scope.scoped(tenant_id, run_id)
        req = MemoryRequest(op=MemoryOp.SEARCH, tenant_id=tenant, query=query, k=k, agent=agent, run_id=run_id)
        return (await (await self._temporal()).memory(req)).memories

    async def memory_show(self, run_id: str, *, tenant_id: str | None = None) -> list[Memory]:
        """Every episode a run left in long-term memory."""
        tenant = self._scope.scoped(tenant_id, run_id)
        await self._runs.run(run_id, tenant_id=tenant)  # another tenant's run is "not found"
        request = MemoryRequest(MemoryOp.SHOW, tenant, run_id=run_id)
        return (await (await self._temporal()).memory(request)).memories

    async def memory_forget(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """Delete a run's episodes (this tenant's only), whether or not the run's row still exists;
        returns how many went."""
        async with self._scope.on_run(Action.ERASE, tenant_id, run_id) as tenant_id:
            tenant = self._scope.scoped(tenant_id, run_id)
            request = MemoryRequest(MemoryOp.FORGET, tenant, run_id=run_id)
            deleted = (await (await self._temporal()).memory(request)).deleted
            if deleted == 0:
                await self._runs.run(run_id, tenant_id=tenant)  # neither episodes nor a run: say so
            return deleted
