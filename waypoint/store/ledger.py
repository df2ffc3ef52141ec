"""The tool ledger (`tool_effects`): every tool call's outcome under its idempotency key.

A call whose key is in the ledger has run: a retried attempt reads the recorded outcome
instead of running the tool again. The ledger is what makes a tool run once, so a database
outage must not spend the tool's own attempts: `patiently` rides one out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import literal, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from waypoint.errors import NotFound
from waypoint.names import idempotency_key
from waypoint.store.base import StoreBase, of_tenant, run_filter
from waypoint.store.db import is_outage
from waypoint.store.schema import runs, tool_effects

log = logging.getLogger("waypoint.store")

T = TypeVar("T")


@dataclass(frozen=True)
class Effect:
    """One row of the ledger."""

    idempotency_key: str
    run_id: str
    step: int
    call_index: int
    tool: str
    arguments: str
    output: str
    outcome: str  # a ToolOutcome
    duration_ms: int
    attempt: int


def transient(exc: BaseException) -> bool:
    """A dropped or refused database connection, as opposed to a bug or a constraint."""
    if isinstance(exc, OSError | OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and (exc.connection_invalidated or is_outage(exc))


async def patiently(op: Callable[[], Awaitable[T]], *, patience_seconds: float) -> T:
    """Run a ledger read or write, riding out a database outage of up to `patience_seconds`.
    The caller heartbeats meanwhile, so Temporal knows the attempt is alive."""
    deadline = time.monotonic() + patience_seconds
    delay = 0.2
    while True:
        try:
            return await op()
        except Exception as exc:
            if not transient(exc) or time.monotonic() > deadline:
                raise
            log.warning("tool ledger unavailable (%s): retrying in %.1f s", type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


class Ledger(StoreBase):
    async def recorded_effect(self, tenant_id: str, key: str) -> Effect | None:
        """The ledger row of this call, if the call has run (and the run is the tenant's). One round
        trip, no transaction around it (autocommit: no BEGIN and ROLLBACK): it is on every tool
        call's path, before the tool runs."""
        query = (
            select(tool_effects)
            .join(runs, runs.c.run_id == tool_effects.c.run_id)
            .where(tool_effects.c.idempotency_key == key, of_tenant(tenant_id))
        )
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            row = (await conn.execute(query)).mappings().first()
        return None if row is None else Effect(**{k: row[k] for k in Effect.__dataclass_fields__})

    async def recorded_call(self, tenant_id: str, run_id: str, step: int, call_index: int) -> Effect | None:
        """The ledger row of call `call_index` at `step` of `run_id` (or of the ancestor a fork
        inherited the step from), None when there is none."""
        try:
            owner = await self.owner_of_step(tenant_id, run_id, step)
        except NotFound:
            return None
        return await self.recorded_effect(tenant_id, idempotency_key(owner, step, call_index))

    async def effects(self, tenant_id: str, run_id: str) -> list[Effect]:
        """Every ledger row of a run, by step and call index."""
        query = (
            select(tool_effects)
            .join(runs, runs.c.run_id == tool_effects.c.run_id)
            .where(run_filter(tenant_id, run_id))
            .order_by(tool_effects.c.step, tool_effects.c.call_index)
        )
        async with self.engine.connect() as conn:
            found = (await conn.execute(query)).mappings().all()
        return [Effect(**{k: row[k] for k in Effect.__dataclass_fields__}) for row in found]

    async def record_effect(self, tenant_id: str, effect: Effect) -> None:
        """Write a call's outcome, if the run is the tenant's; a second write of the same key
        changes nothing. One statement, committed on its own (autocommit: no BEGIN and COMMIT
        round trips; a single statement is atomic anyway): it is on every tool call's path."""
        values = effect.__dict__
        columns = list(values)
        row = select(*(literal(values[c], type_=tool_effects.c[c].type).label(c) for c in columns)).where(
            run_filter(tenant_id, effect.run_id)
        )
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(
                insert(tool_effects)
                .from_select(columns, row)
                .on_conflict_do_nothing(index_elements=["idempotency_key"])
            )
