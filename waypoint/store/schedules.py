"""Scheduled agents: the tenant's record of each Temporal Schedule it made (`schedules`), and the
runs each one fired (`runs.schedule_id`).

The row is what scopes a schedule to its tenant: Temporal's Schedule has the same id and holds
the live state (paused, next fire times), but a tenant reaches it only through its own row, so
another tenant's schedule is "not found", like another tenant's run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import Conflict, NotFound
from waypoint.store.base import StoreBase
from waypoint.store.schema import runs, schedules


@dataclass(frozen=True)
class ScheduledRunRef:
    """A run a schedule fired, as its row says now."""

    run_id: str
    status: str  # a RunStatus
    started_at: datetime | None


@dataclass(frozen=True)
class ScheduleRow:
    """A scheduled agent: its row in `schedules` (the tenant's record, which scopes it) and, when
    read through the client, what Temporal's Schedule says now (paused, note, next fire times) and
    the last runs it fired (newest first).

    `spec`: every (seconds) or cron (text) with tz, overlap (a ScheduleOverlap), catchup and
    jitter (seconds), end_at (ISO 8601 or None), and what each fired run gets: model, max_steps,
    priority, webhook."""

    schedule_id: str
    tenant_id: str
    agent: str
    task: str
    thread_id: str | None
    spec: dict[str, Any]
    created_at: datetime
    paused: bool = False
    note: str | None = None
    next_runs: list[datetime] = field(default_factory=list)
    recent: list[ScheduledRunRef] = field(default_factory=list)
    updated_at: datetime | None = None


def schedule_not_found(schedule_id: str) -> NotFound:
    return NotFound(f"no schedule {schedule_id!r}: list them with `waypoint cron list`")


def _row(r: Any) -> ScheduleRow:
    return ScheduleRow(
        schedule_id=r["schedule_id"],
        tenant_id=r["tenant_id"],
        agent=r["agent"],
        task=r["task"],
        thread_id=r["thread_id"],
        spec=dict(r["spec"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
    )


class ScheduleStore(StoreBase):
    async def create_schedule(
        self,
        tenant_id: str,
        schedule_id: str,
        *,
        agent: str,
        task: str,
        thread_id: str | None,
        spec: dict[str, Any],
    ) -> ScheduleRow:
        """The schedule's row; an id taken already (by any tenant) is a Conflict."""
        async with self.engine.begin() as conn:
            created = (
                (
                    await conn.execute(
                        insert(schedules)
                        .values(
                            schedule_id=schedule_id,
                            tenant_id=tenant_id,
                            agent=agent,
                            task=task,
                            thread_id=thread_id,
                            spec=spec,
                        )
                        .on_conflict_do_nothing(index_elements=["schedule_id"])
                        .returning(*schedules.c)
                    )
                )
                .mappings()
                .first()
            )
        if created is None:
            raise Conflict(f"schedule {schedule_id!r} exists already: pick another id")
        return _row(created)

    async def _schedule(self, conn: AsyncConnection, tenant_id: str, schedule_id: str) -> ScheduleRow:
        mine = select(schedules).where(schedules.c.schedule_id == schedule_id, schedules.c.tenant_id == tenant_id)
        row = (await conn.execute(mine)).mappings().first()
        if row is None:
            raise schedule_not_found(schedule_id)
        return _row(row)

    async def get_schedule(self, tenant_id: str, schedule_id: str) -> ScheduleRow:
        async with self.engine.connect() as conn:
            return await self._schedule(conn, tenant_id, schedule_id)

    async def list_schedules(
        self,
        tenant_id: str,
        *,
        agent: str | None = None,
        thread_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[ScheduleRow]:
        """The tenant's schedules, newest first."""
        query = select(schedules).where(schedules.c.tenant_id == tenant_id)
        if agent is not None:
            query = query.where(schedules.c.agent == agent)
        if thread_id is not None:
            query = query.where(schedules.c.thread_id == thread_id)
        query = query.order_by(schedules.c.created_at.desc(), schedules.c.schedule_id).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(query)).mappings()]

    async def update_schedule(
        self, tenant_id: str, schedule_id: str, *, task: str, spec: dict[str, Any]
    ) -> ScheduleRow:
        async with self.engine.begin() as conn:
            row = (
                (
                    await conn.execute(
                        update(schedules)
                        .where(schedules.c.schedule_id == schedule_id, schedules.c.tenant_id == tenant_id)
                        .values(task=task, spec=spec, updated_at=func.now())
                        .returning(*schedules.c)
                    )
                )
                .mappings()
                .first()
            )
        if row is None:
            raise schedule_not_found(schedule_id)
        return _row(row)

    async def delete_schedule(self, tenant_id: str, schedule_id: str) -> None:
        """Forget the schedule (the runs it fired stay, with their schedule id)."""
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(schedules)
                .where(schedules.c.schedule_id == schedule_id, schedules.c.tenant_id == tenant_id)
                .returning(schedules.c.schedule_id)
            )
            if gone.first() is None:
                raise schedule_not_found(schedule_id)

    async def scheduled_runs(
        self, tenant_id: str, schedule_ids: Sequence[str], *, per: int = 5
    ) -> dict[str, list[ScheduledRunRef]]:
        """The last `per` runs each schedule fired, newest first."""
        if not schedule_ids:
            return {}
        place = (
            func.row_number()
            .over(partition_by=runs.c.schedule_id, order_by=(runs.c.created_at.desc(), runs.c.run_id))
            .label("place")
        )
        ranked = (
            select(runs.c.schedule_id, runs.c.run_id, runs.c.status, runs.c.created_at, place)
            .where(runs.c.tenant_id == tenant_id, runs.c.schedule_id.in_(list(schedule_ids)))
            .subquery()
        )
        query = select(ranked).where(ranked.c.place <= per).order_by(ranked.c.schedule_id, ranked.c.place)
        found: dict[str, list[ScheduledRunRef]] = {s: [] for s in schedule_ids}
        async with self.engine.connect() as conn:
            for r in (await conn.execute(query)).mappings():
                found[r["schedule_id"]].append(ScheduledRunRef(r["run_id"], r["status"], r["created_at"]))
        return found
