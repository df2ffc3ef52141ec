"""What `verify --all` reads of the mirror: the tenant's runs since a time, and per run the facts its
Temporal history is checked against (which steps have a checkpoint, a model response, which tool
calls have a result event, what the ledger holds), plus the duplicates no history is needed for.

The comparison with Temporal is the client's (`waypoint.app.invariants`): the store never imports
temporalio.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select

from waypoint.names import EventKind
from waypoint.store.base import StoreBase, of_tenant, run_filter
from waypoint.store.schema import checkpoints, events, runs, tool_effects


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
    cancelled_steps: set[int] = field(default_factory=set)  # steps a cancel stopped in flight (step_cancelled)
    # tool_result events by idempotency key (`run:step:index`): how many
    tool_results: Counter[str] = field(default_factory=Counter)
    ledger_keys: dict[str, int] = field(default_factory=dict)  # this run's ledger rows: key -> step

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

    async def mirror_facts(self, tenant_id: str, run_id: str) -> MirrorFacts | None:
        """The run's facts (None when it is not the tenant's, or gone). One connection, three reads;
        read after its Temporal history, so a step the history shows done and the mirror lacks is
        either still being recorded (no checkpoint yet) or missing."""
        async with self.engine.connect() as conn:
            status = await conn.scalar(select(runs.c.status).where(run_filter(tenant_id, run_id)))
            if status is None:
                return None
            facts = MirrorFacts(status)
            facts.checkpoint_steps = set(
                await conn.scalars(select(checkpoints.c.step).where(checkpoints.c.run_id == run_id))
            )
            kinds = (EventKind.MODEL_RESPONSE, EventKind.TOOL_RESULT, EventKind.STEP_CANCELLED)
            rows = await conn.execute(
                select(
                    events.c.kind,
                    events.c.step,
                    events.c.payload["idempotency_key"].astext.label("key"),
                    events.c.payload["step"].astext.label("cancelled_step"),
                ).where(events.c.run_id == run_id, events.c.kind.in_(kinds))
            )
            for e in rows:
                if e.kind == EventKind.MODEL_RESPONSE:
                    facts.model_steps.add(e.step)
                elif e.kind == EventKind.TOOL_RESULT:
                    facts.tool_results[e.key or f"{run_id}:{e.step}:?"] += 1
                elif e.cancelled_step is not None and e.cancelled_step.isdigit():
                    facts.cancelled_steps.add(int(e.cancelled_step))
            ledger = await conn.execute(
                select(tool_effects.c.idempotency_key, tool_effects.c.step).where(tool_effects.c.run_id == run_id)
            )
            facts.ledger_keys = {r.idempotency_key: r.step for r in ledger}
        return facts
