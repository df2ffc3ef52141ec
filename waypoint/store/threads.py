"""Agent Protocol threads: a thread is a conversation, the chain of runs it holds, in order.

A new run on a thread forks the previous run at its last step (so it continues from that run's
final state); the position of each run in the chain is reserved before the run starts, and the
unique (thread, position) key lets only one of two racing requests take the next slot.
Copying a thread shares its runs (their logs are immutable); the copy's next run forks from the
same place, and the original is never touched.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.store.base import StoreBase
from waypoint.store.rows import RunRow
from waypoint.store.schema import runs, thread_runs, threads


@dataclass(frozen=True)
class ThreadRun:
    """One run of a thread, in order; `run` is None while its row is not written yet.
    `multitask_strategy`: what the run was created with on a busy thread (None: reject, the default)."""

    position: int
    run_id: str
    run: RunRow | None
    multitask_strategy: str | None = None


@dataclass(frozen=True)
class ThreadRow:
    """An Agent Protocol thread: a conversation, as the chain of runs it holds."""

    thread_id: str
    tenant_id: str
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    runs: list[ThreadRun] = field(default_factory=list)

    @property
    def last(self) -> ThreadRun | None:
        return self.runs[-1] if self.runs else None


def _thread_not_found(thread_id: str) -> NotFound:
    return NotFound(f"no thread {thread_id!r}: create one with POST /threads")


class Threads(StoreBase):
    async def create_thread(
        self,
        tenant_id: str,
        *,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        if_exists: str = "raise",
    ) -> ThreadRow:
        """A new thread; an existing id is a Conflict, or with `if_exists="do_nothing"` that thread
        (of this tenant: another tenant's id is a Conflict too, never a way in)."""
        tid = thread_id or str(uuid.uuid4())
        async with self.engine.begin() as conn:
            created = (
                await conn.execute(
                    insert(threads)
                    .values(thread_id=tid, tenant_id=tenant_id, metadata=metadata or {})
                    .on_conflict_do_nothing(index_elements=["thread_id"])
                    .returning(threads.c.thread_id)
                )
            ).first()
            if created is None:
                owner = await conn.scalar(select(threads.c.tenant_id).where(threads.c.thread_id == tid))
                if if_exists != "do_nothing" or owner != tenant_id:
                    raise Conflict(f"thread {tid!r} exists already: pick another id, or pass if_exists=do_nothing")
            return await self._thread(conn, tenant_id, tid)

    async def get_thread(self, tenant_id: str, thread_id: str) -> ThreadRow:
        async with self.engine.connect() as conn:
            return await self._thread(conn, tenant_id, thread_id)

    async def _thread(self, conn: AsyncConnection, tenant_id: str, thread_id: str) -> ThreadRow:
        mine = select(threads).where(threads.c.thread_id == thread_id, threads.c.tenant_id == tenant_id)
        row = (await conn.execute(mine)).mappings().first()
        if row is None:
            raise _thread_not_found(thread_id)
        chain = await conn.execute(
            select(thread_runs.c.position, thread_runs.c.run_id, thread_runs.c.multitask_strategy, runs)
            .select_from(thread_runs.outerjoin(runs, runs.c.run_id == thread_runs.c.run_id))
            .where(thread_runs.c.thread_id == thread_id)
            .order_by(thread_runs.c.position)
        )
        members = [
            ThreadRun(
                r["position"],
                r["run_id"],
                RunRow.of(r) if r["tenant_id"] is not None else None,
                r["multitask_strategy"],
            )
            for r in chain.mappings()
        ]
        return ThreadRow(
            thread_id=row["thread_id"],
            tenant_id=row["tenant_id"],
            metadata=row["metadata"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            runs=members,
        )

    async def update_thread(self, tenant_id: str, thread_id: str, metadata: dict[str, Any]) -> ThreadRow:
        """Merge `metadata` into the thread's."""
        async with self.engine.begin() as conn:
            done = (
                await conn.execute(
                    update(threads)
                    .where(threads.c.thread_id == thread_id, threads.c.tenant_id == tenant_id)
                    .values(
                        metadata=threads.c.metadata.op("||")(bindparam("merged", metadata, type_=JSONB)),
                        updated_at=func.now(),
                    )
                    .returning(threads.c.thread_id)
                )
            ).first()
            if done is None:
                raise _thread_not_found(thread_id)
            return await self._thread(conn, tenant_id, thread_id)

    async def delete_thread(self, tenant_id: str, thread_id: str) -> None:
        """Forget the thread (its runs stay in the log: `waypoint delete` removes a run)."""
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(threads)
                .where(threads.c.thread_id == thread_id, threads.c.tenant_id == tenant_id)
                .returning(threads.c.thread_id)
            )
            if gone.first() is None:
                raise _thread_not_found(thread_id)

    async def search_threads(
        self, tenant_id: str, *, metadata: dict[str, Any] | None = None, limit: int = 10, offset: int = 0
    ) -> list[ThreadRow]:
        """The tenant's threads, newest first, whose metadata contains `metadata`."""
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be 1 or more and offset 0 or more")
        query = select(threads.c.thread_id).where(threads.c.tenant_id == tenant_id)
        if metadata:
            query = query.where(threads.c.metadata.contains(metadata))
        query = query.order_by(threads.c.created_at.desc(), threads.c.thread_id).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            ids = list(await conn.scalars(query))
            return [await self._thread(conn, tenant_id, tid) for tid in ids]

    async def count_threads(self, tenant_id: str, *, metadata: dict[str, Any] | None = None) -> int:
        query = select(func.count()).select_from(threads).where(threads.c.tenant_id == tenant_id)
        if metadata:
            query = query.where(threads.c.metadata.contains(metadata))
        async with self.engine.connect() as conn:
            return int(await conn.scalar(query) or 0)

    async def reserve_thread_run(
        self, tenant_id: str, thread_id: str, position: int, run_id: str, multitask_strategy: str | None = None
    ) -> None:
        """Take slot `position` of the thread for `run_id` (created with `multitask_strategy`); a
        Conflict when another run took it first."""
        async with self.engine.begin() as conn:
            await self._thread(conn, tenant_id, thread_id)
            try:
                await conn.execute(
                    thread_runs.insert().values(
                        thread_id=thread_id, position=position, run_id=run_id, multitask_strategy=multitask_strategy
                    )
                )
            except IntegrityError:
                raise Conflict(f"thread {thread_id!r} got another run meanwhile: wait for it, then try again") from None
            await conn.execute(update(threads).where(threads.c.thread_id == thread_id).values(updated_at=func.now()))

    async def release_thread_run(self, tenant_id: str, thread_id: str, run_id: str) -> None:
        """Take the run off the tenant's thread (a slot whose run could not start, or a deleted run);
        NotFound when no such thread of this tenant holds it, never a silent no-op."""
        mine = select(threads.c.thread_id).where(threads.c.thread_id == thread_id, threads.c.tenant_id == tenant_id)
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(thread_runs)
                .where(
                    thread_runs.c.thread_id == thread_id,
                    thread_runs.c.run_id == run_id,
                    thread_runs.c.thread_id.in_(mine),
                )
                .returning(thread_runs.c.position)
            )
            if gone.first() is None:
                raise NotFound(
                    f"thread {thread_id!r} holds no run {run_id!r}: GET /threads/{thread_id}/runs lists its runs"
                )

    async def copy_thread(self, tenant_id: str, thread_id: str) -> ThreadRow:
        """A new thread holding the same runs (shared, never copied); the copy goes on on its own."""
        source = await self.get_thread(tenant_id, thread_id)
        copy = await self.create_thread(tenant_id, metadata=dict(source.metadata))
        if source.runs:
            async with self.engine.begin() as conn:
                await conn.execute(
                    thread_runs.insert(),
                    [
                        {
                            "thread_id": copy.thread_id,
                            "position": r.position,
                            "run_id": r.run_id,
                            "multitask_strategy": r.multitask_strategy,
                        }
                        for r in source.runs
                    ],
                )
        return await self.get_thread(tenant_id, copy.thread_id)

    async def thread_of_run(self, tenant_id: str, run_id: str) -> str | None:
        """The first thread (of this tenant) that holds the run, if any."""
        query = (
            select(thread_runs.c.thread_id)
            .join(threads, threads.c.thread_id == thread_runs.c.thread_id)
            .where(thread_runs.c.run_id == run_id, threads.c.tenant_id == tenant_id)
            .order_by(threads.c.created_at)
            .limit(1)
        )
        async with self.engine.connect() as conn:
            found: str | None = await conn.scalar(query)
        return found
