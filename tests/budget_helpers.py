"""What the budget pool tests share: a tree of runs with budgets, a model call's ask, its settle."""

from __future__ import annotations

import uuid
from typing import Any

from waypoint.store import RunStore
from waypoint.store.budget import BudgetAsk
from waypoint.store.steps import NewRun
from waypoint.types import ParentRef, RunPlan


async def tree(store: RunStore, tenant: str, *, children: int = 0, **limits: Any) -> list[str]:
    """A root run with `limits` (max_tokens, max_cost_usd; tree_max_steps) and `children` sub-agent runs."""
    root = f"root-{uuid.uuid4().hex[:10]}"
    steps = limits.pop("tree_max_steps", None)
    plan = await store.steps.create_run(
        NewRun(
            root,
            tenant,
            "lead",
            "a task",
            "Lead.",
            RunPlan(model="scripted", max_steps=50, **limits),
            tree_max_steps=steps,
        )
    )
    ids = [root]
    for i in range(children):
        child = f"{root}.1.{i}"
        made = await store.steps.create_run(
            NewRun(
                child,
                tenant,
                "child",
                "part",
                "Child.",
                RunPlan(model="scripted", max_steps=50),
                parent=ParentRef(root, 1, i, root),
            )
        )
        assert made.budget_pool == plan.budget_pool  # a sub-agent run draws from its tree's pool
        ids.append(child)
    return ids


def ask(run: str, tenant: str, pool: str | None, *, step: int = 1, input_tokens: int = 100, **kw: Any) -> BudgetAsk:
    fields: dict[str, Any] = {"attempt": 1, "max_output": 4096, "min_output": 64, "lease_seconds": 300.0, **kw}
    return BudgetAsk(run_id=run, step=step, tenant_id=tenant, pool=pool, input_tokens=input_tokens, **fields)


async def settle(store: RunStore, a: BudgetAsk, tokens: int, *, day: Any = None, cost: float = 0.0) -> list[str]:
    return await store.budget.settle_budget(
        run_id=a.run_id,
        step=a.step,
        attempt=a.attempt,
        tenant_id=a.tenant_id,
        pool=a.pool,
        day=day,
        tokens=tokens,
        cost_usd=cost,
        steps=1,
    )
