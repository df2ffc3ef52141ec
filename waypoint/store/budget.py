"""Budget pools: what a tree of runs, and a tenant's UTC day, may still spend on model calls.

A tree's token, cost and step budgets (its root's) are one pool, created with the root's row and
found by the tree's other runs through their `root_run_id`. Before each model call the call reserves
what it may spend (`reserve_budget`): its input, and at most its `max_tokens` of output, which the
pool cuts to the room it has left; after the call it settles what it spent (`settle_budget`). Both
are one round trip each, a PL/pgSQL function of migration 0021 that holds the pool's row lock (and
the tenant day's) for its few statements, so parallel calls of one tree are admitted one by one
against what is spent and what the others hold.

A reservation is durable: a retried attempt of the same call replaces its own (the key is run and
step), a run that ends gives back what it still holds (`finish_run`), and a reservation outlives its
call's timeout by a minute at most, so one whose worker died and whose run never came back is not
held for ever. A call that does not fit waits when the calls in flight hold the room it needs (their
settle wakes it) and is refused when what was spent holds it: the run ends `budget_exceeded`, or, for
a tenant's day whose limits say `budget_wait = "wait"`, waits for the next day.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import EventKind
from waypoint.pricing import format_usd
from waypoint.store.base import StoreBase
from waypoint.store.log import append_events
from waypoint.store.rows import row_of
from waypoint.store.schema import budget_pools, budget_reservations, events

# Scopes and measures, as the reserve function names them.
TREE = "tree"
TENANT_DAY = "tenant_day"
TOKENS, COST, STEPS = "tokens", "cost_usd", "steps"

_RESERVE = text(
    """
    SELECT waypoint_budget_reserve(
        CAST(:run_id AS text), CAST(:step AS integer), CAST(:attempt AS integer), CAST(:tenant_id AS text),
        CAST(:pool AS text), CAST(:day_tokens AS bigint), CAST(CAST(:day_cost AS double precision) AS numeric),
        CAST(:day_wait AS boolean), CAST(:input_tokens AS bigint), CAST(:max_output AS bigint),
        CAST(:min_output AS bigint), CAST(CAST(:in_price AS double precision) AS numeric),
        CAST(CAST(:out_price AS double precision) AS numeric), CAST(:lease_seconds AS double precision)
    ) AS answer
    """
).columns(answer=JSONB)
_SETTLE = text(
    """
    SELECT waypoint_budget_settle(
        CAST(:run_id AS text), CAST(:step AS integer), CAST(:attempt AS integer), CAST(:pool AS text),
        CAST(:tenant_id AS text), CAST(:day AS date), CAST(:tokens AS bigint),
        CAST(CAST(:cost AS double precision) AS numeric), CAST(:steps AS integer)
    ) AS woken
    """
)
# A pool with what its calls in flight hold (those past their expiry hold nothing), found by any run
# of its tree, inside the tenant.
_POOL_OF_RUN = text(
    """
    SELECT p.*, coalesce(h.tokens, 0) AS reserved_tokens, coalesce(h.cost, 0) AS reserved_cost_usd,
           coalesce(h.steps, 0) AS reserved_steps, coalesce(h.calls, 0) AS in_flight
      FROM runs r
      JOIN budget_pools p ON p.root_run_id = r.root_run_id
      LEFT JOIN LATERAL (
          SELECT sum(b.tokens) AS tokens, sum(b.cost_usd) AS cost, sum(b.steps) AS steps, count(*) AS calls
            FROM budget_reservations b WHERE b.pool = p.root_run_id AND b.expires_at > clock_timestamp()
      ) h ON true
     WHERE r.run_id = :run_id AND r.tenant_id = :tenant_id
    """
)
_TENANT_DAY = text(
    """
    SELECT d.day, d.used_tokens, d.used_cost_usd, d.waiting,
           coalesce(h.tokens, 0) AS reserved_tokens, coalesce(h.cost, 0) AS reserved_cost_usd
      FROM budget_tenant_days d
      LEFT JOIN LATERAL (
          SELECT sum(b.tokens) AS tokens, sum(b.cost_usd) AS cost FROM budget_reservations b
           WHERE b.tenant_id = d.tenant_id AND b.day = d.day AND b.expires_at > clock_timestamp()
      ) h ON true
     WHERE d.tenant_id = :tenant_id AND d.day = (clock_timestamp() AT TIME ZONE 'UTC')::date
    """
)


@dataclass(frozen=True)
class BudgetAsk:
    """One model call asking its budgets for room: `input_tokens` it sends (an estimate, with a margin),
    up to `max_output` tokens of answer, and no call at all with room for less than `min_output`.
    Prices are USD per token (input at its dearest: cache writes cost more than plain input). The
    tenant's daily budget comes from the limits file, so it is part of the ask."""

    run_id: str
    step: int
    attempt: int
    tenant_id: str
    pool: str | None
    input_tokens: int
    max_output: int
    min_output: int
    in_price: float = 0.0
    out_price: float = 0.0
    lease_seconds: float = 360.0
    day_tokens: int | None = None
    day_cost: float | None = None
    day_wait: bool = False


@dataclass(frozen=True)
class BudgetView:
    """A tree's pool: its limits (None: none), what was spent, what the calls in flight hold."""

    root_run_id: str
    max_tokens: int | None = None
    used_tokens: int = 0
    reserved_tokens: int = 0
    max_cost_usd: float | None = None
    used_cost_usd: float = 0.0
    reserved_cost_usd: float = 0.0
    max_steps: int | None = None
    used_steps: int = 0
    reserved_steps: int = 0
    in_flight: int = 0  # model calls holding a reservation
    waiting: list[str] = field(default_factory=list)  # runs waiting for those to settle

    @property
    def left_tokens(self) -> int | None:
        return None if self.max_tokens is None else self.max_tokens - self.used_tokens - self.reserved_tokens

    @property
    def left_cost_usd(self) -> float | None:
        if self.max_cost_usd is None:
            return None
        return round(self.max_cost_usd - self.used_cost_usd - self.reserved_cost_usd, 10)

    @property
    def left_steps(self) -> int | None:
        return None if self.max_steps is None else self.max_steps - self.used_steps - self.reserved_steps

    @classmethod
    def of(cls, row: Any) -> BudgetView:
        return row_of(
            cls,
            row,
            max_tokens=_int,
            used_tokens=int,
            reserved_tokens=int,
            max_cost_usd=_float,
            used_cost_usd=float,
            reserved_cost_usd=float,
            max_steps=_int,
            used_steps=int,
            reserved_steps=int,
            in_flight=lambda v: int(v or 0),
            waiting=lambda v: list(v or []),
        )

    def to_json(self) -> dict[str, Any]:
        """Per measure the tree has a limit for: limit, used, reserved, left."""
        out: dict[str, Any] = {"pool": self.root_run_id, "in_flight": self.in_flight, "waiting": self.waiting}
        for measure, limit, used, reserved, left in self.measures():
            out[measure] = {"limit": limit, "used": used, "reserved": reserved, "left": left}
        return out

    def measures(self) -> list[tuple[str, Any, Any, Any, Any]]:
        """(measure, limit, used, reserved, left) for each measure with a limit."""
        found = [
            (TOKENS, self.max_tokens, self.used_tokens, self.reserved_tokens, self.left_tokens),
            (COST, self.max_cost_usd, self.used_cost_usd, self.reserved_cost_usd, self.left_cost_usd),
            (STEPS, self.max_steps, self.used_steps, self.reserved_steps, self.left_steps),
        ]
        return [m for m in found if m[1] is not None]

    def summary(self) -> str:
        """One line: e.g. `tokens 1,234 used + 300 reserved of 1,500 (-34 left)`, per measure."""
        parts = []
        for measure, limit, used, reserved, left in self.measures():
            show = format_usd if measure == COST else "{:,}".format
            parts.append(
                f"{measure} {show(used)} used + {show(reserved)} reserved of {show(limit)} ({show(left)} left)"
            )
        flight = f"; {self.in_flight} call(s) in flight" if self.in_flight else ""
        return "; ".join(parts) + flight


@dataclass(frozen=True)
class Blocked:
    """The budget a call did not fit: its scope (the tree, the tenant's day), the measure, the limit,
    what was spent and reserved, what the call needed at least, and whether the spent part alone
    keeps it out (`spent`; else the calls in flight do). `position`: its place among the waiters."""

    scope: str
    measure: str
    limit: float
    used: float
    reserved: float
    needed: float
    spent: bool
    position: int | None = None

    def reason(self, pool: str | None, tenant_id: str) -> str:
        """Why the call did not go out, as the run's end (or its wait) says it."""
        show = format_usd if self.measure == COST else (lambda v: f"{int(v):,}")
        unit = {TOKENS: " tokens", STEPS: " steps", COST: ""}[self.measure]
        noun = {TOKENS: "token", STEPS: "step", COST: "cost"}[self.measure]
        whose = f"the tree of {pool}" if self.scope == TREE else f"tenant {tenant_id} today (UTC)"
        spent = f"{show(self.used)} of {show(self.limit)}{unit} used by {whose}"
        if not self.spent:
            return f"{noun} budget held by model calls in flight: {spent}, {show(self.reserved)} reserved"
        return f"{noun} budget reached: {spent}; the next model call needs at least {show(self.needed)}"

    def payload(self, pool: str | None, tenant_id: str, action: str) -> dict[str, Any]:
        """The `budget_reached` event's payload."""
        return {
            "scope": self.scope,
            "measure": self.measure,
            "action": action,
            "pool": pool if self.scope == TREE else None,
            "limit": self.limit,
            "used": self.used,
            "reserved": self.reserved,
            "needed": self.needed,
            "reason": self.reason(pool, tenant_id),
        }


@dataclass(frozen=True)
class Reservation:
    """What a call's budgets answered: `granted` (with its max_tokens cut to the room left, and what
    it holds), `wait` or `exceeded` (with what blocked it). `pool`: the tree's pool before this call."""

    outcome: str
    output_tokens: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    day: date | None = None
    blocked: Blocked | None = None
    pool: BudgetView | None = None

    @property
    def granted(self) -> bool:
        return self.outcome == "granted"


def reservation_of(answer: dict[str, Any], pool: str | None) -> Reservation:
    blocked = answer.get("blocked")
    found = answer.get("pool")
    return Reservation(
        outcome=answer["outcome"],
        output_tokens=int(answer["output_tokens"]),
        tokens=int(answer["tokens"]),
        cost_usd=float(answer["cost_usd"]),
        day=date.fromisoformat(answer["day"]) if answer.get("day") else None,
        blocked=Blocked(
            scope=blocked["scope"],
            measure=blocked["measure"],
            limit=float(blocked["limit"]),
            used=float(blocked["used"]),
            reserved=float(blocked["reserved"]),
            needed=float(blocked["needed"]),
            spent=bool(blocked["spent"]),
            position=blocked.get("position"),
        )
        if blocked
        else None,
        pool=BudgetView.of({"root_run_id": pool, **found}) if found and pool else None,
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


async def open_pool(
    conn: AsyncConnection,
    *,
    run_id: str,
    tenant_id: str,
    root_run_id: str | None,
    max_tokens: int | None,
    max_cost_usd: float | None,
    max_steps: int | None,
) -> str | None:
    """The pool a starting run draws from: for a root with a token, cost or step budget, its own
    (created once, whatever the retries); for a sub-agent run, its tree's, if the tree has one."""
    if root_run_id is not None and root_run_id != run_id:
        return await conn.scalar(select(budget_pools.c.root_run_id).where(budget_pools.c.root_run_id == root_run_id))
    if max_tokens is None and max_cost_usd is None and max_steps is None:
        return None
    await conn.execute(
        insert(budget_pools)
        .values(
            root_run_id=run_id,
            tenant_id=tenant_id,
            max_tokens=max_tokens,
            max_cost_usd=max_cost_usd,
            max_steps=max_steps,
        )
        .on_conflict_do_nothing(index_elements=["root_run_id"])
    )
    return run_id


class BudgetStore(StoreBase):
    async def reserve_budget(self, ask: BudgetAsk) -> Reservation:
        """Reserve room for one model call in its tree's pool and its tenant's day (one round trip)."""
        params = {
            "run_id": ask.run_id,
            "step": ask.step,
            "attempt": ask.attempt,
            "tenant_id": ask.tenant_id,
            "pool": ask.pool,
            "day_tokens": ask.day_tokens,
            "day_cost": ask.day_cost,
            "day_wait": ask.day_wait,
            "input_tokens": ask.input_tokens,
            "max_output": ask.max_output,
            "min_output": ask.min_output,
            "in_price": ask.in_price,
            "out_price": ask.out_price,
            "lease_seconds": ask.lease_seconds,
        }
        async with self.engine.begin() as conn:
            answer = (await conn.execute(_RESERVE, params)).scalar_one()
        return reservation_of(answer, ask.pool)

    async def settle_budget(
        self,
        *,
        run_id: str,
        step: int,
        attempt: int,
        tenant_id: str,
        pool: str | None,
        day: date | None,
        tokens: int,
        cost_usd: float,
        steps: int,
    ) -> list[str]:
        """Put what a call spent on its pool and its tenant's day and drop its reservation (one round
        trip); the runs that waited on either, to be woken. A call that failed settles nothing spent."""
        params = {
            "run_id": run_id,
            "step": step,
            "attempt": attempt,
            "tenant_id": tenant_id,
            "pool": pool,
            "day": day,
            "tokens": tokens,
            "cost": cost_usd,
            "steps": steps if pool is not None else 0,
        }
        async with self.engine.begin() as conn:
            woken = (await conn.execute(_SETTLE, params)).scalar_one()
        return list(woken or [])

    async def run_budget(self, tenant_id: str, run_id: str) -> BudgetView | None:
        """The pool of the tree `run_id` belongs to (None: the tree has no budget)."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(_POOL_OF_RUN, {"run_id": run_id, "tenant_id": tenant_id})).mappings().first()
        return BudgetView.of(row) if row is not None else None

    async def tenant_day(self, tenant_id: str) -> dict[str, Any] | None:
        """What the tenant spent today (UTC) and what its calls in flight hold; None before its first call."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(_TENANT_DAY, {"tenant_id": tenant_id})).mappings().first()
        if row is None:
            return None
        return {
            "day": row["day"].isoformat(),
            "used_tokens": int(row["used_tokens"]),
            "used_cost_usd": float(row["used_cost_usd"]),
            "reserved_tokens": int(row["reserved_tokens"]),
            "reserved_cost_usd": float(row["reserved_cost_usd"]),
            "waiting": list(row["waiting"] or []),
        }

    async def open_reservations(self, run_ids: list[str]) -> int:
        """How many reservations these runs hold, expired or not (none once they ended)."""
        async with self.engine.connect() as conn:
            found = await conn.scalar(
                select(func.count()).where(budget_reservations.c.run_id.in_(run_ids)).select_from(budget_reservations)
            )
        return int(found or 0)

    async def record_budget_reached(self, tenant_id: str, run_id: str, step: int, payload: dict[str, Any]) -> bool:
        """A `budget_reached` event, once per step, scope and action (a call that asks again while it
        waits logs nothing more); whether it was logged now."""
        async with self.engine.begin() as conn:
            await self._run(conn, tenant_id, run_id, lock=True)
            logged = await conn.execute(
                select(events.c.seq).where(
                    events.c.run_id == run_id,
                    events.c.step == step,
                    events.c.kind == EventKind.BUDGET_REACHED,
                    events.c.payload["scope"].astext == payload["scope"],
                    events.c.payload["action"].astext == payload["action"],
                )
            )
            if logged.first() is not None:
                return False
            await append_events(conn, run_id, [(step, EventKind.BUDGET_REACHED, payload)], locked=True)
        return True
