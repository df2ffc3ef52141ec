"""Time travel over the mirror: the state at any step, the diff of two steps, the event log,
the full transcript. Forks are followed to their parent for steps before the fork."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.errors import NotFound
from waypoint.models import estimate_tokens
from waypoint.store import context
from waypoint.store.reads import get_run
from waypoint.store.schema import checkpoints, events, runs


def parse_step(raw: str | int) -> int:
    try:
        step = int(raw)
    except (TypeError, ValueError):
        raise NotFound(f"a step is a whole number, got {raw!r}") from None
    if step < 0:
        raise NotFound(f"a step is 0 or more, got {step}")
    return step


async def owner_of_step(engine: AsyncEngine, tenant_id: str, run_id: str, step: int) -> str:
    """The run (this one or an ancestor) whose checkpoint holds `step`; checks the range."""
    run = await get_run(engine, tenant_id, run_id)
    if step > run["steps"] and not (run["fork_step"] is not None and step <= run["fork_step"]):
        raise NotFound(f"run {run_id} has steps 0 to {run['steps']}: there is no step {step}")
    while run["fork_step"] is not None and step < run["fork_step"]:
        run = await get_run(engine, tenant_id, run["parent_run_id"])
    return run["run_id"]


async def checkpoint_at(engine: AsyncEngine, tenant_id: str, run_id: str, step: int) -> dict[str, Any]:
    """The stored checkpoint of `step` (segments, not messages), found through the run's ancestors."""
    owner = await owner_of_step(engine, tenant_id, run_id, step)
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(checkpoints.c.state, checkpoints.c.created_at).where(
                    checkpoints.c.run_id == owner, checkpoints.c.step == step
                )
            )
        ).first()
    if row is None:
        raise NotFound(f"run {run_id} has no checkpoint for step {step}")
    return {"run_id": owner, "step": step, "at": row.created_at.isoformat(), "state": row.state}


async def state_at(engine: AsyncEngine, tenant_id: str, run_id: str, step: int) -> dict[str, Any]:
    """The checkpoint of `step` with its working memory rendered: `state["messages"]`."""
    found = await checkpoint_at(engine, tenant_id, run_id, step)
    async with engine.connect() as conn:
        messages = await context.render(conn, found["state"]["segments"])
    found["state"] = {**found["state"], "messages": messages}
    return found


async def step_events(
    engine: AsyncEngine,
    tenant_id: str,
    run_id: str,
    *,
    kinds: list[str] | None = None,
    since_step: int = 0,
    step: int | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    await get_run(engine, tenant_id, run_id)
    query = select(events).where(events.c.run_id == run_id)
    if step is not None:
        query = query.where(events.c.step == step)
    else:
        query = query.where(events.c.step >= since_step)
    if kinds:
        query = query.where(events.c.kind.in_(kinds))
    async with engine.connect() as conn:
        rows = (await conn.execute(query.order_by(events.c.seq).limit(limit))).mappings().all()
    return [{**r, "created_at": r["created_at"].isoformat()} for r in rows]


@dataclass
class StateDiff:
    run_id: str
    a: int
    b: int
    added: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[dict[str, Any]] = field(default_factory=list)
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    tokens_a: int = 0
    tokens_b: int = 0


def _key(message: dict[str, Any]) -> str:
    return json.dumps(message, sort_keys=True)


async def diff(engine: AsyncEngine, tenant_id: str, run_id: str, a: int, b: int) -> StateDiff:
    """Messages added and dropped between the states at steps `a` and `b`, other fields changed,
    and the context size of each (estimated tokens)."""
    sa = (await state_at(engine, tenant_id, run_id, a))["state"]
    sb = (await state_at(engine, tenant_id, run_id, b))["state"]
    in_a = {_key(m) for m in sa["messages"]}
    in_b = {_key(m) for m in sb["messages"]}
    result = StateDiff(run_id=run_id, a=a, b=b)
    result.added = [m for m in sb["messages"] if _key(m) not in in_a]
    result.dropped = [m for m in sa["messages"] if _key(m) not in in_b]
    for name in sorted((set(sa) | set(sb)) - {"messages", "segments"}):
        if sa.get(name) != sb.get(name):
            result.changed[name] = (sa.get(name), sb.get(name))
    result.tokens_a, result.tokens_b = estimate_tokens(sa["messages"]), estimate_tokens(sb["messages"])
    return result


async def export(engine: AsyncEngine, tenant_id: str, run_id: str) -> AsyncIterator[str]:
    """The full transcript as JSON lines: the run row, then every event in order (streamed)."""
    run = await get_run(engine, tenant_id, run_id)
    yield json.dumps({"type": "run", **run}, default=str)
    async with engine.connect() as conn:
        rows = await conn.stream(select(events).where(events.c.run_id == run_id).order_by(events.c.seq))
        async for e in rows.mappings():
            yield json.dumps({"type": "event", **{k: v for k, v in e.items() if k != "id"}}, default=str)


async def lineage(engine: AsyncEngine, tenant_id: str, run_id: str) -> list[dict[str, Any]]:
    """Ancestors (oldest first) with the step each fork was taken at, then the run's own forks."""
    chain: list[dict[str, Any]] = []
    run = await get_run(engine, tenant_id, run_id)
    while run["parent_run_id"] is not None:
        chain.insert(0, {"run_id": run["parent_run_id"], "forked_at": run["fork_step"], "relation": "ancestor"})
        run = await get_run(engine, tenant_id, run["parent_run_id"])
    async with engine.connect() as conn:
        forks = await conn.execute(
            select(runs.c.run_id, runs.c.fork_step)
            .where(runs.c.parent_run_id == run_id, runs.c.tenant_id == tenant_id)
            .order_by(runs.c.created_at)
        )
        chain += [{"run_id": f.run_id, "forked_at": f.fork_step, "relation": "fork"} for f in forks]
    return chain
