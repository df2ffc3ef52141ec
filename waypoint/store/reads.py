"""Read queries over the mirror. Every one is scoped by tenant, and none loads state blobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, select
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.errors import NotFound
from waypoint.store.schema import checkpoints, events, runs


def _row(mapping: Any) -> dict[str, Any]:
    out = dict(mapping)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
        elif key == "cost_usd" and value is not None:
            out[key] = float(value)
    return out


async def list_runs(engine: AsyncEngine, tenant_id: str, *, limit: int = 20, status: str | None = None) -> list[dict]:
    query = select(runs).where(runs.c.tenant_id == tenant_id)
    if status:
        query = query.where(runs.c.status == status)
    query = query.order_by(runs.c.created_at.desc(), runs.c.run_id).limit(limit)
    async with engine.connect() as conn:
        return [_row(r) for r in (await conn.execute(query)).mappings()]


async def get_run(engine: AsyncEngine, tenant_id: str, run_id: str) -> dict:
    async with engine.connect() as conn:
        row = (
            (await conn.execute(select(runs).where(runs.c.run_id == run_id, runs.c.tenant_id == tenant_id)))
            .mappings()
            .first()
        )
    if row is None:
        raise NotFound(f"no run {run_id!r} for tenant {tenant_id!r}: list runs with `waypoint runs`")
    return _row(row)


@dataclass
class StepLine:
    """One line of a run's timeline."""

    step: int
    at: str
    action: str
    tools: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    model_ms: int = 0
    tools_ms: int = 0
    tool_errors: int = 0
    answer: str | None = None


async def timeline(engine: AsyncEngine, tenant_id: str, run_id: str, *, after_step: int = 0) -> list[StepLine]:
    """One line per recorded step after `after_step`, built from small JSON fields of the events."""
    await get_run(engine, tenant_id, run_id)  # tenant check and a clear "not found"
    p = events.c.payload
    query = (
        select(
            events.c.step,
            events.c.kind,
            checkpoints.c.created_at,
            p["tool_calls"].label("tool_calls"),
            p["usage"]["input_tokens"].astext.cast(Integer).label("input_tokens"),
            p["usage"]["output_tokens"].astext.cast(Integer).label("output_tokens"),
            p["latency_ms"].astext.cast(Integer).label("latency_ms"),
            p["content"].astext.label("content"),
            p["duration_ms"].astext.cast(Integer).label("duration_ms"),
            p["is_error"].astext.label("is_error"),
        )
        .join(checkpoints, (checkpoints.c.run_id == events.c.run_id) & (checkpoints.c.step == events.c.step))
        .where(
            events.c.run_id == run_id, events.c.step > after_step, events.c.kind.in_(("model_response", "tool_result"))
        )
        .order_by(events.c.seq)
    )
    lines: dict[int, StepLine] = {}
    async with engine.connect() as conn:
        for r in (await conn.execute(query)).mappings():
            if r["kind"] == "model_response":
                names = [c["name"] for c in r["tool_calls"] or []]
                lines[r["step"]] = StepLine(
                    step=r["step"],
                    at=r["created_at"].isoformat(),
                    action="tools" if names else "answer",
                    tools=names,
                    input_tokens=r["input_tokens"] or 0,
                    output_tokens=r["output_tokens"] or 0,
                    model_ms=r["latency_ms"] or 0,
                    answer=None if names else r["content"],
                )
            elif r["step"] in lines:
                line = lines[r["step"]]
                line.tools_ms += r["duration_ms"] or 0
                line.tool_errors += r["is_error"] == "true"
    return [lines[s] for s in sorted(lines)]
