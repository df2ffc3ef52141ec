"""The fleet's figures agree with each other: a fork's steps inherited from its parent count once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import make_run, step
from waypoint.config import Settings
from waypoint.store import RunStore
from waypoint.store.steps import NewRun
from waypoint.types import ForkOrigin, RunPlan, StepRecord

pytestmark = pytest.mark.postgres


async def test_the_cost_table_counts_a_forks_own_steps_as_the_totals_do(store: RunStore, settings: Settings) -> None:
    since = datetime.now(UTC) - timedelta(minutes=5)
    parent = await make_run(store, settings, [step(n, [("add", {"a": n, "b": 1}, str(n + 1))]) for n in (1, 2, 3)])
    fork = f"{parent}-fork"
    plan = RunPlan(model="scripted", max_steps=50, start_step=2)
    await store.steps.create_run(
        NewRun(fork, settings.tenant, "calculator", "again", "Add numbers.", plan, fork=ForkOrigin(parent, 2, "again"))
    )
    turn, results, _ = step(3, [("add", {"a": 9, "b": 9}, "18")])
    await store.steps.record_step(StepRecord(fork, settings.tenant, 3, turn, results))

    figures = await store.fleet.fleet_figures(settings.tenant, since, timedelta(minutes=1))
    answered = sum(s.steps for s in figures.steps)  # the totals' steps: model answers in the period
    assert answered == 4
    assert sum(c.steps for c in figures.costs) == answered  # was 6: the fork's two inherited steps again
