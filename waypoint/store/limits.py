"""The shared limiter: model-call capacity for every worker process, in Postgres.

Each model call of a limited key asks `acquire` before it goes out. One transaction, holding an
advisory lock per key (so two workers never hand out the same slot), answers either a lease or a
`CapacityWait`:

- a lease is the call's slot, `lease_id` = "<run>:<step>" (a retried call takes its own slot back);
  it expires unless the worker renews it, so a worker that dies gives its slots back within
  `limit_lease_seconds`;
- a request row per call counts the key's requests and tokens of the last minute;
- a call that must wait joins the key's line (`capacity_waiters`). The line is ordered by priority,
  then by fair share: each tenant's waiters interleave, weighted, after the calls it has in flight,
  so a tenant with 10 runs is not stuck behind another's 190. A call is granted only when its place
  in the line fits the free capacity, so a newcomer cannot jump the line; a waiter that stops asking
  (its run ended) drops out when its entry expires.

`release` gives a slot back and names the waiters that now fit, for the caller to wake (the
workflow waits on a timer and a `capacity` signal, holding no activity slot). Per key the store also
keeps its health: a shared cooldown set by a 429 or 529 with a retry-after, and a circuit breaker
that retryable failures in a row open for a while.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.limits import BreakerLimit, Limits, ModelLimit, tenant_key
from waypoint.names import WaitReason
from waypoint.store.base import StoreBase
from waypoint.store.schema import capacity_leases, capacity_requests, capacity_waiters, model_key_health
from waypoint.types import CapacityWait

WINDOW = timedelta(minutes=1)
CAPACITY_CHANNEL = "waypoint_capacity"  # NOTIFY'd with a key when one of its slots is given back
LONGEST_WAIT = 60.0  # a waiter asks again at least this often, signal or not


@dataclass(frozen=True)
class KeyHealth:
    """One model key (or tenant key) as the shared limiter holds it now."""

    key: str
    cooldown_until: datetime | None
    cooldown_reason: str | None
    failures: int
    breaker_open_until: datetime | None
    last_failure_at: datetime | None
    requests: int
    throttled: int
    in_flight: int = 0
    waiting: int = 0


@dataclass(frozen=True)
class LimitsReport:
    """The fleet limits this process read (`source`: the limits file) and every key the shared
    limiter knows, with its calls in flight and waiting, cooldown and breaker."""

    source: str | None
    models: dict[str, dict[str, Any]]
    tenants: dict[str, dict[str, Any]]
    breaker: dict[str, Any]
    keys: list[KeyHealth]
    # The tenant's daily budget today (UTC): used, reserved by calls in flight, runs waiting; None
    # without a daily budget (or before its first call of the day).
    today: dict[str, Any] | None = None


@dataclass(frozen=True)
class CapacityAsk:
    """One model call asking for capacity."""

    run_id: str
    step: int
    tenant_id: str
    model_key: str  # provider:model[@KEY], as `Limits.model_key` names it
    priority: int
    tokens: int  # an estimate of what the call will use (its input; the answer is added at release)
    attempt: int = 1  # a retried attempt may hold its slot still
    breaker: bool = False  # an open breaker makes it wait (its caller fails over); else only a cooldown does

    @property
    def lease_id(self) -> str:
        return f"{self.run_id}:{self.step}"


@dataclass(frozen=True)
class Lease:
    lease_id: str
    key: str | None  # None: nothing limits the call; only its health was checked


_GRANT = text(
    """
    WITH gone AS (DELETE FROM capacity_waiters WHERE key = :key AND lease_id = :lease_id),
         held AS (INSERT INTO capacity_leases (key, lease_id, tenant_id, run_id, expires_at)
                  VALUES (:key, :lease_id, :tenant_id, :run_id, :expires_at))
    INSERT INTO capacity_requests (key, lease_id, at, tokens) VALUES (:key, :lease_id, :now, :tokens)
    """
)
_RELEASE = text(
    """
    WITH gone AS (DELETE FROM capacity_leases WHERE key = :key AND lease_id = :lease_id)
    UPDATE capacity_requests SET tokens = coalesce(CAST(:tokens AS bigint), tokens)
     WHERE key = :key AND lease_id = :lease_id
    """
)
STANDBY_REASONS = (WaitReason.IN_FLIGHT, WaitReason.REQUESTS, WaitReason.TOKENS)


def stands_by(wait: CapacityWait, limits: Limits) -> bool:
    """Whether a refused call is next in line for a slot of its key (among the first `in_flight`), so
    it is worth standing by for a moment instead of handing the wait to its workflow."""
    if wait.reason not in STANDBY_REASONS:
        return False
    entry = limits.models.get(wait.key)
    return wait.position <= (entry.in_flight if entry is not None and entry.in_flight else 1)


def queue_key(ask: CapacityAsk, limits: Limits) -> tuple[str | None, ModelLimit | None]:
    """The key whose line a call waits in: its model key's entry, else its tenant's run cap."""
    entry = limits.models.get(ask.model_key)
    if entry is not None:
        return ask.model_key, entry
    if limits.tenant_runs(ask.tenant_id) is not None:
        return tenant_key(ask.tenant_id), None
    return None, None


class Limiter(StoreBase):
    async def acquire(
        self, ask: CapacityAsk, limits: Limits, lease_seconds: float, *, standby_seconds: float = 0.0
    ) -> Lease | CapacityWait:
        """A lease for the call, or how long and where it waits. `standby_seconds`: a call next in line
        (`stands_by`) is noted as standing by that long, so a release does not signal its run."""
        key, entry = queue_key(ask, limits)
        async with self.engine.begin() as conn:
            # A tenant with a run cap is locked too: two calls of it on two keys must not both take its last slot.
            capped = tenant_key(ask.tenant_id) if limits.tenant_runs(ask.tenant_id) is not None else None
            now = await _lock(conn, *filter(None, (key, capped)))
            health = await _health(conn, ask.model_key)
            if health is not None:
                if health.cooldown_until is not None and health.cooldown_until > now:
                    return _wait(ask.model_key, WaitReason.COOLDOWN, 1, health.cooldown_until - now)
                if ask.breaker and health.breaker_open_until is not None and health.breaker_open_until > now:
                    return _wait(ask.model_key, WaitReason.BREAKER, 1, health.breaker_open_until - now)
            if key is None:
                return Lease(ask.lease_id, None)
            expires = now + timedelta(seconds=lease_seconds)
            if ask.attempt > 1:  # a retried attempt of a call that may hold its slot still
                renewed = await conn.execute(
                    update(capacity_leases)
                    .where(_lease(key, ask.lease_id))
                    .values(expires_at=expires)
                    .returning(capacity_leases.c.lease_id)
                )
                if renewed.first() is not None:
                    return Lease(ask.lease_id, key)
            line = await _line(conn, key, now, limits)
            me = _Waiter(ask.lease_id, ask.tenant_id, ask.run_id, ask.priority, limits.weight(ask.tenant_id), now)
            ordered = _fair_order([w for w in line.waiters if w.lease_id != ask.lease_id] + [_joined(line, me)], line)
            eligible = [w for w in ordered if not line.tenant_full(w.tenant_id, limits)]
            place = next((i for i, w in enumerate(eligible) if w.lease_id == ask.lease_id), None)
            free_slots, reason = line.free(entry)
            tokens_free = entry is None or entry.tokens_per_minute is None or line.tokens == 0
            if entry is not None and entry.tokens_per_minute is not None and line.tokens:
                tokens_free = line.tokens + ask.tokens <= entry.tokens_per_minute
            if place is not None and place < free_slots and tokens_free:
                values = {"key": key, "lease_id": ask.lease_id, "tenant_id": ask.tenant_id, "run_id": ask.run_id}
                await conn.execute(_GRANT, {**values, "now": now, "expires_at": expires, "tokens": ask.tokens})
                return Lease(ask.lease_id, key)
            if place is None:  # its tenant has all the runs it may have in flight: its place among its own
                mine = [w.lease_id for w in ordered if w.tenant_id == ask.tenant_id]
                reason, position = WaitReason.TENANT, 1 + mine.index(ask.lease_id)
            else:
                position = place + 1
                if place < free_slots:
                    reason = WaitReason.TOKENS
            after = await _retry_after(conn, key, entry, line, reason, position, now, lease_seconds)
            wait = CapacityWait(key=key, reason=reason, position=position, retry_after=after)
            standby = now + timedelta(seconds=standby_seconds) if stands_by(wait, limits) and standby_seconds else None
            await conn.execute(
                insert(capacity_waiters)
                .values(
                    key=key,
                    lease_id=ask.lease_id,
                    tenant_id=ask.tenant_id,
                    run_id=ask.run_id,
                    priority=ask.priority,
                    weight=me.weight,
                    since=now,
                    expires_at=now + timedelta(seconds=after + 2 * lease_seconds),
                    standby_until=standby,
                )
                .on_conflict_do_update(
                    index_elements=["key", "lease_id"],
                    set_={
                        "expires_at": now + timedelta(seconds=after + 2 * lease_seconds),
                        "priority": ask.priority,
                        "standby_until": standby,
                    },
                )
            )
            return wait

    async def renew(self, lease: Lease, lease_seconds: float) -> None:
        """Keep a call's slot while it runs (its worker calls this well inside `lease_seconds`)."""
        if lease.key is None:
            return
        async with self.engine.begin() as conn:
            await conn.execute(
                update(capacity_leases)
                .where(_lease(lease.key, lease.lease_id))
                .values(expires_at=func.clock_timestamp() + timedelta(seconds=lease_seconds))
            )

    async def release(self, lease: Lease, limits: Limits, tokens_used: int | None) -> list[str]:
        """Give the slot back (recording what the call used). Calls standing by that now fit are told
        by a notification on CAPACITY_CHANNEL ("<key> <lease_id>,..."); the runs to signal are returned:
        those that fit and those next in line after them, unless they stand by already."""
        if lease.key is None:
            return []
        key = lease.key
        async with self.engine.begin() as conn:
            now = await _lock(conn, key)
            await conn.execute(_RELEASE, {"key": key, "lease_id": lease.lease_id, "tokens": tokens_used})
            line = await _line(conn, key, now, limits)
            entry = limits.models.get(key)
            free_slots, _ = line.free(entry)
            ordered = [w for w in _fair_order(line.waiters, line) if not line.tenant_full(w.tenant_id, limits)]
            fits = ordered[: max(0, min(free_slots, len(ordered)))]
            if fits:
                payload = f"{key} {','.join(w.lease_id for w in fits)}"
                await conn.execute(select(func.pg_notify(CAPACITY_CHANNEL, payload)))
            standby = entry.in_flight if entry is not None and entry.in_flight else 1
            nearby = ordered[: len(fits) + standby]
            return [w.run_id for w in nearby if w.standby_until is None or w.standby_until <= now]

    async def cool_down(self, key: str, seconds: float, reason: str) -> None:
        """Pause every call on `key`, in every run and worker, for `seconds` (a 429's retry-after);
        a cooldown already longer stays."""
        until = func.clock_timestamp() + timedelta(seconds=seconds)
        async with self.engine.begin() as conn:
            stmt = insert(model_key_health).values(key=key, cooldown_until=until, cooldown_reason=reason)
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["key"],
                    set_={
                        "cooldown_until": func.greatest(
                            model_key_health.c.cooldown_until, stmt.excluded.cooldown_until
                        ),
                        "cooldown_reason": reason,
                        "updated_at": func.now(),
                    },
                )
            )

    async def key_outcome(self, key: str, *, failed: bool, throttled: bool, breaker: BreakerLimit) -> None:
        """Count a call's outcome on its key: a success closes the breaker; a retryable failure
        counts toward opening it (`breaker.failures` in a row open it for `breaker.open_seconds`)."""
        h = model_key_health.c
        if failed:
            failures = h.failures + 1
            values: dict[str, Any] = {
                "failures": failures,
                "last_failure_at": func.clock_timestamp(),
                "breaker_open_until": _case_open(failures, breaker),
                "throttled": h.throttled + (1 if throttled else 0),
            }
        else:
            values = {"failures": 0, "breaker_open_until": None}
        async with self.engine.begin() as conn:
            stmt = insert(model_key_health).values(
                key=key,
                failures=1 if failed else 0,
                requests=1,
                throttled=1 if throttled else 0,
                last_failure_at=func.clock_timestamp() if failed else None,
                breaker_open_until=(
                    func.clock_timestamp() + timedelta(seconds=breaker.open_seconds)
                    if failed and breaker.failures <= 1
                    else None
                ),
            )
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["key"], set_={**values, "requests": h.requests + 1, "updated_at": func.now()}
                )
            )

    async def recovered(self, keys: list[str], breaker: BreakerLimit) -> str | None:
        """The first of `keys` that is healthy again after failures: its breaker is closed and it has
        succeeded since (anyone's call), or it has not failed for `breaker.open_seconds`."""
        if not keys:
            return None
        h = model_key_health.c
        quiet = func.clock_timestamp() - timedelta(seconds=breaker.open_seconds)
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(h.key).where(
                        h.key.in_(keys),
                        (h.breaker_open_until.is_(None)) | (h.breaker_open_until < func.clock_timestamp()),
                        (h.cooldown_until.is_(None)) | (h.cooldown_until < func.clock_timestamp()),
                        (h.failures == 0) | (h.last_failure_at < quiet),
                    )
                )
            ).all()
        healthy = {r.key for r in rows}
        return next((k for k in keys if k in healthy), None)

    async def key_health(self) -> list[KeyHealth]:
        """Every key the limiter knows, with its calls in flight and waiting (for `waypoint limits`,
        the HTTP API and the fleet metrics)."""
        async with self.engine.connect() as conn:
            now = func.clock_timestamp()
            L, W = capacity_leases.c, capacity_waiters.c
            in_flight = await _counts(conn, select(L.key, func.count()).where(L.expires_at > now).group_by(L.key))
            waiting = await _counts(conn, select(W.key, func.count()).where(W.expires_at > now).group_by(W.key))
            rows = (await conn.execute(select(model_key_health).order_by(model_key_health.c.key))).mappings().all()
        found = [
            KeyHealth(
                **{k: r[k] for k in KeyHealth.__dataclass_fields__ if k in r},
                in_flight=in_flight.get(r["key"], 0),
                waiting=waiting.get(r["key"], 0),
            )
            for r in rows
        ]
        known = {h.key for h in found}
        for key in sorted((set(in_flight) | set(waiting)) - known):
            found.append(KeyHealth(key, None, None, 0, None, None, 0, 0, in_flight.get(key, 0), waiting.get(key, 0)))
        return found

    async def waiting_positions(self, run_ids: list[str], limits: Limits) -> dict[str, int]:
        """Where each of these waiting runs stands in its key's line (1: next)."""
        if not run_ids:
            return {}
        async with self.engine.connect() as conn:
            keys = list(
                await conn.scalars(
                    select(capacity_waiters.c.key).where(capacity_waiters.c.run_id.in_(run_ids)).distinct()
                )
            )
            now = await _now(conn)
            found: dict[str, int] = {}
            for key in keys:
                line = await _line(conn, key, now, limits, tidy=False)  # a read: no lock, nothing deleted
                for i, w in enumerate(_fair_order(line.waiters, line)):
                    if w.run_id in run_ids and w.run_id not in found:
                        found[w.run_id] = i + 1
        return found


@dataclass
class _Waiter:
    lease_id: str
    tenant_id: str
    run_id: str
    priority: int
    weight: float
    since: datetime
    standby_until: datetime | None = None


@dataclass
class _Line:
    key: str
    waiters: list[_Waiter]
    in_flight: int
    requests: int
    tokens: int
    by_tenant: dict[str, int]  # calls in flight on this key, per tenant
    tenant_in_flight: dict[str, int]  # calls in flight on every key, per tenant of a waiter

    def free(self, entry: ModelLimit | None) -> tuple[int, WaitReason]:
        """How many more calls the key takes now, and what binds it."""
        if entry is None:  # a tenant's line: its cap is checked per waiter
            return 1 << 30, WaitReason.TENANT
        options = [(1 << 30, WaitReason.IN_FLIGHT)]
        if entry.in_flight is not None:
            options.append((entry.in_flight - self.in_flight, WaitReason.IN_FLIGHT))
        if entry.requests_per_minute is not None:
            options.append((entry.requests_per_minute - self.requests, WaitReason.REQUESTS))
        slots, reason = min(options, key=lambda o: o[0])
        return max(slots, 0), reason

    def tenant_full(self, tenant_id: str, limits: Limits) -> bool:
        cap = limits.tenant_runs(tenant_id)
        return cap is not None and self.tenant_in_flight.get(tenant_id, 0) >= cap


def _joined(line: _Line, me: _Waiter) -> _Waiter:
    """The caller as it stands in the line: where it joined, if it had."""
    for w in line.waiters:
        if w.lease_id == me.lease_id:
            return _Waiter(me.lease_id, me.tenant_id, me.run_id, me.priority, me.weight, w.since)
    return me


def _fair_order(waiters: list[_Waiter], line: _Line) -> list[_Waiter]:
    """Priority first; within a priority, each tenant's n-th waiter comes at (its calls in flight + n)
    / its weight, so tenants share the key by weight whatever their queue lengths; then who came first."""
    by_tenant: dict[tuple[int, str], list[_Waiter]] = defaultdict(list)
    for w in sorted(waiters, key=lambda w: (w.since, w.lease_id)):
        by_tenant[(w.priority, w.tenant_id)].append(w)
    ranked = []
    for (priority, tenant), queue in by_tenant.items():
        start = line.by_tenant.get(tenant, 0)
        for n, w in enumerate(queue):
            ranked.append(((priority, (start + n + 1) / w.weight, w.since, w.lease_id), w))
    return [w for _, w in sorted(ranked, key=lambda r: r[0])]


async def _now(conn: AsyncConnection) -> datetime:
    now: datetime = (await conn.execute(select(func.clock_timestamp()))).scalar_one()
    return now


async def _counts(conn: AsyncConnection, query: Any) -> dict[str, int]:
    return {row[0]: int(row[1]) for row in (await conn.execute(query)).all()}


async def _lock(conn: AsyncConnection, *keys: str) -> datetime:
    """Hold the keys' locks until the transaction ends; the time once they are held."""
    now: datetime | None = None
    for key in sorted(set(keys)):  # always in the same order: two callers never wait on each other
        query = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 7)), clock_timestamp() AS now")
        now = (await conn.execute(query, {"key": f"limit:{key}"})).one().now
    return now if now is not None else await _now(conn)


async def _health(conn: AsyncConnection, key: str) -> Any:
    return (await conn.execute(select(model_key_health).where(model_key_health.c.key == key))).first()


def _lease(key: str, lease_id: str) -> Any:
    return and_(capacity_leases.c.key == key, capacity_leases.c.lease_id == lease_id)


def _waiter_of(key: str, lease_id: str) -> Any:
    return and_(capacity_waiters.c.key == key, capacity_waiters.c.lease_id == lease_id)


_DROP_EXPIRED = text(
    """
    WITH leases AS (DELETE FROM capacity_leases WHERE key = :key AND expires_at <= :now),
         waiters AS (DELETE FROM capacity_waiters WHERE key = :key AND expires_at <= :now)
    DELETE FROM capacity_requests WHERE key = :key AND at <= :window_start
    """
)
_READ_LINE = text(
    """
    SELECT (SELECT count(*) FROM capacity_requests WHERE key = :key AND at > :window_start) AS requests,
           (SELECT coalesce(sum(tokens), 0) FROM capacity_requests WHERE key = :key AND at > :window_start)
               AS tokens,
           (SELECT coalesce(json_agg(json_build_object(
                       'lease_id', lease_id, 'tenant_id', tenant_id, 'run_id', run_id, 'priority', priority,
                       'weight', weight, 'since', since, 'standby_until', standby_until)), '[]')
              FROM capacity_waiters WHERE key = :key AND expires_at > :now) AS waiters,
           (SELECT coalesce(json_object_agg(tenant_id, n), '{}')
              FROM (SELECT tenant_id, count(*) AS n FROM capacity_leases
                     WHERE key = :key AND expires_at > :now GROUP BY tenant_id) t) AS by_tenant
    """
)


async def _line(conn: AsyncConnection, key: str, now: datetime, limits: Limits, *, tidy: bool = True) -> _Line:
    """The key's state at `now`, what expired left out (one round trip, whatever the line). `tidy`
    (under the key's lock): what expired is deleted first, so the tables stay the size of the line."""
    times = {"key": key, "now": now, "window_start": now - WINDOW}
    if tidy:
        await conn.execute(_DROP_EXPIRED, times)
    row = (await conn.execute(_READ_LINE, times)).one()
    waiters = [
        _Waiter(
            w["lease_id"],
            w["tenant_id"],
            w["run_id"],
            w["priority"],
            w["weight"],
            datetime.fromisoformat(w["since"]),
            datetime.fromisoformat(w["standby_until"]) if w["standby_until"] else None,
        )
        for w in row.waiters
    ]
    by_tenant = {t: int(n) for t, n in row.by_tenant.items()}
    capped = sorted({w.tenant_id for w in waiters} | set(by_tenant))
    capped = [t for t in capped if limits.tenant_runs(t) is not None]
    tenant_in_flight: dict[str, int] = {}
    if capped:
        L = capacity_leases.c
        tenant_in_flight = await _counts(
            conn,
            select(L.tenant_id, func.count()).where(L.tenant_id.in_(capped), L.expires_at > now).group_by(L.tenant_id),
        )
    return _Line(key, waiters, sum(by_tenant.values()), row.requests, int(row.tokens), by_tenant, tenant_in_flight)


async def _retry_after(
    conn: AsyncConnection,
    key: str,
    entry: ModelLimit | None,
    line: _Line,
    reason: WaitReason,
    position: int,
    now: datetime,
    lease_seconds: float,
) -> float:
    """When a waiter at `position` is worth asking again. A request-window wait knows it: when
    enough of the minute's requests age out. A slot in flight frees at no known time: the release
    signals the waiters that fit, and the timer is the backstop, later for those further back."""
    if reason in (WaitReason.REQUESTS, WaitReason.TOKENS) and entry is not None:
        over = line.requests - (entry.requests_per_minute or line.requests) + position - 1
        R = capacity_requests.c
        oldest = await conn.scalar(select(R.at).where(R.key == key).order_by(R.at).offset(max(over, 0)).limit(1))
        if oldest is not None:
            return _seconds((oldest + WINDOW) - now, low=0.05)
    behind = position / max(entry.in_flight or 1, 1) if entry is not None else position
    return min(LONGEST_WAIT, lease_seconds * (1 + math.floor(behind)))


def _seconds(delta: timedelta, *, low: float = 0.05) -> float:
    return max(delta.total_seconds(), low)


def _wait(key: str, reason: WaitReason, position: int, delta: timedelta) -> CapacityWait:
    return CapacityWait(key=key, reason=reason, position=position, retry_after=min(_seconds(delta), LONGEST_WAIT))


def _case_open(failures: Any, breaker: BreakerLimit) -> Any:
    h = model_key_health.c
    return case(
        (failures >= breaker.failures, func.clock_timestamp() + timedelta(seconds=breaker.open_seconds)),
        else_=h.breaker_open_until,
    )


async def leave_lines(conn: AsyncConnection, run_id: str) -> None:
    """A run that ended leaves every line it stood in, and gives back any slot it still held."""
    await conn.execute(delete(capacity_waiters).where(capacity_waiters.c.run_id == run_id))
    await conn.execute(delete(capacity_leases).where(capacity_leases.c.run_id == run_id))
