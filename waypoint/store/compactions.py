"""Reads of the `compactions` table: the newest compaction of a run, and listings.

`latest_compaction(conn, run_id)` is what working-memory assembly needs. Every row is
complete (it is written in one transaction), so the newest row is the one to use.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waypoint.store.schema import compactions, runs


def _row(mapping: Any) -> dict[str, Any]:
    out = dict(mapping)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
    return out


async def latest_compaction(conn: AsyncConnection, run_id: str) -> dict[str, Any] | None:
    """The newest compaction of the run, or None. Keys: id, run_id, tenant_id, first_seq, last_seq,
    first_step, last_step, tokens_before, tokens_after, summary (the text block to inject), pinned
    ([{step, seq, text, source}], verbatim, every decision up to last_seq), pruned ([{seq, step, tool,
    reason, tokens, replacement}]: what this compaction pruned after the previous one's last_seq),
    structured ({key_facts, open_threads, decisions}), method, model, fallback_reason, created_at.

    Working memory from it (see `waypoint.compaction.compacted_view`): messages with seq <
    first_seq (the instructions and the task), the pinned decisions, `summary`, then every message
    with seq > last_seq verbatim. Ranges are contiguous, so the newest row covers the most."""
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
    return _row(row) if row is not None else None


async def list_compactions(
    engine: AsyncEngine, tenant_id: str, *, run_id: str | None = None, limit: int = 20
) -> list[dict[str, Any]]:
    """The tenant's compactions, newest first, without the summary text's bulk (its first 200 characters)."""
    query = select(
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
    ).where(compactions.c.tenant_id == tenant_id)
    if run_id is not None:
        query = query.where(compactions.c.run_id == run_id)
    query = query.order_by(compactions.c.created_at.desc(), compactions.c.id.desc()).limit(limit)
    async with engine.connect() as conn:
        return [_row(r) for r in (await conn.execute(query)).mappings()]


async def run_tenant(conn: AsyncConnection, run_id: str) -> str | None:
    return await conn.scalar(select(runs.c.tenant_id).where(runs.c.run_id == run_id))
