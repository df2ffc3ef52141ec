"""Listings over the mirror: runs, a run's step timeline. Scoped by tenant; no state blobs loaded."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, column, or_, select, table

from waypoint.names import EventKind, LineageKind
from waypoint.store.base import StoreBase, of_tenant, run_filter
from waypoint.store.rows import RunRow, StepLine
from waypoint.store.schema import events, runs
from waypoint.types import RunPlan

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


class Reads(StoreBase):
    async def list_runs(
        self,
        tenant_id: str,
        *,
        limit: int = 20,
        status: str | None = None,
        agent: str | None = None,
        before: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        batch_id: str | None = None,
        originals: bool = False,
        text: str | None = None,
    ) -> list[RunRow]:
        """The tenant's runs, newest first; `before` (keyset pagination): the (created_at, run_id)
        of the last run seen; `since`: created then or later; `batch_id`: the reruns of one batch;
        `originals`: no reruns; `text`: only runs whose task contains it (any case)."""
        query = select(runs).where(of_tenant(tenant_id))
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        if batch_id is not None:
            query = query.where(runs.c.batch_id == batch_id)
        if originals:
            query = query.where(or_(runs.c.lineage_kind.is_(None), runs.c.lineage_kind != LineageKind.RERUN))
        if text:
            query = query.where(runs.c.task.icontains(text, autoescape=True))
        if status:
            query = query.where(runs.c.status == status)
        if agent:
            query = query.where(runs.c.agent == agent)
        if before is not None:
            at, run_id = before
            query = query.where(or_(runs.c.created_at < at, and_(runs.c.created_at == at, runs.c.run_id > run_id)))
        query = query.order_by(runs.c.created_at.desc(), runs.c.run_id).limit(limit)
        async with self.engine.connect() as conn:
            return [RunRow.of(r) for r in (await conn.execute(query)).mappings()]

    async def timeline(
        self, tenant_id: str, run_id: str, *, after_step: int = 0, limit: int | None = None
    ) -> list[StepLine]:
        """Steps after `after_step` in order (keyset pagination: pass the last step seen), from the
        `run_steps` view: small columns only, never a state blob."""
        query = (
            select(run_steps)
            .where(run_steps.c.run_id == run_id, run_steps.c.step > after_step)
            .order_by(run_steps.c.step)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)  # tenant check and a clear "not found"
            rows = (await conn.execute(query)).mappings().all()
        return [
            StepLine(
                step=r["step"],
                at=r["recorded_at"],
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

    async def run_started(self, tenant_id: str, run_id: str) -> dict[str, Any] | None:
        """The payload of the run's `run_started` event (its plan, its MCP tools), or None when the
        run has not started (or is another tenant's)."""
        query = (
            select(events.c.payload)
            .join(runs, runs.c.run_id == events.c.run_id)
            .where(run_filter(tenant_id, run_id), events.c.kind == EventKind.RUN_STARTED)
            .order_by(events.c.seq)
            .limit(1)
        )
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def recorded_plan(self, tenant_id: str, run_id: str) -> RunPlan | None:
        """The plan the run recorded when it started, or None when it has not started."""
        payload = await self.run_started(tenant_id, run_id)
        return None if payload is None else RunPlan.of(payload["plan"])

    async def recorded_mcp_tools(self, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
        """The MCP tools the run listed when it started (see waypoint.mcp.tools.MCPTool)."""
        payload = await self.run_started(tenant_id, run_id)
        return list((payload or {}).get("mcp_tools") or [])
