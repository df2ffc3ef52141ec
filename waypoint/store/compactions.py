"""The `compactions` table: which runs are due, the range a compaction covers, its row.

Compactions of a run are cumulative: each covers from the first event after the head
(instructions and task) to its `last_seq`, so the newest row alone describes the compacted
view. Every row is written in one transaction, so the newest row is always complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Text, cast, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.compaction import LogEvent
from waypoint.compaction_types import RunRef
from waypoint.errors import NotFound
from waypoint.names import TURN_KINDS, EventKind
from waypoint.store.base import StoreBase, not_found, of_tenant, run_filter
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, resolved
from waypoint.store.schema import compactions, events, runs
from waypoint.tokens import CHARS_PER_TOKEN


@dataclass(frozen=True)
class CompactionRow:
    """One row of `compactions`, as listings show it (the summary cut to its first 200 characters)."""

    id: int
    run_id: str
    first_seq: int
    last_seq: int
    first_step: int
    last_step: int
    tokens_before: int
    tokens_after: int
    method: str
    model: str | None
    fallback_reason: str | None
    pinned: int
    pruned: int
    summary: str
    created_at: datetime


async def latest_compaction(conn: AsyncConnection, run_id: str) -> dict[str, Any] | None:
    """The newest compaction of the run, or None. Keys: id, run_id, tenant_id, first_seq, last_seq,
    first_step, last_step, tokens_before, tokens_after, summary (the text block to inject), pinned
    ([{step, seq, text, source}], verbatim, every decision up to last_seq), pruned ([{seq, step, tool,
    reason, tokens, replacement}]: what this compaction pruned after the previous one's last_seq),
    structured ({key_facts, open_threads, decisions}), method, model, fallback_reason, created_at."""
    row = (
        (
            await conn.execute(
                select(compactions)
                .where(compactions.c.run_id == run_id)
                .order_by(compactions.c.last_seq.desc(), compactions.c.id.desc())
                .limit(1)
            )
        )
        .mappings()
        .first()
    )
    return dict(row) if row is not None else None


async def compaction_by_id(conn: AsyncConnection, compaction_id: int) -> dict[str, Any] | None:
    row = (await conn.execute(select(compactions).where(compactions.c.id == compaction_id))).mappings().first()
    return dict(row) if row is not None else None


async def insert_compaction(conn: AsyncConnection, row: dict[str, Any], previous_id: int | None) -> tuple[int, bool]:
    """`write_compaction` inside the caller's transaction."""
    # Two compactions of one run at once (the schedule and the agent's inline one): the second
    # waits here, then finds the first's row and writes nothing.
    await conn.execute(
        text("SELECT pg_advisory_xact_lock(hashtext('waypoint.compaction:' || :run))"), {"run": row["run_id"]}
    )
    newest = await latest_compaction(conn, row["run_id"])
    if newest is not None and newest["id"] != previous_id and newest["last_seq"] >= row["last_seq"]:
        return newest["id"], False
    inserted = await conn.scalar(
        insert(compactions)
        .values(**row)
        .on_conflict_do_nothing(constraint="compactions_run_range_key")
        .returning(compactions.c.id)
    )
    if inserted is not None:
        return inserted, True
    existing = await conn.scalar(
        select(compactions.c.id).where(
            compactions.c.run_id == row["run_id"],
            compactions.c.first_seq == row["first_seq"],
            compactions.c.last_seq == row["last_seq"],
        )
    )
    if existing is None:
        raise NotFound(f"the compaction of run {row['run_id']} vanished while it was written")
    return existing, False


@dataclass
class CompactionSource:
    """What a compaction of one run reads: the run, its newest compaction, and the range's events.
    `events` is empty when there is nothing to compact (then `after` is where the view starts)."""

    run_id: str
    tenant_id: str
    agent: str
    model: str
    task: str
    previous: dict[str, Any] | None
    first_seq: int  # the first event after the head: every compaction of the run starts here
    after: int  # the range starts after this seq (the previous compaction's end, or the head)
    last_seq: int = 0
    events: list[LogEvent] = field(default_factory=list)


class CompactionStore(StoreBase):
    async def runs_to_compact(
        self, *, threshold_tokens: int, limit: int, tenant_id: str | None = None, run_id: str | None = None
    ) -> list[RunRef]:
        """Runs (running or finished) whose history after their newest compaction passes the
        threshold, largest first (estimated tokens of the events' JSON); with `run_id`, that run
        whatever its size. `tenant_id=None`: every tenant's (the scheduled pass)."""
        done = (
            select(func.coalesce(func.max(compactions.c.last_seq), 0))
            .where(compactions.c.run_id == runs.c.run_id)
            .scalar_subquery()
        )
        tokens = func.coalesce(func.sum(func.length(cast(events.c.payload, Text))), 0) / CHARS_PER_TOKEN
        query = (
            select(runs.c.run_id, runs.c.tenant_id, tokens.label("tokens"))
            .select_from(runs)
            .outerjoin(
                events,
                (events.c.run_id == runs.c.run_id) & events.c.kind.in_(TURN_KINDS) & (events.c.seq > done),
            )
            .group_by(runs.c.run_id, runs.c.tenant_id)
        )
        if tenant_id is not None:
            query = query.where(of_tenant(tenant_id))
        if run_id is not None:
            query = query.where(runs.c.run_id == run_id)
        else:
            query = query.having(tokens >= threshold_tokens)
        query = query.order_by(tokens.desc(), runs.c.run_id).limit(limit)
        async with self.engine.connect() as conn:
            found = [RunRef(r.run_id, r.tenant_id, int(r.tokens)) for r in await conn.execute(query)]
        if run_id is not None and not found:
            raise not_found(tenant_id, run_id)
        return found

    async def compaction_source(
        self, tenant_id: str, run_id: str, *, keep_steps: int, upto_seq: int | None = None
    ) -> CompactionSource:
        """The events a compaction of this run covers: after its newest compaction, up to `upto_seq`
        (default: the newest event now, so turns that land meanwhile stay outside), minus the
        newest `keep_steps` steps."""
        async with self.engine.connect() as conn:
            run = (
                await conn.execute(select(runs.c.agent, runs.c.model, runs.c.task).where(run_filter(tenant_id, run_id)))
            ).first()
            if run is None:
                raise not_found(tenant_id, run_id)
            previous = await latest_compaction(conn, run_id)
            head = await conn.scalar(
                select(func.min(events.c.seq)).where(events.c.run_id == run_id, events.c.kind == EventKind.RUN_STARTED)
            )
            newest = await conn.scalar(select(func.max(events.c.seq)).where(events.c.run_id == run_id))
            upto = min(upto_seq, newest or 0) if upto_seq is not None else (newest or 0)
            after = max(previous["last_seq"] if previous else 0, head or 0)
            source = CompactionSource(
                run_id, tenant_id, run.agent, run.model, run.task, previous, first_seq=(head or 0) + 1, after=after
            )
            in_range = (events.c.run_id == run_id, events.c.seq > after, events.c.seq <= upto)
            steps = list(
                await conn.scalars(
                    select(events.c.step)
                    .where(*in_range, events.c.kind.in_(TURN_KINDS))
                    .group_by(events.c.step)
                    .order_by(events.c.step)
                )
            )
            if len(steps) <= keep_steps:
                return source
            cut_step = steps[-keep_steps - 1] if keep_steps else steps[-1]
            last_seq = await conn.scalar(select(func.max(events.c.seq)).where(*in_range, events.c.step <= cut_step))
            rows = await conn.execute(
                select(events.c.seq, events.c.step, events.c.kind, events.c.payload, LEDGER_OUTPUT)
                .select_from(EVENTS_WITH_OUTPUTS)
                .where(events.c.run_id == run_id, events.c.seq > after, events.c.seq <= last_seq)
                .order_by(events.c.seq)
            )
            source.last_seq = int(last_seq or after)
            source.events = [
                LogEvent(seq=r.seq, step=r.step, kind=r.kind, payload=resolved(r.payload, r.ledger_output))
                for r in rows
            ]
        return source

    async def write_compaction(self, row: dict[str, Any], previous_id: int | None) -> tuple[int, bool]:
        """Insert the row unless the range is compacted already; returns (id, created). One
        transaction, so a crash leaves no row or a complete one."""
        async with self.engine.begin() as conn:
            return await insert_compaction(conn, row, previous_id)

    async def compactions(self, tenant_id: str, *, run_id: str | None = None, limit: int = 20) -> list[CompactionRow]:
        """The tenant's compactions, newest first, the summary cut to its first 200 characters."""
        query = (
            select(
                compactions.c.id,
                compactions.c.run_id,
                compactions.c.first_seq,
                compactions.c.last_seq,
                compactions.c.first_step,
                compactions.c.last_step,
                compactions.c.tokens_before,
                compactions.c.tokens_after,
                compactions.c.method,
                compactions.c.model,
                compactions.c.fallback_reason,
                func.jsonb_array_length(compactions.c.pinned).label("pinned"),
                func.jsonb_array_length(compactions.c.pruned).label("pruned"),
                func.left(compactions.c.summary, 200).label("summary"),
                compactions.c.created_at,
            )
            .join(runs, runs.c.run_id == compactions.c.run_id)
            .where(of_tenant(tenant_id))
        )
        if run_id is not None:
            query = query.where(compactions.c.run_id == run_id)
        query = query.order_by(compactions.c.created_at.desc(), compactions.c.id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [CompactionRow(**r) for r in (await conn.execute(query)).mappings()]
