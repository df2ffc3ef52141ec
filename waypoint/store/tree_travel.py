"""Time travel over trees: the sub-agent calls of a run, each with the child run it started.

A sub-agent call leaves two traces: the child run (`runs` row whose `caller_*` columns name the
call) and the call's outcome in the caller's ledger (`tool_effects`, written by `agent_result`).
`agent_calls` puts them together, keyed by (step, call index): what `show` lists for a step,
what `compare` pairs across two trees, what `verify` checks.

A fork or a rerun from step N inherits steps 1..N from its ancestors, and so the calls made
there (their answers are in the checkpoint it starts from): `inherited_calls` reads those
from the ancestors, as `compare` reads inherited steps. A rerun with recorded tools answers a
sub-agent call from its source's record without starting a child: such a call names the source's
child in `recorded_from`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import EventKind, LineageKind, ToolMode
from waypoint.store.base import of_tenant
from waypoint.store.rows import AgentCall, RunRow
from waypoint.store.schema import events, runs, tool_effects
from waypoint.store.trees import subtree, tree_totals


async def _started(conn: AsyncConnection, run_id: str) -> dict[str, Any]:
    """The payload of the run's `run_started` event (its plan, its fork origin), {} before it."""
    payload = await conn.scalar(
        select(events.c.payload).where(events.c.run_id == run_id, events.c.kind == EventKind.RUN_STARTED).limit(1)
    )
    return payload or {}


async def _parent(conn: AsyncConnection, tenant_id: str, run: RunRow) -> RunRow | None:
    if run.parent_run_id is None:
        return None
    row = (
        (await conn.execute(select(runs).where(runs.c.run_id == run.parent_run_id, of_tenant(tenant_id))))
        .mappings()
        .first()
    )
    return None if row is None else RunRow.of(row)


async def caller_of_step(conn: AsyncConnection, tenant_id: str, run: RunRow, step: int) -> RunRow:
    """The run whose log holds what `step` did: `run`, or the ancestor a fork inherited the step from
    (a fork's own steps start after its fork step)."""
    current = run
    while current.fork_step is not None and step <= current.fork_step:
        parent = await _parent(conn, tenant_id, current)
        if parent is None:
            break
        current = parent
    return current


async def agent_calls(
    conn: AsyncConnection, tenant_id: str, run: RunRow, *, step: int | None = None, upto: int | None = None
) -> list[AgentCall]:
    """The sub-agent calls `run` made itself (of one `step`, or of the steps up to `upto`), in call
    order: its ledger rows for tools that are sub-agents of its plan, and its child runs."""
    started = await _started(conn, run.run_id)
    names = list((started.get("plan") or {}).get("agents") or [])
    if not names:  # an agent without sub-agents makes no such call (and starts no child)
        return []
    ledger = select(tool_effects).where(tool_effects.c.run_id == run.run_id, tool_effects.c.tool.in_(names))
    children = select(runs).where(runs.c.caller_run_id == run.run_id, of_tenant(tenant_id))
    if step is not None:
        ledger = ledger.where(tool_effects.c.step == step)
        children = children.where(runs.c.caller_step == step)
    if upto is not None:
        ledger = ledger.where(tool_effects.c.step <= upto)
        children = children.where(runs.c.caller_step <= upto)
    effects = {(r["step"], r["call_index"]): r for r in (await conn.execute(ledger)).mappings()}
    rows = [RunRow.of(r) for r in (await conn.execute(children)).mappings()]
    by_call = {(r.caller_step or 0, r.caller_call_index or 0): r for r in rows}
    source = await _recorded_source(conn, tenant_id, run, started)
    found: list[AgentCall] = []
    for key in sorted(set(effects) | set(by_call)):
        effect, child = effects.get(key), by_call.get(key)
        call = AgentCall(
            step=key[0],
            call_index=key[1],
            agent=child.agent if child is not None else effect["tool"] if effect is not None else "",
            caller_run_id=run.run_id,
            outcome=effect["outcome"] if effect is not None else None,
            answer=effect["output"] if effect is not None else None,
        )
        if child is not None:
            totals = tree_totals(await subtree(conn, tenant_id, child.run_id))
            call = replace(
                call,
                child_run_id=child.run_id,
                status=child.status,
                steps=child.steps,
                tokens=totals.tokens,
                cost_usd=totals.cost_usd,
            )
        elif source is not None:
            origin = await caller_of_step(conn, tenant_id, source, key[0])
            call = replace(call, recorded_from=await _child_at(conn, tenant_id, origin.run_id, *key))
        found.append(call)
    return found


async def _recorded_source(
    conn: AsyncConnection, tenant_id: str, run: RunRow, started: dict[str, Any]
) -> RunRow | None:
    """The run whose recorded answers a rerun with recorded tools (and not `--rerun-children`) gave
    its sub-agent calls, else None."""
    fork = started.get("fork") or {}
    if fork.get("kind") != LineageKind.RERUN or fork.get("tools") != ToolMode.RECORDED or fork.get("rerun_children"):
        return None
    return await _parent(conn, tenant_id, run)


async def _child_at(conn: AsyncConnection, tenant_id: str, caller: str, step: int, index: int) -> str | None:
    found = await conn.scalar(
        select(runs.c.run_id)
        .where(runs.c.caller_run_id == caller, runs.c.caller_step == step, runs.c.caller_call_index == index)
        .where(of_tenant(tenant_id))
    )
    return str(found) if found is not None else None


async def inherited_calls(conn: AsyncConnection, tenant_id: str, run: RunRow) -> list[AgentCall]:
    """Every sub-agent call of the run's steps, its own and those it inherited from its ancestors
    (a fork's or a rerun's steps up to its fork step), in step and call order."""
    found: list[AgentCall] = []
    upto: int | None = None
    current: RunRow | None = run
    while current is not None:
        found = await agent_calls(conn, tenant_id, current, upto=upto) + found
        if current.fork_step is None:
            break
        upto = current.fork_step if upto is None else min(upto, current.fork_step)
        current = await _parent(conn, tenant_id, current)
    return sorted(found, key=lambda c: (c.step, c.call_index))
