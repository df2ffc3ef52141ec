"""Trees of runs: a run and the sub-agent runs it started, theirs, and so on.

A sub-agent run records the call that started it (`caller_run_id`, `caller_step`,
`caller_call_index`) and its tree's root (`root_run_id`). A subtree is one recursive query over
`caller_run_id`, always inside the tenant; nothing here follows forks (`parent_run_id`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import LIVE, EventKind, RunStatus
from waypoint.store.base import StoreBase, of_tenant
from waypoint.store.budget import BudgetView
from waypoint.store.log import append_events, transition_status
from waypoint.store.rows import RunRow
from waypoint.store.schema import runs

# Deeper than any tree a run may grow (max_agent_depth is checked at every call): a bound, not a rule.
MAX_TREE_DEPTH = 64


@dataclass(frozen=True)
class TreeNode:
    """One run of a tree, with its depth below the tree's top (0) and its caller's run id."""

    run: RunRow
    depth: int


@dataclass(frozen=True)
class TreeTotals:
    runs: int
    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: float

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class RunTree:
    """A run (the first node) and the runs below it, depth first in call order, with their totals, and
    the budget pool of the tree it belongs to (None: the tree has no budget)."""

    nodes: list[TreeNode]
    totals: TreeTotals
    budget: BudgetView | None = None

    @property
    def root(self) -> RunRow:
        return self.nodes[0].run


def tree_totals(nodes: list[TreeNode]) -> TreeTotals:
    rows = [n.run for n in nodes]
    return TreeTotals(
        runs=len(rows),
        steps=sum(r.steps for r in rows),
        input_tokens=sum(r.input_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cost_usd=sum(r.cost_usd for r in rows),
    )


def subtree_query(tenant_id: str, run_id: str) -> Any:
    """(run_id, depth) of `run_id` and every run below it, as a CTE."""
    top = select(runs.c.run_id, literal(0).label("depth")).where(runs.c.run_id == run_id, of_tenant(tenant_id))
    tree = top.cte("tree", recursive=True)
    below = select(runs.c.run_id, (tree.c.depth + 1).label("depth")).where(
        runs.c.caller_run_id == tree.c.run_id, of_tenant(tenant_id), tree.c.depth < MAX_TREE_DEPTH
    )
    return tree.union_all(below)


async def subtree(conn: AsyncConnection, tenant_id: str, run_id: str) -> list[TreeNode]:
    """The run and every run below it, each under its caller, callers' calls in order."""
    tree = subtree_query(tenant_id, run_id)
    rows = (await conn.execute(select(runs, tree.c.depth).join(tree, tree.c.run_id == runs.c.run_id))).mappings().all()
    by_caller: dict[str | None, list[TreeNode]] = {}
    top: list[TreeNode] = []
    for row in rows:
        node = TreeNode(RunRow.of(row), row["depth"])
        if node.depth == 0:
            top.append(node)
        else:
            by_caller.setdefault(node.run.caller_run_id, []).append(node)
    ordered: list[TreeNode] = []

    def walk(node: TreeNode) -> None:
        ordered.append(node)
        below = by_caller.get(node.run.run_id, [])
        for child in sorted(below, key=lambda n: (n.run.caller_step or 0, n.run.caller_call_index or 0)):
            walk(child)

    for node in top:
        walk(node)
    return ordered


class Trees(StoreBase):
    async def tree(self, tenant_id: str, run_id: str) -> list[TreeNode]:
        """`run_id` (depth 0) and the runs below it, depth first, in call order; NotFound if none."""
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            return await subtree(conn, tenant_id, run_id)

    async def children(self, tenant_id: str, run_id: str) -> list[RunRow]:
        """The sub-agent runs `run_id` started itself, in call order."""
        query = (
            select(runs)
            .where(runs.c.caller_run_id == run_id, of_tenant(tenant_id))
            .order_by(runs.c.caller_step, runs.c.caller_call_index)
        )
        async with self.engine.connect() as conn:
            return [RunRow.of(r) for r in (await conn.execute(query)).mappings()]

    async def tree_usage(self, tenant_id: str, run_id: str) -> tuple[int, float]:
        """Tokens and cost of `run_id` and every run below it."""
        tree = subtree_query(tenant_id, run_id)
        query = select(
            func.coalesce(func.sum(runs.c.input_tokens + runs.c.output_tokens), 0),
            func.coalesce(func.sum(runs.c.cost_usd), 0),
        ).join(tree, tree.c.run_id == runs.c.run_id)
        async with self.engine.connect() as conn:
            tokens, cost = (await conn.execute(query)).one()
        return int(tokens), float(cost)

    async def waiting_below(self, tenant_id: str, run_id: str) -> list[RunRow]:
        """The runs below `run_id` (not itself) waiting for a human's approval."""
        async with self.engine.connect() as conn:
            nodes = await subtree(conn, tenant_id, run_id)
        return [n.run for n in nodes if n.depth > 0 and n.run.status == RunStatus.WAITING_APPROVAL]

    async def live_below(self, tenant_id: str, run_id: str) -> list[RunRow]:
        """The unfinished runs below `run_id` (not itself), callers before the runs they called."""
        async with self.engine.connect() as conn:
            nodes = await subtree(conn, tenant_id, run_id)
        return [n.run for n in nodes if n.depth > 0 and n.run.status in LIVE]

    async def mirror_waiting(self, run_id: str, status: RunStatus, detail: str | None) -> None:
        """Show a sub-agent run's end on its callers (they stop waiting on it); see `mirror_waiting`."""
        async with self.engine.begin() as conn:
            await mirror_waiting(conn, run_id, status, detail)

    async def set_status_over_children(self, tenant_id: str, run_id: str, status: RunStatus, *, caller: bool) -> None:
        """The live status change of a run whose step waits on its sub-agent runs (a pause or a resume
        taken meanwhile): `running` is `waiting_approval` instead while a run below waits for a human,
        as the mirror of such a wait shows it (`mirror_waiting`, which moves only running callers, so
        a wait that began while this run was paused shows now). A sub-agent run's callers mirror the
        change, as in `set_status_in_tree`."""
        async with self.engine.begin() as conn:
            detail = None
            if status == RunStatus.RUNNING and (waiting := await waiting_run_below(conn, tenant_id, run_id)):
                status, detail = RunStatus.WAITING_APPROVAL, f"sub-agent run {waiting} waits for approval"
            await transition_status(conn, tenant_id, run_id, status, detail)
            if caller:
                await mirror_waiting(conn, run_id, status, detail)

    async def set_status_in_tree(
        self, tenant_id: str | None, run_id: str, status: RunStatus, detail: str | None
    ) -> None:
        """A sub-agent run's live status change and its callers' mirror of it, in one transaction: no
        reader sees a child waiting for approval while its caller still shows `running`."""
        async with self.engine.begin() as conn:
            await transition_status(conn, tenant_id, run_id, status, detail)
            await mirror_waiting(conn, run_id, status, detail)


async def mirror_waiting(conn: AsyncConnection, run_id: str, status: RunStatus, detail: str | None) -> None:
    """A sub-agent run's wait for approval shows on its callers: each running caller up the chain is
    `waiting_approval` with a detail naming the waiting run, and running again once nothing below it
    waits. Callers' own waits (set by their workflows) are left alone."""
    row = (await conn.execute(select(runs.c.caller_run_id, runs.c.tenant_id).where(runs.c.run_id == run_id))).first()
    if row is None or row.caller_run_id is None:
        return
    caller, tenant = row.caller_run_id, row.tenant_id
    for _ in range(MAX_TREE_DEPTH):
        if status == RunStatus.WAITING_APPROVAL:
            moved = RunStatus.WAITING_APPROVAL
            where = runs.c.status == RunStatus.RUNNING
            note = f"sub-agent run {run_id} waits for approval" + (f": {detail}" if detail else "")
        else:
            # Every sub-agent run's end comes here: most callers show no wait, and have nothing to undo.
            if await conn.scalar(select(runs.c.status).where(runs.c.run_id == caller)) != RunStatus.WAITING_APPROVAL:
                return
            if await waits_below(conn, tenant, caller):
                return  # another run below still waits
            moved, where, note = RunStatus.RUNNING, runs.c.status == RunStatus.WAITING_APPROVAL, None
        changed = (
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == caller, where)
                .values(status=moved, updated_at=func.now())
                .returning(runs.c.steps, runs.c.caller_run_id)
            )
        ).first()
        if changed is None:
            return
        payload = {"status": moved, "detail": note, "waiting_run_id": run_id if note else None}
        await append_events(conn, caller, [(changed.steps, EventKind.STATUS_CHANGED, payload)])
        if changed.caller_run_id is None:
            return
        caller = changed.caller_run_id


async def waits_below(conn: AsyncConnection, tenant_id: str, run_id: str) -> bool:
    """Some run below `run_id` (not itself) waits for a human's approval."""
    return await waiting_run_below(conn, tenant_id, run_id) is not None


async def waiting_run_below(conn: AsyncConnection, tenant_id: str, run_id: str) -> str | None:
    """The id of a run below `run_id` (not itself) that waits for a human's approval, if one does."""
    tree = subtree_query(tenant_id, run_id)
    query = (
        select(runs.c.run_id)
        .join(tree, tree.c.run_id == runs.c.run_id)
        .where(tree.c.depth > 0, runs.c.status == RunStatus.WAITING_APPROVAL)
        .order_by(runs.c.run_id)
        .limit(1)
    )
    found: str | None = await conn.scalar(query)
    return found
