"""What every part of the store shares: the engine, and tenant scoping in one place.

Every read and every write names the tenant, and `run_filter` is the one condition that ties
a run id to it; a run of another tenant is "not found", never "forbidden", so its existence
does not leak. The store never imports temporalio: attempt numbers and the like come in as
arguments.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waypoint.errors import NotFound
from waypoint.store.rows import RunRow
from waypoint.store.schema import checkpoints, runs


def of_tenant(tenant_id: str) -> ColumnElement[bool]:
    """`runs` rows of this tenant: join `runs` and add this to scope any other table."""
    return runs.c.tenant_id == tenant_id


def run_filter(tenant_id: str | None, run_id: str) -> ColumnElement[bool]:
    """`runs` rows of this run, for this tenant. `tenant_id=None` only for the workflow's own
    writes recorded before writes named their tenant (in-flight runs across an upgrade)."""
    condition = runs.c.run_id == run_id
    return condition if tenant_id is None else condition & of_tenant(tenant_id)


def not_found(tenant_id: str | None, run_id: str) -> NotFound:
    return NotFound(f"no run {run_id!r} for tenant {tenant_id!r}: list runs with `waypoint runs`")


class StoreBase:
    engine: AsyncEngine

    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    async def _run(self, conn: AsyncConnection, tenant_id: str, run_id: str, *, lock: bool = False) -> RunRow:
        """The run's row, or NotFound; `lock` holds its row lock until the transaction ends."""
        query: Any = select(runs).where(run_filter(tenant_id, run_id))
        if lock:
            query = query.with_for_update()
        row = (await conn.execute(query)).mappings().first()
        if row is None:
            raise not_found(tenant_id, run_id)
        return RunRow.of(row)

    async def get_run(self, tenant_id: str, run_id: str) -> RunRow:
        async with self.engine.connect() as conn:
            return await self._run(conn, tenant_id, run_id)

    async def owner_of_step(self, tenant_id: str, run_id: str, step: int) -> str:
        """The run (this one or an ancestor) whose checkpoint holds `step`; checks the range."""
        async with self.engine.connect() as conn:
            run = await self._run(conn, tenant_id, run_id)
            if step > run.steps and not (run.fork_step is not None and step <= run.fork_step):
                raise NotFound(f"run {run_id} has steps 0 to {run.steps}: there is no step {step}")
            while run.fork_step is not None and run.parent_run_id is not None and step < run.fork_step:
                run = await self._run(conn, tenant_id, run.parent_run_id)
        return run.run_id

    async def checkpoint_at(self, tenant_id: str, run_id: str, step: int) -> dict[str, Any]:
        """The stored checkpoint of `step` (segments, not messages), found through the run's ancestors:
        {"run_id": the owner, "step", "at", "state"}."""
        owner = await self.owner_of_step(tenant_id, run_id, step)
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(checkpoints.c.state, checkpoints.c.created_at).where(
                        checkpoints.c.run_id == owner, checkpoints.c.step == step
                    )
                )
            ).first()
        if row is None:
            raise NotFound(f"run {run_id} has no checkpoint for step {step}")
        return {"run_id": owner, "step": step, "at": row.created_at, "state": row.state}
