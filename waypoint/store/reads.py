"""Read queries over the mirror. Every one is scoped by tenant, and none loads state blobs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import column, select, table
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.errors import NotFound
from waypoint.store.schema import runs
from waypoint.types import RunResult


def _row(mapping: Any) -> dict[str, Any]:
    out = dict(mapping)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
        elif key == "cost_usd" and value is not None:
            out[key] = float(value)
    return out


def run_result(row: Mapping[Any, Any]) -> RunResult:
    """A `runs` row as the result of the run."""
    return RunResult(
        run_id=row["run_id"],
        status=row["status"],
        steps=row["steps"],
        output=row["output"],
        error=row["error"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cost_usd=float(row["cost_usd"]),
    )


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


# The `run_steps` view (migration 0004): one row per recorded step.
run_steps = table(
    "run_steps",
    *(
        column(name)
        for name in (
            "run_id",
            "tenant_id",
            "step",
            "recorded_at",
            "action",
            "tools",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "model_ms",
            "tools_ms",
            "duration_ms",
            "model_retries",
            "tool_errors",
            "answer",
        )
    ),
)


@dataclass
class StepLine:
    """One line of a run's history."""

    step: int
    at: str
    action: str
    tools: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_ms: int = 0
    tools_ms: int = 0
    duration_ms: int | None = None
    model_retries: int = 0
    tool_errors: int = 0
    answer: str | None = None


async def timeline(
    engine: AsyncEngine, tenant_id: str, run_id: str, *, after_step: int = 0, limit: int | None = None
) -> list[StepLine]:
    """Steps after `after_step` in order (keyset pagination: pass the last step seen), from the
    `run_steps` view: small columns only, never a state blob."""
    await get_run(engine, tenant_id, run_id)  # tenant check and a clear "not found"
    query = (
        select(run_steps)
        .where(run_steps.c.run_id == run_id, run_steps.c.step > after_step)
        .order_by(run_steps.c.step)
        .limit(limit)
    )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [
        StepLine(
            step=r["step"],
            at=r["recorded_at"].isoformat(),
            action=r["action"],
            tools=list(r["tools"] or []),
            input_tokens=r["input_tokens"] or 0,
            output_tokens=r["output_tokens"] or 0,
            cost_usd=float(r["cost_usd"] or 0),
            model_ms=r["model_ms"] or 0,
            tools_ms=r["tools_ms"] or 0,
            duration_ms=r["duration_ms"],
            model_retries=r["model_retries"],
            tool_errors=r["tool_errors"],
            answer=r["answer"],
        )
        for r in rows
    ]
