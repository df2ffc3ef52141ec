"""Runs that wait before they start: a delayed run (status `scheduled` until `runs.start_at`), an
enqueued run (status `queued` until `runs.after_run_id` ends) and a run that joins a thread.

Such a run has its row at once, with no steps, no checkpoint and `max_steps` 0 (as a run that could
not start: nothing forks from it); `start_run` later turns that row into the running run
(StepWriter.create_run). Every write here is idempotent under activity retry.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError

from waypoint.errors import Conflict, NotFound
from waypoint.names import WAITING_TO_START
from waypoint.store.base import StoreBase, run_filter
from waypoint.store.rows import RunRow
from waypoint.store.schema import runs, thread_runs, threads
from waypoint.types import ForkPoint, HoldRunInput

# How many never-started runs an enqueued run looks past for where to go on from (each cancelled
# while it waited points at the run it waited for): a bound, so a cycle of ids cannot loop.
MAX_SKIPPED = 1000


class Starts(StoreBase):
    async def create_waiting_run(self, hold: HoldRunInput) -> RunRow:
        """The row of a run that waits to start (`hold.status`: scheduled or queued). A retry changes
        nothing; a run still waiting takes the new status (a delayed run whose time came, now waiting
        for its turn), and any other row is left as it is."""
        parent = hold.parent
        async with self.engine.begin() as conn:
            held = insert(runs).values(
                run_id=hold.run_id,
                tenant_id=hold.tenant_id,
                agent=hold.agent,
                task=hold.task,
                model=hold.model or "",
                status=hold.status,
                max_steps=0,
                start_at=datetime.fromtimestamp(hold.start_at, UTC) if hold.start_at is not None else None,
                after_run_id=hold.after_run,
                schedule_id=hold.schedule_id,
                webhook=hold.webhook,
                caller_run_id=parent.run_id if parent else None,
                caller_step=parent.step if parent else None,
                caller_call_index=parent.call_index if parent else None,
                root_run_id=parent.root_run_id if parent else hold.run_id,
                priority=hold.priority,
            )
            await conn.execute(
                held.on_conflict_do_update(
                    index_elements=["run_id"],
                    set_={"status": held.excluded.status, "updated_at": func.now()},
                    where=runs.c.status.in_(list(WAITING_TO_START)) & (runs.c.tenant_id == hold.tenant_id),
                )
            )
            return await self._run(conn, hold.tenant_id, hold.run_id)

    async def join_thread(
        self, tenant_id: str, thread_id: str, run_id: str, *, multitask_strategy: str | None = None
    ) -> str | None:
        """Take the thread's next place for `run_id` (created with `multitask_strategy`) and return the
        run before it there (None on an empty thread); the run's row, if written, records it as the
        run it waits for. A retry finds the place taken already and answers the same. NotFound when
        the tenant has no such thread."""
        for _ in range(20):  # another run may take the next place between the read and the insert
            async with self.engine.begin() as conn:
                owner = await conn.scalar(
                    select(threads.c.thread_id)
                    .where(threads.c.thread_id == thread_id, threads.c.tenant_id == tenant_id)
                    .with_for_update()
                )
                if owner is None:
                    raise NotFound(f"thread {thread_id!r} is gone: the run had no thread to join")
                members = (
                    await conn.execute(
                        select(thread_runs.c.position, thread_runs.c.run_id)
                        .where(thread_runs.c.thread_id == thread_id)
                        .order_by(thread_runs.c.position)
                    )
                ).all()
                mine = next((m.position for m in members if m.run_id == run_id), None)
                if mine is None:
                    mine = members[-1].position + 1 if members else 0
                    try:
                        async with conn.begin_nested():
                            await conn.execute(
                                thread_runs.insert().values(
                                    thread_id=thread_id,
                                    position=mine,
                                    run_id=run_id,
                                    multitask_strategy=multitask_strategy,
                                )
                            )
                    except IntegrityError:
                        continue
                    await conn.execute(
                        update(threads).where(threads.c.thread_id == thread_id).values(updated_at=func.now())
                    )
                before = [m.run_id for m in members if m.position < mine]
                after = before[-1] if before else None
                await conn.execute(
                    update(runs).where(run_filter(tenant_id, run_id)).values(after_run_id=after, updated_at=func.now())
                )
                return after
        raise Conflict(f"thread {thread_id!r} kept taking new runs: run {run_id} could not join it")

    async def fork_point_after(self, tenant_id: str, run_id: str) -> ForkPoint:
        """Where a run enqueued after `run_id` (which has ended) goes on from: its last step if it
        started, else (it was cancelled while it waited) the same for the run it waited for, and
        so on; a fresh start when none started. NotFound unless `run_id` is the tenant's."""
        seen = 0
        current: str | None = run_id
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            while current is not None and seen < MAX_SKIPPED:
                row = (
                    await conn.execute(
                        select(runs.c.max_steps, runs.c.steps, runs.c.after_run_id).where(
                            run_filter(tenant_id, current)
                        )
                    )
                ).first()
                if row is None:  # deleted meanwhile
                    return ForkPoint()
                if row.max_steps > 0:  # it started: it has a checkpoint at its last step
                    return ForkPoint(run_id=current, step=row.steps)
                current, seen = row.after_run_id, seen + 1
        return ForkPoint()
