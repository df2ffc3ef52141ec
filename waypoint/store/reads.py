"""Listings over the mirror: runs, a run's step timeline. Scoped by tenant; no state blobs loaded."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, and_, cast, column, extract, func, or_, select, table, union_all

from waypoint.checks import BIGINT_MAX, INT_MAX
from waypoint.errors import InvalidInput
from waypoint.names import EventKind, LineageKind, RunSort
from waypoint.store.base import StoreBase, of_tenant, run_filter
from waypoint.store.rows import RunRow
from waypoint.store.schema import events, runs, tool_effects
from waypoint.store.versions import prefix_filter
from waypoint.types import RunPlan

# The `run_steps` view (migrations 0004 and 0014): one row per recorded step.
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
            "cache_read_tokens",  # migration 0014
            "cache_write_tokens",
        )
    ),
)


@dataclass(frozen=True)
class StepLine:
    """One line of a run's history (the `run_steps` view)."""

    step: int
    at: datetime
    action: str  # "tools" or "answer"
    tools: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_ms: int = 0
    tools_ms: int = 0  # the step's tool calls' durations added up (parallel calls each count)
    duration_ms: int | None = None
    model_retries: int = 0
    tool_errors: int = 0
    answer: str | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # From the first tool call's start to the last one's end (`reads.tool_spans`); None: not timed.
    tools_wall_ms: int | None = None


def _ms(at: Any) -> Any:
    return extract("epoch", at) * 1000


def tool_spans(run_id: str, after_step: int) -> Any:
    """Per step after `after_step`, the wall time of its tool calls: from the first call's start to
    the last one's end, so parallel calls count once (the `tools_ms` column adds their durations up).
    A call's end is its ledger row's time and its start that less its duration; a sub-agent call
    runs from its child run's creation to its end (or now). A step none of whose calls left such a
    record (denied, answered by a human) has no row: its wall time is unknown."""
    calls = select(
        tool_effects.c.step.label("step"),
        (_ms(tool_effects.c.created_at) - tool_effects.c.duration_ms).label("began"),
        _ms(tool_effects.c.created_at).label("ended"),
    ).where(tool_effects.c.run_id == run_id, tool_effects.c.step > after_step)
    children = select(
        runs.c.caller_step.label("step"),
        _ms(runs.c.created_at).label("began"),
        _ms(func.coalesce(runs.c.finished_at, func.now())).label("ended"),
    ).where(runs.c.caller_run_id == run_id, runs.c.caller_step > after_step)
    timed = union_all(calls, children).subquery()
    wall = cast(func.round(func.max(timed.c.ended) - func.min(timed.c.began)), BigInteger)
    return select(timed.c.step, wall.label("wall_ms")).group_by(timed.c.step).subquery("tool_spans")


def sort_key(sort: RunSort) -> tuple[ColumnElement[Any], bool]:
    """The value a sort orders runs by, and whether the largest comes first. Ties go by run_id."""
    if sort == RunSort.TOKENS:
        return runs.c.input_tokens + runs.c.output_tokens, True
    if sort == RunSort.COST:
        return runs.c.cost_usd, True
    if sort == RunSort.STEPS:
        return runs.c.steps, True
    if sort == RunSort.DURATION:  # whole milliseconds, so the cursor carries it exactly
        elapsed = func.coalesce(runs.c.finished_at, runs.c.updated_at) - runs.c.created_at
        return cast(func.floor(extract("epoch", elapsed) * 1000), BigInteger), True
    return runs.c.created_at, sort != RunSort.OLDEST


def encode_cursor(sort: RunSort, value: Any, run_id: str) -> str:
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return base64.urlsafe_b64encode(f"{sort}|{text}|{run_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str, sort: RunSort) -> tuple[Any, str]:
    """The (sort value, run_id) of the last run of the previous page. A cursor of another sort is
    refused: its value means nothing in this order."""
    try:
        parts = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("|")
        if len(parts) == 2:  # the cursors given out before sorts existed: newest first
            parts = [RunSort.NEWEST, *parts]
        made_for, text, run_id = parts
        if made_for == sort and "\x00" not in run_id:
            if sort in (RunSort.NEWEST, RunSort.OLDEST):
                return datetime.fromisoformat(text), run_id
            if sort == RunSort.COST:
                return Decimal(text), run_id
            value = int(text)
            if abs(value) <= (INT_MAX if sort == RunSort.STEPS else BIGINT_MAX):  # its column's range
                return value, run_id
    except (ValueError, binascii.Error, UnicodeDecodeError, InvalidOperation):
        pass
    raise InvalidInput(
        f"cursor {cursor!r} is not one this listing gave out with sort={sort}: pass `next_cursor` as it came,"
        " with the same sort"
    )


@dataclass(frozen=True)
class RunsPage:
    runs: list[RunRow]
    next_cursor: str | None  # None on the last page


class Reads(StoreBase):
    async def list_runs(self, tenant_id: str, **filters: Any) -> list[RunRow]:
        """The tenant's runs (see `runs_page` for the filters), without the next page's cursor."""
        return (await self.runs_page(tenant_id, **filters)).runs

    async def has_batch(self, tenant_id: str, batch_id: str) -> bool:
        """Whether any of the tenant's runs is a rerun of this batch."""
        async with self.engine.connect() as conn:
            query = select(runs.c.run_id).where(of_tenant(tenant_id), runs.c.batch_id == batch_id).limit(1)
            return (await conn.execute(query)).first() is not None

    async def runs_page(
        self,
        tenant_id: str,
        *,
        limit: int = 20,
        status: str | None = None,
        agent: str | None = None,
        before: tuple[Any, str] | None = None,
        cursor: str | None = None,
        sort: RunSort = RunSort.NEWEST,
        since: datetime | None = None,
        until: datetime | None = None,
        batch_id: str | None = None,
        originals: bool = False,
        text: str | None = None,
        run_ids: Sequence[str] | None = None,
        roots: bool = False,
        schedule_id: str | None = None,
        fingerprint: str | None = None,
    ) -> RunsPage:
        """A page of the tenant's runs in `sort` order (newest first by default), and the cursor
        of the next. Keyset pagination: `cursor` (or `before`, the decoded (sort value, run_id)
        of the last run seen). `since`/`until`: created at or after / before; `batch_id`: the
        reruns of one batch; `originals`: no reruns, no run of a batch (an experiment's); `text`: only
        runs whose task contains it (any case); `run_ids`: only these runs (the viewer follows the
        live ones on its page);
        `roots`: no sub-agent runs (only the runs no call started); `schedule_id`: the runs one
        schedule fired; `fingerprint`: the runs that started with an agent version whose
        fingerprint starts with it."""
        key, descending = sort_key(sort)
        if cursor:
            before = decode_cursor(cursor, sort)
        query = select(runs, key.label("sort_value")).where(of_tenant(tenant_id))
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        if until is not None:
            query = query.where(runs.c.created_at < until)
        if run_ids is not None:
            query = query.where(runs.c.run_id.in_(list(run_ids)))
        if batch_id is not None:
            query = query.where(runs.c.batch_id == batch_id)
        if schedule_id is not None:
            query = query.where(runs.c.schedule_id == schedule_id)
        if fingerprint:
            query = query.where(prefix_filter(runs.c.agent_fingerprint, fingerprint))
        if originals:
            # Neither reruns nor an experiment's case runs (tagged with its batch): what a person ran.
            query = query.where(
                or_(runs.c.lineage_kind.is_(None), runs.c.lineage_kind != LineageKind.RERUN), runs.c.batch_id.is_(None)
            )
        if roots:
            query = query.where(runs.c.caller_run_id.is_(None))
        if text:
            query = query.where(runs.c.task.icontains(text, autoescape=True))
        if status:
            query = query.where(runs.c.status == status)
        if agent:
            query = query.where(runs.c.agent == agent)
        if before is not None:
            value, run_id = before
            beyond = key < value if descending else key > value
            query = query.where(or_(beyond, and_(key == value, runs.c.run_id > run_id)))
        query = query.order_by(key.desc() if descending else key.asc(), runs.c.run_id).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        nxt = None
        if len(rows) == limit and rows[-1]["sort_value"] is not None:
            nxt = encode_cursor(sort, rows[-1]["sort_value"], rows[-1]["run_id"])
        return RunsPage([RunRow.of(r) for r in rows], nxt)

    async def timeline(
        self, tenant_id: str, run_id: str, *, after_step: int = 0, limit: int | None = None
    ) -> list[StepLine]:
        """Steps after `after_step` in order (keyset pagination: pass the last step seen), from the
        `run_steps` view: small columns only, never a state blob."""
        spans = tool_spans(run_id, after_step)
        query = (
            select(run_steps, spans.c.wall_ms)
            .outerjoin(spans, spans.c.step == run_steps.c.step)
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
                tools_wall_ms=r["wall_ms"],
                duration_ms=r["duration_ms"],
                model_retries=r["model_retries"],
                tool_errors=r["tool_errors"],
                answer=r["answer"],
                cache_read_tokens=r["cache_read_tokens"] or 0,
                cache_write_tokens=r["cache_write_tokens"] or 0,
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
