"""`wp.limits`: fleet flow control as every surface reads it (`waypoint limits`, `GET /v1/limits`,
the viewer's limits page, MCP), and where a waiting run stands in its line.

    report = await wp.limits.report()        # the limits file, and each key's calls in flight and waiting
    rows = await wp.limits.with_waits(rows)  # runs waiting for capacity get their place in line
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from waypoint.checks import check_tenant
from waypoint.config import Settings
from waypoint.limits import TENANT_KEY_PREFIX, tenant_key
from waypoint.names import RunStatus
from waypoint.store import RunStore
from waypoint.store.rows import LimitsReport, RunRow


class FleetLimits:
    def __init__(self, store: RunStore, settings: Settings):
        self._store = store
        self._settings = settings

    async def report(self, tenant_id: str | None = None) -> LimitsReport:
        """What is declared and what the limiter holds now, as `tenant_id` (default: the configured
        tenant) may see it. Model keys are the fleet's (a provider's limit is shared by every tenant)
        and name no run; of the tenants, only its own entry and line are shown."""
        tenant = self._settings.tenant if tenant_id is None else check_tenant(tenant_id)
        limits = self._settings.limits
        own = tenant_key(tenant)
        return LimitsReport(
            source=limits.source,
            models={k: v.model_dump() for k, v in limits.models.items()},
            tenants={k: v.model_dump() for k, v in limits.tenants.items() if k == tenant},
            breaker=limits.breaker.model_dump(),
            keys=[k for k in await self._store.key_health() if not k.key.startswith(TENANT_KEY_PREFIX) or k.key == own],
        )

    async def with_waits(self, rows: Sequence[RunRow]) -> list[RunRow]:
        """The rows, each run waiting for capacity with its place in its key's line (1: next)."""
        waiting = [r.run_id for r in rows if r.status == RunStatus.WAITING_CAPACITY]
        if not waiting:
            return list(rows)
        places = await self._store.waiting_positions(waiting, self._settings.limits)
        return [replace(r, waiting_position=places[r.run_id]) if r.run_id in places else r for r in rows]
