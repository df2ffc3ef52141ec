"""Budget pools in Postgres (waypoint/store/budget.py): a tree's pool and a tenant's day, reserved from
before each model call and settled after, checked figure by figure against the real functions.

Each test makes runs (and tenants) of its own, so they share the session's database."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.budget_helpers import ask, settle, tree
from waypoint.names import EventKind, RunStatus
from waypoint.store import RunStore
from waypoint.store.budget import Blocked, BudgetView
from waypoint.store.steps import NewRun
from waypoint.types import RunPlan

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


async def test_a_root_with_a_budget_opens_one_pool_and_one_without_opens_none(store: RunStore) -> None:
    t = tenant()
    root, child = await tree(store, t, children=1, max_tokens=1000)
    plan = await store.steps.create_run(
        NewRun(root, t, "lead", "a task", "Lead.", RunPlan(model="scripted", max_steps=50, max_tokens=1000))
    )
    assert plan.budget_pool == root  # a retried start finds the same pool
    view = await store.budget.run_budget(t, child)
    assert view == BudgetView(root_run_id=root, max_tokens=1000)
    assert view.left_tokens == 1000 and view.left_cost_usd is None and view.left_steps is None
    (free,) = await tree(store, t)
    assert await store.budget.run_budget(t, free) is None
    assert await store.budget.run_budget("another-tenant", child) is None  # a tenant sees its own pools only


async def test_a_call_holds_its_input_and_an_answer_cut_to_the_room_left_then_settles_what_it_spent(
    store: RunStore,
) -> None:
    t = tenant()
    root, child = await tree(store, t, children=1, max_tokens=1000)
    first = ask(root, t, root)
    held = await store.budget.reserve_budget(first)
    assert (held.outcome, held.output_tokens, held.tokens) == ("granted", 900, 1000)  # 4096 cut to the room
    assert held.pool is not None and held.pool.used_tokens == 0  # the pool as the call found it
    view = await store.budget.run_budget(t, root)
    assert view is not None and (view.reserved_tokens, view.left_tokens, view.in_flight) == (1000, 0, 1)

    # The pool holds nothing for a second call now: it waits, since the first one settles.
    second = ask(child, t, root)
    waiting = await store.budget.reserve_budget(second)
    assert waiting.outcome == "wait" and waiting.blocked is not None
    assert (waiting.blocked.scope, waiting.blocked.measure, waiting.blocked.spent) == ("tree", "tokens", False)
    assert waiting.blocked.position == 1
    assert (await store.budget.run_budget(t, root)).waiting == [child]  # type: ignore[union-attr]

    # The settle counts what the call spent, not what it held, and names the runs that waited.
    assert await settle(store, first, 300) == [child]
    view = await store.budget.run_budget(t, root)
    assert view is not None and (view.used_tokens, view.reserved_tokens, view.left_tokens) == (300, 0, 700)
    assert (view.used_steps, view.waiting, view.in_flight) == (1, [], 0)

    again = await store.budget.reserve_budget(second)
    assert (again.outcome, again.output_tokens) == ("granted", 600)
    await settle(store, second, 650)

    # 950 spent: no call fits (100 in + 64 out), and no settle can change that.
    refused = await store.budget.reserve_budget(ask(root, t, root, step=2))
    assert refused.outcome == "exceeded" and refused.blocked is not None
    assert (refused.blocked.spent, refused.blocked.used, refused.blocked.needed) == (True, 950, 164)
    assert refused.blocked.reason(root, t) == (
        f"token budget reached: 950 of 1,000 tokens used by the tree of {root}; the next model call needs at least 164"
    )


async def test_a_retried_attempt_replaces_its_calls_reservation_and_an_expired_one_holds_nothing(
    store: RunStore,
) -> None:
    t = tenant()
    root, child = await tree(store, t, children=1, max_tokens=2000)
    await store.budget.reserve_budget(ask(root, t, root, max_output=400))
    again = await store.budget.reserve_budget(ask(root, t, root, attempt=2, max_output=400))  # its worker died
    assert again.granted and again.pool is not None and again.pool.reserved_tokens == 0  # not its own twice
    assert (await store.budget.run_budget(t, root)).reserved_tokens == 500  # type: ignore[union-attr]

    # A reservation past its expiry (its worker died, its run never came back) holds nothing.
    await store.budget.reserve_budget(ask(child, t, root, max_output=400, lease_seconds=-1.0))
    view = await store.budget.run_budget(t, root)
    assert view is not None and (view.reserved_tokens, view.in_flight) == (500, 1)
    assert (await store.budget.reserve_budget(ask(root, t, root, step=2, max_output=1400))).output_tokens == 1400

    # The settle of a replaced attempt still counts what it spent (that call went out too).
    await settle(store, ask(root, t, root), 120)
    assert (await store.budget.run_budget(t, root)).used_tokens == 120  # type: ignore[union-attr]


async def test_a_run_that_ends_gives_back_what_its_calls_hold(store: RunStore) -> None:
    t = tenant()
    root, child = await tree(store, t, children=1, max_tokens=5000)
    await store.budget.reserve_budget(ask(child, t, root))
    assert await store.budget.open_reservations([child]) == 1
    await store.log.finish_run(t, child, RunStatus.CANCELLED, None, "stopped")
    assert await store.budget.open_reservations([child]) == 0
    view = await store.budget.run_budget(t, root)
    assert view is not None and (view.reserved_tokens, view.used_tokens, view.left_tokens) == (0, 0, 5000)


async def test_parallel_calls_of_one_tree_are_admitted_one_by_one(store: RunStore) -> None:
    """Twenty calls at once, each needing 200 of a 1,000-token pool: exactly five go out."""
    t = tenant()
    runs = await tree(store, t, children=19, max_tokens=1000)
    root = runs[0]
    answers = await asyncio.gather(
        *(store.budget.reserve_budget(ask(r, t, root, input_tokens=100, max_output=100, min_output=100)) for r in runs)
    )
    assert sorted(a.outcome for a in answers) == ["granted"] * 5 + ["wait"] * 15
    view = await store.budget.run_budget(t, root)
    assert view is not None and view.reserved_tokens == 1000 and len(view.waiting) == 15


async def test_cost_and_steps_are_budgets_of_the_pool_too(store: RunStore) -> None:
    t = tenant()
    root, child = await tree(store, t, children=1, max_cost_usd=0.002, tree_max_steps=2)
    prices = {"in_price": 1e-6, "out_price": 2e-6}
    held = await store.budget.reserve_budget(ask(root, t, root, input_tokens=1000, **prices))
    # $0.001 of input leaves $0.001 for the answer: 500 tokens at $2 a million.
    assert (held.output_tokens, round(held.cost_usd, 6)) == (500, 0.002)
    await settle(store, ask(root, t, root), 1200, cost=0.0012)
    assert (await store.budget.reserve_budget(ask(child, t, root, **prices))).output_tokens == 350
    await settle(store, ask(child, t, root), 150, cost=0.0002)
    view = await store.budget.run_budget(t, root)
    assert view is not None and (round(view.used_cost_usd, 6), view.used_steps, view.left_steps) == (0.0014, 2, 0)
    refused = await store.budget.reserve_budget(ask(root, t, root, step=2, input_tokens=1))
    assert refused.outcome == "exceeded" and refused.blocked is not None
    assert (refused.blocked.measure, refused.blocked.limit) == ("steps", 2)
    assert refused.blocked.reason(root, t).startswith("step budget reached: 2 of 2 steps used by the tree of")


async def test_a_tenants_day_is_a_budget_of_its_own_and_waits_or_fails_as_its_limits_say(store: RunStore) -> None:
    t = tenant()
    (run,) = await tree(store, t)  # no tree budget: the tenant's day alone
    day = {"day_tokens": 500}
    held = await store.budget.reserve_budget(ask(run, t, None, **day))
    assert (held.outcome, held.output_tokens) == ("granted", 400) and held.day is not None
    await settle(store, ask(run, t, None), 450, day=held.day)
    assert (await store.budget.tenant_day(t))["used_tokens"] == 450  # type: ignore[index]

    failed = await store.budget.reserve_budget(ask(run, t, None, step=2, **day))
    assert failed.outcome == "exceeded" and failed.blocked is not None
    assert (failed.blocked.scope, failed.blocked.spent) == ("tenant_day", True)
    assert failed.blocked.reason(None, t) == (
        f"token budget reached: 450 of 500 tokens used by tenant {t} today (UTC); "
        "the next model call needs at least 164"
    )
    waits = await store.budget.reserve_budget(ask(run, t, None, step=2, day_wait=True, **day))
    assert waits.outcome == "wait" and waits.blocked is not None and waits.blocked.spent
    assert (await store.budget.tenant_day(t))["waiting"] == [run]  # type: ignore[index]
    assert (await store.budget.tenant_day("no-such-tenant")) is None


async def test_a_budget_reached_event_is_logged_once_per_step_and_action(store: RunStore) -> None:
    t = tenant()
    (run,) = await tree(store, t, max_tokens=10)
    blocked = Blocked("tree", "tokens", 10, 10, 0, 164, True)
    payload = blocked.payload(run, t, "fail")
    assert await store.budget.record_budget_reached(t, run, 1, payload) is True
    assert await store.budget.record_budget_reached(t, run, 1, payload) is False  # asked again: nothing more
    events = await store.travel.events(t, run, kinds=[EventKind.BUDGET_REACHED])
    assert [e.payload["action"] for e in events] == ["fail"]
    assert (
        events[0].payload["reason"]
        == f"token budget reached: 10 of 10 tokens used by the tree of {run}; the next model call needs at least 164"
    )


def test_a_pool_reads_as_used_reserved_and_left() -> None:
    view = BudgetView(
        "r", max_tokens=1500, used_tokens=1234, reserved_tokens=300, max_cost_usd=0.5, used_cost_usd=0.1, in_flight=1
    )
    assert view.to_json() == {
        "pool": "r",
        "in_flight": 1,
        "waiting": [],
        "tokens": {"limit": 1500, "used": 1234, "reserved": 300, "left": -34},
        "cost_usd": {"limit": 0.5, "used": 0.1, "reserved": 0.0, "left": 0.4},
    }
    assert view.summary() == (
        "tokens 1,234 used + 300 reserved of 1,500 (-34 left); cost_usd $0.1 used + $0 reserved of $0.5 ($0.4 left); "
        "1 call(s) in flight"
    )
