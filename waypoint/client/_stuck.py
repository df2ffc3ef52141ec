"""Whether a run is stuck (its workflow task keeps failing): asked of Temporal at each call, never
stored, and reported on the `waypoint.run.stuck` gauge."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from waypoint.client._scope import Scope, TemporalLink
from waypoint.errors import WaypointError
from waypoint.names import FINISHED
from waypoint.store.rows import RunRow

# A runs page asks Temporal whether each unfinished run is stuck: at most this many calls at a time,
# however long the page (a listing of 500 live runs must not open 500 calls at once).
STUCK_CHECKS_AT_ONCE = 16

# Runs this process reported stuck (their gauge point went to 1). One set per process, as the gauge
# is: a cancel through one client resets the point another client of the process set.
_SEEN: set[str] = set()


class Stuck:
    def __init__(self, temporal: TemporalLink, scope: Scope):
        self._temporal = temporal
        self._scope = scope

    async def stuck(self, run_id: str, *, tenant_id: str | None = None) -> str | None:
        """Why the run cannot make progress (its workflow task keeps failing, with the last
        failure), or None. Derived from Temporal at each call, never stored."""
        await self._scope.check_tenant(run_id, tenant_id)
        return await self.why(run_id, self._scope.tenant(tenant_id))

    async def why(self, run_id: str, tenant: str) -> str | None:
        try:
            why = await (await self._temporal()).stuck(run_id)
        except WaypointError:  # Temporal unreachable: Postgres still answers, without this
            return None
        self.gauge(run_id, tenant, why)
        return why

    def gauge(self, run_id: str, tenant: str, why: str | None) -> None:
        """`waypoint.run.stuck`: 1 for a run seen stuck, back to 0 when it is not (a point per run
        this process saw stuck, not per run it read)."""
        from waypoint import telemetry  # only a look at a live run needs it

        if why or run_id in _SEEN:
            telemetry.metrics().stuck.set(1 if why else 0, {"waypoint.run_id": run_id, "waypoint.tenant": tenant})
            (_SEEN.add if why else _SEEN.discard)(run_id)

    async def with_stuck(self, rows: Sequence[RunRow]) -> list[RunRow]:
        """The rows, each unfinished one marked with why it is stuck if it is (one Temporal call
        per unfinished run, STUCK_CHECKS_AT_ONCE at a time; none when every run has ended)."""
        live = [r for r in rows if r.status not in FINISHED]
        for ended in (r for r in rows if r.status in FINISHED and r.run_id in _SEEN):
            self.gauge(ended.run_id, ended.tenant_id, None)  # a run seen stuck that ended since
        gate = asyncio.Semaphore(STUCK_CHECKS_AT_ONCE)

        async def check(row: RunRow) -> str | None:
            async with gate:
                return await self.why(row.run_id, row.tenant_id)

        found = await asyncio.gather(*(check(r) for r in live))
        marked = {r.run_id: why for r, why in zip(live, found, strict=True) if why}
        return [replace(r, stuck=marked[r.run_id]) if r.run_id in marked else r for r in rows]
