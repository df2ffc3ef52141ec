"""What live streams read and send: the tail of a run's log, and notifications.

The log is the stream: a client's position is an event's seq, and what it has not seen is read
from `events` (one query, tenant-scoped), whether it reconnects after a minute or is told by a
notification that the run moved on. Notifications (`pg_notify`) only say that something
changed, or carry ephemeral data (model token deltas) that is not part of the log.
"""

from __future__ import annotations

from sqlalchemy import func, select, text

from waypoint.errors import NotFound
from waypoint.store.base import StoreBase, of_tenant
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, event_row
from waypoint.store.rows import EventRow
from waypoint.store.schema import events, runs

EVENTS_CHANNEL = "waypoint_events"  # '<run_id> <last seq> <last step>' per INSERT statement (migration 0009)
DELTAS_CHANNEL = "waypoint_deltas"  # model token deltas, batched (waypoint.deltas)
NOTIFY_MAX_BYTES = 7900  # Postgres refuses a payload of 8000 bytes or more

_NOTIFY = text(
    "SELECT pg_notify(:channel, p) FROM unnest(CAST(:payloads AS text[])) WITH ORDINALITY AS t(p, i) ORDER BY i"
)


class Streams(StoreBase):
    async def tail(self, tenant_id: str, run_id: str, *, after_seq: int = 0, limit: int = 500) -> list[EventRow]:
        """The run's events after `after_seq`, in order, at most `limit`; NotFound for another
        tenant's run (one query: the tenant is checked by the join)."""
        query = (
            select(events, LEDGER_OUTPUT)
            .select_from(EVENTS_WITH_OUTPUTS.join(runs, runs.c.run_id == events.c.run_id))
            .where(events.c.run_id == run_id, of_tenant(tenant_id), events.c.seq > after_seq)
            .order_by(events.c.seq)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
            if not rows and after_seq == 0:
                await self._run(conn, tenant_id, run_id)
        return [event_row(r) for r in rows]

    async def last_seq(self, tenant_id: str, run_id: str) -> int:
        """The seq of the run's newest event (0 before the first)."""
        query = select(func.max(events.c.seq)).where(events.c.run_id == run_id)
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            return int(await conn.scalar(query) or 0)

    async def run_exists(self, tenant_id: str, run_id: str) -> bool:
        try:
            await self.get_run(tenant_id, run_id)
        except NotFound:
            return False
        return True

    async def notify(self, channel: str, payloads: list[str]) -> None:
        """Send each payload on `channel`, in order, in one round trip (autocommit: delivered at once)."""
        if not payloads:
            return
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(_NOTIFY, {"channel": channel, "payloads": payloads})
