"""`wp.limits`: the fleet as every surface reads it: its flow control (`waypoint limits`, `GET
/v1/limits`, the viewer's limits page, MCP's `fleet_limits`), where a waiting run stands in its line,
and the fleet over a period (`waypoint fleet`, `GET /v1/fleet`, the viewer's fleet page, MCP's `fleet`).

    report = await wp.limits.report()        # the limits file, and each key's calls in flight and waiting
    rows = await wp.limits.with_waits(rows)  # runs waiting for capacity get their place in line
    stats = await wp.limits.stats("24h")     # runs, steps, model calls and 429s, waits, costs (wp.fleet_stats)

Model keys are the fleet's: every tenant sees each key's calls and 429s (a provider's limit is shared
by all) and its own share of them; every other figure is the tenant's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from waypoint.checks import check_choice, check_tenant
from waypoint.config import Settings
from waypoint.limits import TENANT_KEY_PREFIX, Limits, tenant_key
from waypoint.names import FleetPeriod, RunStatus
from waypoint.store import RunStore
from waypoint.store.fleet import DayCost, FleetFigures
from waypoint.store.limits import KeyHealth, LimitsReport
from waypoint.store.rows import RunRow

# Each period's time buckets (about 12 to 30 of them: a chart's bars).
BUCKETS = {
    FleetPeriod.HOUR: timedelta(minutes=5),
    FleetPeriod.SIX_HOURS: timedelta(minutes=15),
    FleetPeriod.DAY: timedelta(hours=1),
    FleetPeriod.WEEK: timedelta(hours=6),
    FleetPeriod.MONTH: timedelta(days=1),
}
SPANS = {
    FleetPeriod.HOUR: timedelta(hours=1),
    FleetPeriod.SIX_HOURS: timedelta(hours=6),
    FleetPeriod.DAY: timedelta(days=1),
    FleetPeriod.WEEK: timedelta(days=7),
    FleetPeriod.MONTH: timedelta(days=30),
}


@dataclass(frozen=True)
class FleetBucket:
    """One time bucket: runs started in it by their status now, and steps taken in it."""

    at: datetime
    runs: dict[str, int]
    steps: int
    steps_per_minute: float


@dataclass(frozen=True)
class ModelKeyStats:
    """A model key (as the limiter names it) over the period: answered calls, failed attempts and the
    429s/529s among them, for the whole fleet and the tenant's own part; and the key now."""

    key: str
    calls: int
    failed: int
    throttled: int
    own_calls: int
    own_failed: int
    own_throttled: int
    in_flight: int = 0
    waiting: int = 0
    cooldown_until: datetime | None = None
    breaker_open_until: datetime | None = None


@dataclass(frozen=True)
class FleetRun:
    """A run in a fleet listing: enough to find it and see why it is there."""

    run_id: str
    agent: str
    status: str
    steps: int
    cost_usd: float
    seconds: float
    created_at: datetime | None
    changed_at: datetime | None = None  # its status's last change: for a waiting run, when it began to wait
    waiting_key: str | None = None
    waiting_position: int | None = None


@dataclass(frozen=True)
class FleetStats:
    """The fleet over `period` (from `since` to `until`) as `tenant_id` may see it."""

    tenant_id: str
    period: str
    since: datetime
    until: datetime
    bucket_seconds: int
    buckets: list[FleetBucket]
    totals: dict[str, int | float]  # runs, steps, cost_usd of the tenant's runs of the period
    by_status: dict[str, int]  # the period's runs by their status now
    model_keys: list[ModelKeyStats]
    waiting: dict[str, int]  # the tenant's runs waiting now, by status (waiting_capacity, waiting_approval)
    waiting_runs: list[FleetRun]
    costs: list[DayCost]  # per day (UTC) and agent, of the runs started that day
    slowest: list[FleetRun]
    costliest: list[FleetRun]


class FleetLimits:
    def __init__(self, store: RunStore, settings: Settings):
        self._store = store
        self._settings = settings

    async def report(self, tenant_id: str | None = None, *, limits: Limits | None = None) -> LimitsReport:
        """What is declared and what the limiter holds now, as `tenant_id` (default: the configured
        tenant) may see it. Model keys are the fleet's (a provider's limit is shared by every tenant)
        and name no run; of the tenants, only its own entry and line are shown. `limits`: a file's
        limits to show in place of the settings'."""
        tenant = self._settings.tenant if tenant_id is None else check_tenant(tenant_id)
        limits = self._settings.limits if limits is None else limits
        own = tenant_key(tenant)
        return LimitsReport(
            source=limits.source,
            models={k: v.model_dump() for k, v in limits.models.items()},
            tenants={k: v.model_dump() for k, v in limits.tenants.items() if k == tenant},
            breaker=limits.breaker.model_dump(),
            keys=[
                k
                for k in await self._store.limiter.key_health()
                if not k.key.startswith(TENANT_KEY_PREFIX) or k.key == own
            ],
            today=await self._store.budget.tenant_day(tenant) if limits.daily_budget(tenant) is not None else None,
        )

    async def check(self, limits: Limits | None = None) -> Limits:
        """Check a limits file as a worker does before it starts (the file's own rules, then that each
        [tenants.NAME] is a tenant an API key has, or this machine's): the limits, or a ConfigError
        naming the entry. `limits`: the settings' file by default."""
        limits = self._settings.limits if limits is None else limits
        if limits.tenants:
            limits.check_tenants(await self._store.keys.key_tenants() | {self._settings.tenant})
        return limits

    async def stats(self, period: str = FleetPeriod.DAY, tenant_id: str | None = None) -> FleetStats:
        """The fleet over `period` (1h, 6h, 24h, 7d or 30d): see `FleetStats`."""
        tenant = self._settings.tenant if tenant_id is None else check_tenant(tenant_id)
        chosen = FleetPeriod(check_choice("period", period, FleetPeriod))
        bucket = BUCKETS[chosen]
        until = datetime.now(UTC)
        since = until - SPANS[chosen]
        figures = await self._store.fleet.fleet_figures(tenant, since, bucket)
        health = await self._store.limiter.key_health()
        return FleetStats(
            tenant_id=tenant,
            period=chosen.value,
            since=since,
            until=until,
            bucket_seconds=int(bucket.total_seconds()),
            buckets=_buckets(figures, since, until, bucket),
            totals={
                "runs": sum(s.runs for s in figures.statuses),
                "steps": sum(s.steps for s in figures.steps),
                "cost_usd": round(sum(c.cost_usd for c in figures.costs), 6),
            },
            by_status=_by_status(figures),
            model_keys=self._model_keys(figures, health),
            waiting=figures.waiting_counts,
            waiting_runs=[_listed(r) for r in await self.with_waits(figures.waiting)],
            costs=figures.costs,
            slowest=[_listed(r) for r in figures.slowest],
            costliest=[_listed(r) for r in figures.costliest],
        )

    def _model_keys(self, figures: FleetFigures, health: list[KeyHealth]) -> list[ModelKeyStats]:
        """The period's calls per limiter key (specs one limits entry covers add up), with each key's
        state now; a key with calls in flight or waiting is listed even without calls in the period."""
        sums: dict[str, list[int]] = {}
        for s in figures.specs:
            key = self._settings.limits.model_key(s.spec)[0] if ":" in s.spec else s.spec
            row = sums.setdefault(key, [0] * 6)
            for i, n in enumerate((s.calls, s.failed, s.throttled, s.own_calls, s.own_failed, s.own_throttled)):
                row[i] += n
        now = {h.key: h for h in health if not h.key.startswith(TENANT_KEY_PREFIX)}
        for key, health_now in now.items():
            if health_now.in_flight or health_now.waiting:
                sums.setdefault(key, [0] * 6)
        out = []
        for key in sorted(sums):
            calls, failed, throttled, own_calls, own_failed, own_throttled = sums[key]
            state = now.get(key)
            out.append(
                ModelKeyStats(
                    key=key,
                    calls=calls,
                    failed=failed,
                    throttled=throttled,
                    own_calls=own_calls,
                    own_failed=own_failed,
                    own_throttled=own_throttled,
                    in_flight=state.in_flight if state else 0,
                    waiting=state.waiting if state else 0,
                    cooldown_until=state.cooldown_until if state else None,
                    breaker_open_until=state.breaker_open_until if state else None,
                )
            )
        return out

    async def with_waits(self, rows: Sequence[RunRow]) -> list[RunRow]:
        """The rows, each run waiting for capacity with its place in its key's line (1: next)."""
        waiting = [r.run_id for r in rows if r.status == RunStatus.WAITING_CAPACITY]
        if not waiting:
            return list(rows)
        places = await self._store.limiter.waiting_positions(waiting, self._settings.limits)
        return [replace(r, waiting_position=places[r.run_id]) if r.run_id in places else r for r in rows]


def _buckets(figures: FleetFigures, since: datetime, until: datetime, bucket: timedelta) -> list[FleetBucket]:
    """Every bucket of the period, empty ones too (a chart needs its gaps)."""
    runs: dict[datetime, dict[str, int]] = {}
    for s in figures.statuses:
        runs.setdefault(s.at, {})[s.status] = s.runs
    steps = {s.at: s.steps for s in figures.steps}
    minutes = bucket.total_seconds() / 60
    out = []
    at = since
    while at < until:
        taken = steps.get(at, 0)
        out.append(FleetBucket(at, runs.get(at, {}), taken, round(taken / minutes, 2)))
        at += bucket
    return out


def _by_status(figures: FleetFigures) -> dict[str, int]:
    counts: dict[str, int] = {}
    for s in figures.statuses:
        counts[s.status] = counts.get(s.status, 0) + s.runs
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _listed(row: RunRow) -> FleetRun:
    end = row.finished_at or row.updated_at
    seconds = (end - row.created_at).total_seconds() if end and row.created_at else 0.0
    return FleetRun(
        run_id=row.run_id,
        agent=row.agent,
        status=row.status,
        steps=row.steps,
        cost_usd=row.cost_usd,
        seconds=round(seconds, 1),
        created_at=row.created_at,
        changed_at=row.updated_at,
        waiting_key=row.waiting_key,
        waiting_position=row.waiting_position,
    )
