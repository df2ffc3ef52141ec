"""What `verify --all` reads of the mirror: the tenant's runs since a time, and per run the facts its
Temporal history is checked against (which steps have a checkpoint, a model response, which tool
calls have a result event, what the ledger holds), plus the duplicates no history is needed for.

The comparison with Temporal is the client's (`waypoint.gateway.invariants`): the store never imports
temporalio.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select

from waypoint.names import EventKind
from waypoint.store.base import StoreBase, of_tenant, run_filter
from waypoint.store.integrity import ChainCheck, call_problems, checkpoints_of, events_of
from waypoint.store.rows import RunRow
from waypoint.store.schema import runs, tool_effects


@dataclass(frozen=True)
class RunHead:
    """The columns of a run `verify --all` needs to pick and check it."""

    run_id: str
    status: str  # a RunStatus
    created_at: datetime


@dataclass
class MirrorFacts:
    """What Postgres holds of one run, as its Temporal history is compared with it."""

    status: str
    checkpoint_steps: set[int] = field(default_factory=set)
    model_steps: set[int] = field(default_factory=set)  # steps with a model_response event
    # steps a cancel stopped before their record (step_cancelled, not `recorded`): their model call was cancelled
    cancelled_steps: set[int] = field(default_factory=set)
    # tool_result events by idempotency key (`run:step:index`): how many
    tool_results: Counter[str] = field(default_factory=Counter)
    ledger_keys: dict[str, int] = field(default_factory=dict)  # this run's ledger rows: key -> step
    problems: list[str] = field(default_factory=list)  # what `verify` of the run alone finds

    @property
    def recorded_through(self) -> int:
        """The newest step with a checkpoint (-1 for none)."""
        return max(self.checkpoint_steps, default=-1)


class Invariants(StoreBase):
    async def runs_since(self, tenant_id: str, since: datetime | None, limit: int | None = None) -> list[RunHead]:
        """The tenant's runs created at or after `since` (all of them without), oldest first."""
        query = select(runs.c.run_id, runs.c.status, runs.c.created_at).where(of_tenant(tenant_id))
        if since is not None:
            query = query.where(runs.c.created_at >= since)
        query = query.order_by(runs.c.created_at, runs.c.run_id)
        if limit is not None:
            query = query.limit(limit)
        async with self.engine.connect() as conn:
            found = (await conn.execute(query)).all()
        return [RunHead(r.run_id, r.status, r.created_at) for r in found]

    async def run_status(self, tenant_id: str, run_id: str) -> str | None:
        """The run's status now (None once its row is gone)."""
        async with self.engine.connect() as conn:
            status: str | None = await conn.scalar(select(runs.c.status).where(run_filter(tenant_id, run_id)))
        return status

    async def mirror_facts(self, tenant_id: str, run_ids: Sequence[str]) -> dict[str, MirrorFacts]:
        """The facts of each of the runs that is the tenant's (a run gone is left out), with `problems`:
        what `verify` finds of it alone (chain, checkpoints, its own sub-agent calls). A few reads for
        the whole batch, each streamed in run order; read after the runs' Temporal histories, so a
        step a history shows done and the mirror lacks is either being recorded now (no checkpoint
        yet) or missing."""
        found: dict[str, MirrorFacts] = {}
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(runs).where(of_tenant(tenant_id), runs.c.run_id.in_(run_ids)))).mappings()
            heads = {r["run_id"]: RunRow.of(r) for r in rows}
            ids = list(heads)
            if not ids:
                return found
            checks = {i: ChainCheck(i, heads[i].fork_step) for i in ids}
            found = {i: MirrorFacts(heads[i].status) for i in ids}
            with_agents: list[str] = []
            async for e in await conn.stream(events_of(*ids)):
                facts, check = found[e.run_id], checks[e.run_id]
                if not check.full:
                    check.event(e)
                if e.kind == EventKind.MODEL_RESPONSE:
                    facts.model_steps.add(e.step)
                elif e.kind == EventKind.TOOL_RESULT:
                    facts.tool_results[e.payload.get("idempotency_key") or f"{e.run_id}:{e.step}:?"] += 1
                elif (
                    e.kind == EventKind.STEP_CANCELLED
                    and isinstance(e.payload.get("step"), int)
                    and not e.payload.get("recorded")  # a step recorded as it ended is checked like any
                ):
                    facts.cancelled_steps.add(e.payload["step"])
                elif e.kind == EventKind.RUN_STARTED and (e.payload.get("plan") or {}).get("agents"):
                    with_agents.append(e.run_id)
            async for c in await conn.stream(checkpoints_of(*ids)):
                found[c.run_id].checkpoint_steps.add(c.step)
                if not checks[c.run_id].full:
                    checks[c.run_id].checkpoint(c)
            ledger = await conn.execute(
                select(tool_effects.c.run_id, tool_effects.c.idempotency_key, tool_effects.c.step).where(
                    tool_effects.c.run_id.in_(ids)
                )
            )
            for r in ledger:
                found[r.run_id].ledger_keys[r.idempotency_key] = r.step
            for i in with_agents:  # only runs whose plan has sub-agents make such calls
                checks[i].verdict.problems += await call_problems(conn, tenant_id, heads[i])
        for i, facts in found.items():
            facts.problems = checks[i].verdict.problems
        return found
