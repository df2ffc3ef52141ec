"""Temporal's side of budget pools: a model call's reservation in its tree's pool and its tenant's day.

`call_model` asks `Budgets.reserve` once the call's context is assembled (so its input is known) and
before it goes out. Granted, the call holds what it may spend: its input (estimated, with a margin)
and its max_tokens, which the budgets cut to the room they have left and which the call sends to the
model; it settles what it spent when it returns, or gives the reservation back when it fails, and
the settle wakes (a `capacity` signal) the runs that waited on the same budget. Refused, the
activity returns at once: with a wait (`ModelTurn.wait`, reason `budget`) when the calls in flight
hold the room it needs, or when its tenant's day is spent and the limits file says `budget_wait =
"wait"`; else with `ModelTurn.refused`, which ends the run `budget_exceeded`. A budget reached (not
merely held) is logged once per step as a `budget_reached` event and counted by the
`waypoint.budget.refusals` metric, and the call's chat span carries what it reserved.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from opentelemetry import trace
from temporalio import activity

from waypoint import telemetry
from waypoint.activities.capacity import wake
from waypoint.config import Settings
from waypoint.names import WaitReason
from waypoint.pricing import prices_of
from waypoint.store import RunStore
from waypoint.store.budget import TREE, BudgetAsk, Reservation
from waypoint.types import CallModelInput, CapacityWait, ModelTurn

log = logging.getLogger("waypoint.budget")

# The input a call reserves is Waypoint's estimate (4 characters a token) and a quarter more: the
# estimate runs low against real tokenizers (waypoint/tokens.py), and what a call spends beyond its
# reservation is what a tree may pass its pool by.
INPUT_MARGIN = 1.25
# A call goes out only with room for at least this much answer (less is a cut-off answer, not one).
MIN_OUTPUT_TOKENS = 64
# A wait for the calls in flight asks again after this at the latest (their settle signals sooner).
HELD_WAIT_SECONDS = 30.0
# A reservation outlives its call's start-to-close timeout by this much: then its worker is gone.
LEASE_MARGIN_SECONDS = 60.0


@dataclass(frozen=True)
class Held:
    """A granted reservation: what was asked, and what the budgets answered."""

    ask: BudgetAsk
    reservation: Reservation

    @property
    def max_tokens(self) -> int:
        return self.reservation.output_tokens


def seconds_to_next_day(now: datetime | None = None) -> float:
    """Seconds until the next UTC day begins (a tenant's daily budget starts afresh then)."""
    now = now or datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds() + 1.0


def wait_key(inp: CallModelInput, scope: str) -> str:
    """The key a run waiting on a budget shows (`waiting_key`)."""
    return f"budget:{inp.budget_pool}" if scope == TREE else f"budget:tenant:{inp.tenant_id}"


class Budgets:
    def __init__(self, store: RunStore, settings: Settings):
        self.store = store
        self.settings = settings

    def on(self, inp: CallModelInput) -> bool:
        """Whether the call reserves: its tree has a pool, or its tenant a daily budget."""
        return inp.budget_pool is not None or self.settings.limits.daily_budget(inp.tenant_id) is not None

    def ask(self, inp: CallModelInput, input_tokens: int) -> BudgetAsk:
        day = self.settings.limits.daily_budget(inp.tenant_id)
        per_input, per_output, _, per_write = prices_of(inp.model, self.settings.prices)
        max_output = self.settings.budget_output_tokens
        timeout = activity.info().start_to_close_timeout or timedelta(seconds=inp.retry.timeout_seconds)
        return BudgetAsk(
            run_id=inp.run_id,
            step=inp.step,
            attempt=activity.info().attempt,
            tenant_id=inp.tenant_id,
            pool=inp.budget_pool,
            input_tokens=math.ceil(input_tokens * INPUT_MARGIN),
            max_output=max_output,
            min_output=min(MIN_OUTPUT_TOKENS, max_output),
            in_price=max(per_input, per_write) / 1_000_000,
            out_price=per_output / 1_000_000,
            lease_seconds=timeout.total_seconds() + LEASE_MARGIN_SECONDS,
            day_tokens=day.tokens_per_day if day is not None else None,
            day_cost=day.cost_per_day if day is not None else None,
            day_wait=day is not None and day.budget_wait == "wait",
        )

    async def reserve(self, inp: CallModelInput, input_tokens: int) -> Held | ModelTurn:
        """The call's reservation, or the turn that says why it does not go out (a wait, a refusal)."""
        ask = self.ask(inp, input_tokens)
        found = await self.store.budget.reserve_budget(ask)
        if found.granted:
            return Held(ask, found)
        blocked = found.blocked
        assert blocked is not None  # a refusal always says what blocked it
        waits = found.outcome == "wait"
        action = "wait" if waits else "fail"
        reason = blocked.reason(inp.budget_pool, inp.tenant_id)
        attributes = {"waypoint.budget.scope": blocked.scope, "waypoint.budget.action": action}
        telemetry.metrics().budget_refusals.add(1, {**attributes, "waypoint.budget.measure": blocked.measure})
        trace.get_current_span().add_event("waypoint.budget_refused", {**attributes, "waypoint.budget.reason": reason})
        if blocked.spent:  # reached, not merely held by calls in flight: the run's log says so
            payload = blocked.payload(inp.budget_pool, inp.tenant_id, action)
            await self.store.budget.record_budget_reached(inp.tenant_id, inp.run_id, inp.step, payload)
        log.info("budget %s: run=%s step=%s: %s", action, inp.run_id, inp.step, reason)
        if not waits:
            return ModelTurn(model=inp.model, refused=reason)
        retry_after = seconds_to_next_day() if blocked.spent else HELD_WAIT_SECONDS
        wait = CapacityWait(
            key=wait_key(inp, blocked.scope),
            reason=WaitReason.BUDGET,
            position=blocked.position or 1,
            retry_after=retry_after,
        )
        return ModelTurn(model=inp.model, wait=wait)

    async def settle(self, held: Held, turn: ModelTurn | None) -> None:
        """Put what the call spent (nothing: it failed) on its budgets and wake the runs that waited on
        them. A settle that fails is logged, not raised: the answer is not lost for it, and the
        reservation it leaves is given back when the run ends (or when it expires)."""
        ask = held.ask
        try:
            woken = await self.store.budget.settle_budget(
                run_id=ask.run_id,
                step=ask.step,
                attempt=ask.attempt,
                tenant_id=ask.tenant_id,
                pool=ask.pool,
                day=held.reservation.day,
                tokens=turn.usage.input_tokens + turn.usage.output_tokens if turn is not None else 0,
                cost_usd=turn.cost_usd if turn is not None else 0.0,
                steps=1 if turn is not None else 0,
            )
        except Exception as exc:
            log.warning("budget not settled: run=%s step=%s: %s: %s", ask.run_id, ask.step, type(exc).__name__, exc)
            return
        await wake(woken)
