"""What a run's waterfall is drawn from: small columns of its steps, the events that carry times
(failed model attempts, status changes, tool results, decisions), its tool ledger, its compactions
and the sub-agent runs its calls started. Never a state blob or a tool's output.

`waypoint.waterfall.derive` turns these rows into bars; this module only reads them, tenant-scoped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, Numeric, case, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import EventKind
from waypoint.store.base import StoreBase, of_tenant
from waypoint.store.rows import RunRow
from waypoint.store.schema import checkpoints, compactions, events, runs, tool_effects

# The events whose times a waterfall needs (a model response's own fields come with its step).
TIMED_KINDS = (EventKind.MODEL_ATTEMPT_FAILED, EventKind.STATUS_CHANGED, EventKind.TOOL_RESULT, EventKind.DECISION)


@dataclass(frozen=True)
class WaterfallSource:
    """The rows of one run a waterfall is derived from (each a plain mapping of small columns)."""

    run: RunRow
    now: datetime  # the database's clock: where an unfinished wait or step ends for now
    context_tokens: int | None  # the run's context budget (its plan), None before its run_started
    compact_at: float | None  # the share of it past which the run compacts inline
    steps: list[dict[str, Any]]  # checkpoint + model response: step, at, usage, latency, attempt
    events: list[dict[str, Any]]  # TIMED_KINDS, payloads without outputs
    effects: list[dict[str, Any]]  # the ledger: step, call_index, tool, duration_ms, at, outcome
    compactions: list[dict[str, Any]]
    children: list[dict[str, Any]]  # sub-agent runs: run_id, agent, status, caller step and call, times
    after_step: int = 0  # the rows of this step and those before it only say where the next one starts
    cost_before: float = 0.0  # of the run's steps up to `after_step`


def _usage(name: str) -> Any:
    return func.coalesce(cast(events.c.payload["usage"][name].astext, Integer), 0)


class WaterfallReads(StoreBase):
    async def waterfall_source(self, tenant_id: str, run_id: str, *, after_step: int = 0) -> WaterfallSource:
        """The rows of the steps after `after_step` (and the checkpoint of `after_step` itself, where
        the next step starts); NotFound unless the run is the tenant's."""
        async with self.engine.connect() as conn:
            run = await self._run(conn, tenant_id, run_id)
            now = (await conn.execute(select(func.now()))).scalar_one()
            plan = await _plan(conn, run_id)
            steps = await _steps(conn, run_id, after_step)
            cost_before = 0.0
            if after_step > 0:
                spent = select(func.coalesce(func.sum(cast(events.c.payload["cost_usd"].astext, Numeric)), 0)).where(
                    events.c.run_id == run_id, events.c.kind == EventKind.MODEL_RESPONSE, events.c.step <= after_step
                )
                cost_before = float((await conn.execute(spent)).scalar_one())
            timed = select(
                events.c.seq,
                events.c.step,
                events.c.kind,
                events.c.attempt,
                events.c.created_at.label("at"),
                events.c.payload.op("-")(literal("output")).label("payload"),
            ).where(events.c.run_id == run_id, events.c.step >= after_step, events.c.kind.in_(list(TIMED_KINDS)))
            effects = select(
                tool_effects.c.step,
                tool_effects.c.call_index,
                tool_effects.c.tool,
                tool_effects.c.duration_ms,
                tool_effects.c.attempt,
                tool_effects.c.outcome,
                tool_effects.c.created_at.label("at"),
            ).where(tool_effects.c.run_id == run_id, tool_effects.c.step > after_step)
            squeezed = select(
                compactions.c.id,
                compactions.c.first_step,
                compactions.c.last_step,
                compactions.c.tokens_before,
                compactions.c.tokens_after,
                compactions.c.method,
                compactions.c.created_at.label("at"),
            ).where(compactions.c.run_id == run_id, compactions.c.tenant_id == tenant_id)
            children = select(
                runs.c.run_id,
                runs.c.agent,
                runs.c.status,
                runs.c.steps,
                runs.c.caller_step,
                runs.c.caller_call_index,
                runs.c.created_at,
                runs.c.finished_at,
                runs.c.updated_at,
            ).where(runs.c.caller_run_id == run_id, of_tenant(tenant_id), runs.c.caller_step > after_step)
            return WaterfallSource(
                run=run,
                now=now,
                context_tokens=plan[0],
                compact_at=plan[1],
                steps=steps,
                events=await _all(conn, timed.order_by(events.c.seq)),
                effects=await _all(conn, effects),
                compactions=await _all(conn, squeezed.order_by(compactions.c.id)),
                children=await _all(conn, children.order_by(runs.c.caller_step, runs.c.caller_call_index)),
                after_step=after_step,
                cost_before=cost_before,
            )


async def _all(conn: AsyncConnection, query: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in (await conn.execute(query)).mappings()]


async def _plan(conn: AsyncConnection, run_id: str) -> tuple[int | None, float | None]:
    plan = events.c.payload["plan"]
    row = (
        await conn.execute(
            select(plan["context_tokens"].astext.label("budget"), plan["compact_at"].astext.label("at"))
            .where(events.c.run_id == run_id, events.c.kind == EventKind.RUN_STARTED)
            .order_by(events.c.seq.desc())
            .limit(1)
        )
    ).first()
    if row is None:
        return None, None
    return (int(row.budget) if row.budget else None), (float(row.at) if row.at else None)


async def _steps(conn: AsyncConnection, run_id: str, after_step: int) -> list[dict[str, Any]]:
    """One row per checkpoint from `after_step` on, with its model response's small fields (none
    for step 0 or a fork's first checkpoint)."""
    p = events.c.payload
    response = (
        select(
            events.c.step,
            _usage("input_tokens").label("input_tokens"),
            _usage("output_tokens").label("output_tokens"),
            _usage("cache_read_tokens").label("cache_read_tokens"),
            _usage("cache_write_tokens").label("cache_write_tokens"),
            func.coalesce(p["cost_usd"].astext, "0").label("cost_usd"),
            func.coalesce(cast(p["latency_ms"].astext, Integer), 0).label("latency_ms"),
            func.coalesce(cast(p["attempt"].astext, Integer), 1).label("attempt"),
            p["model"].astext.label("model"),
            cast(p["request"]["compaction_id"].astext, Integer).label("compaction_id"),
            case(
                (func.jsonb_typeof(p["tool_calls"]) == "array", func.jsonb_array_length(p["tool_calls"])), else_=0
            ).label("calls"),
        )
        .where(events.c.run_id == run_id, events.c.kind == EventKind.MODEL_RESPONSE, events.c.step >= after_step)
        .subquery()
    )
    query = (
        select(checkpoints.c.step, checkpoints.c.created_at.label("at"), *[c for c in response.c if c.name != "step"])
        .select_from(checkpoints.outerjoin(response, response.c.step == checkpoints.c.step))
        .where(checkpoints.c.run_id == run_id, checkpoints.c.step >= after_step)
        .order_by(checkpoints.c.step)
    )
    return await _all(conn, query)
