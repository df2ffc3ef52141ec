"""The fleet over a period: what the fleet page, `waypoint fleet`, GET /v1/fleet and MCP's `fleet` show.

Every figure is aggregated in Postgres (GROUP BY over an index range of the period), never by
reading runs or events into Python:

- runs started per time bucket, by their status now;
- steps per bucket (a step is a `model_response` event: one answered model call);
- model calls and failed attempts per model spec, for the whole fleet and the tenant's share of
  them (a provider's limit is shared, so its load is shown to every tenant; the tenant's own
  numbers only to it); a 429 or 529 is a failed attempt with that status;
- the tenant's runs waiting for capacity or approval now;
- cost per day and agent, of the tenant's runs started that day;
- the tenant's slowest and most expensive runs started in the period.

An answered call is counted under the spec its event names (`spec`, recorded since the fleet page
came), else its run's model; a failed attempt names the spec it called.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, and_, case, cast, func, literal, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import EventKind, RunStatus
from waypoint.store.base import StoreBase, of_tenant
from waypoint.store.rows import RunRow
from waypoint.store.schema import events, runs

THROTTLE_STATUSES = (429, 529)  # a provider's "slow down" (OpenAI's and Anthropic's)
WAITING = (RunStatus.WAITING_CAPACITY, RunStatus.WAITING_APPROVAL)
TOP_RUNS = 5  # slowest and most expensive runs listed
WAITING_LISTED = 20  # waiting runs listed (all are counted)
DURATION = func.coalesce(runs.c.finished_at, runs.c.updated_at) - runs.c.created_at


@dataclass(frozen=True)
class StatusCount:
    at: datetime  # the bucket's start
    status: str
    runs: int


@dataclass(frozen=True)
class StepCount:
    at: datetime
    steps: int


@dataclass(frozen=True)
class SpecCalls:
    """Model calls to one spec in the period: answered and failed attempts, throttled ones among the
    failures; `own_*` are the tenant's part."""

    spec: str
    calls: int
    failed: int
    throttled: int
    own_calls: int
    own_failed: int
    own_throttled: int


@dataclass(frozen=True)
class DayCost:
    day: datetime
    tenant_id: str
    agent: str
    runs: int
    steps: int
    cost_usd: float


@dataclass(frozen=True)
class FleetFigures:
    """What the store counts for one tenant over [since, now)."""

    statuses: list[StatusCount]
    steps: list[StepCount]
    specs: list[SpecCalls]
    waiting_counts: dict[str, int]
    waiting: list[RunRow]
    costs: list[DayCost]
    slowest: list[RunRow]
    costliest: list[RunRow]


class FleetReads(StoreBase):
    async def fleet_figures(self, tenant_id: str, since: datetime, bucket: timedelta) -> FleetFigures:
        """The fleet's figures since `since`, in buckets of `bucket` aligned on `since`."""
        async with self.engine.connect() as conn:
            return FleetFigures(
                statuses=await _statuses(conn, tenant_id, since, bucket),
                steps=await _steps(conn, tenant_id, since, bucket),
                specs=await _specs(conn, tenant_id, since),
                waiting_counts=await _waiting_counts(conn, tenant_id),
                waiting=await _waiting(conn, tenant_id),
                costs=await _costs(conn, tenant_id, since),
                slowest=await _top(conn, tenant_id, since, DURATION),
                costliest=await _top(conn, tenant_id, since, runs.c.cost_usd),
            )

    async def analyze_fleet_tables(self) -> None:
        """Refresh the planner's statistics of `runs` and `events` now. After a bulk load (a restore,
        a benchmark's seed) they describe the tables as they were before it until autovacuum's next
        pass, and a join planned for a few rows over thousands (measured: 343 ms instead of 6.5 ms
        for the steps a minute over 2,000 runs) is what the fleet page would get meanwhile."""
        async with self.engine.begin() as conn:
            await conn.execute(text("ANALYZE runs, events"))


def _bin(column: Any, since: datetime, bucket: timedelta) -> Any:
    return func.date_bin(literal(bucket), column, literal(since))


async def _statuses(conn: AsyncConnection, tenant_id: str, since: datetime, bucket: timedelta) -> list[StatusCount]:
    at = _bin(runs.c.created_at, since, bucket).label("at")
    query = (
        select(at, runs.c.status, func.count().label("runs"))
        .where(of_tenant(tenant_id), runs.c.created_at >= since)
        .group_by(at, runs.c.status)
        .order_by(at, runs.c.status)
    )
    return [StatusCount(r.at, r.status, r.runs) for r in await conn.execute(query)]


async def _steps(conn: AsyncConnection, tenant_id: str, since: datetime, bucket: timedelta) -> list[StepCount]:
    at = _bin(events.c.created_at, since, bucket).label("at")
    query = (
        select(at, func.count().label("steps"))
        .select_from(events.join(runs, runs.c.run_id == events.c.run_id))
        .where(events.c.kind == EventKind.MODEL_RESPONSE, events.c.created_at >= since, of_tenant(tenant_id))
        .group_by(at)
        .order_by(at)
    )
    return [StepCount(r.at, r.steps) for r in await conn.execute(query)]


async def _specs(conn: AsyncConnection, tenant_id: str, since: datetime) -> list[SpecCalls]:
    answered = events.c.kind == EventKind.MODEL_RESPONSE
    status = cast(events.c.payload["status"].astext, Integer)
    throttled = and_(~answered, status.in_(THROTTLE_STATUSES))
    own = runs.c.tenant_id == tenant_id
    spec = case(
        (answered, func.coalesce(events.c.payload["spec"].astext, runs.c.model)),
        else_=func.coalesce(events.c.payload["model"].astext, runs.c.model),
    ).label("spec")

    def counted(condition: Any) -> Any:
        return func.count().filter(condition)

    query = (
        select(
            spec,
            counted(answered).label("calls"),
            counted(~answered).label("failed"),
            counted(throttled).label("throttled"),
            counted(and_(answered, own)).label("own_calls"),
            counted(and_(~answered, own)).label("own_failed"),
            counted(and_(throttled, own)).label("own_throttled"),
        )
        .select_from(events.join(runs, runs.c.run_id == events.c.run_id))
        .where(
            events.c.kind.in_((EventKind.MODEL_RESPONSE, EventKind.MODEL_ATTEMPT_FAILED)),
            events.c.created_at >= since,
        )
        .group_by(spec)
        .order_by(spec)
    )
    return [SpecCalls(**r._mapping) for r in await conn.execute(query)]


async def _waiting_counts(conn: AsyncConnection, tenant_id: str) -> dict[str, int]:
    query = (
        select(runs.c.status, func.count())
        .where(of_tenant(tenant_id), runs.c.status.in_(WAITING))
        .group_by(runs.c.status)
    )
    counts = {str(s): 0 for s in WAITING}
    counts.update({r[0]: r[1] for r in await conn.execute(query)})
    return counts


async def _waiting(conn: AsyncConnection, tenant_id: str) -> list[RunRow]:
    query = (
        select(runs)
        .where(of_tenant(tenant_id), runs.c.status.in_(WAITING))
        .order_by(runs.c.updated_at, runs.c.run_id)
        .limit(WAITING_LISTED)
    )
    return [RunRow.of(r) for r in (await conn.execute(query)).mappings()]


async def _costs(conn: AsyncConnection, tenant_id: str, since: datetime) -> list[DayCost]:
    day = func.date_trunc("day", runs.c.created_at, "UTC").label("day")
    query = (
        select(
            day,
            runs.c.agent,
            func.count().label("runs"),
            # A fork's row counts the steps it took over from its parent too; the fleet counts each step once.
            func.sum(runs.c.steps - func.coalesce(runs.c.fork_step, 0)).label("steps"),
            func.sum(runs.c.cost_usd).label("cost_usd"),
        )
        .where(of_tenant(tenant_id), runs.c.created_at >= since)
        .group_by(day, runs.c.agent)
        .order_by(day.desc(), func.sum(runs.c.cost_usd).desc(), runs.c.agent)
    )
    return [
        DayCost(r.day, tenant_id, r.agent, r.runs, int(r.steps or 0), float(r.cost_usd or 0))
        for r in await conn.execute(query)
    ]


async def _top(conn: AsyncConnection, tenant_id: str, since: datetime, measure: Any) -> list[RunRow]:
    query = (
        select(runs)
        .where(of_tenant(tenant_id), runs.c.created_at >= since)
        .order_by(measure.desc(), runs.c.run_id)
        .limit(TOP_RUNS)
    )
    return [RunRow.of(r) for r in (await conn.execute(query)).mappings()]
