"""What a step reads of its run: the parts of the next model call's working memory, and what
episodic memory needs (a step's events, the recall query's basis). Tenant-scoped, one or two
queries each: these are on every step's hot path."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from waypoint.errors import NotFound
from waypoint.names import TURN_KINDS
from waypoint.store import context
from waypoint.store.base import StoreBase, not_found, run_filter
from waypoint.store.compactions import latest_compaction
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, resolved
from waypoint.store.schema import checkpoints, events, runs
from waypoint.working_memory import Parts

StepEvents = list[tuple[str, dict[str, Any]]]  # (kind, payload) in log order


class WorkingReads(StoreBase):
    async def working_parts(self, tenant_id: str, run_id: str, step: int) -> Parts:
        """The parts of step `step`'s working memory that the run's log holds (see
        `waypoint.working_memory`): the checkpoint of `step - 1`'s window and pinned decisions,
        rendered from the events they reference, and the run's latest compaction summary in place
        of the turns it covers. The caller adds the recalled episodes and the new user messages."""
        async with self.engine.connect() as conn:
            state = await conn.scalar(
                select(checkpoints.c.state)
                .join(runs, runs.c.run_id == checkpoints.c.run_id)
                .where(checkpoints.c.step == step - 1, run_filter(tenant_id, run_id))
            )
            if state is None:
                await self._run(conn, tenant_id, run_id)  # an unknown run is "not found" first
                raise NotFound(f"run {run_id} has no checkpoint for step {step - 1}")
            segments = state["segments"]
            groups, pinned = await context.render_parts(conn, segments, state.get("pinned", []))
            compaction = await latest_compaction(conn, run_id)
        turns = list(zip(segments[1:], groups[1:], strict=True))
        if compaction is not None:  # the summary stands for the turns it covers
            turns = [(seg, g) for seg, g in turns if seg[0] != run_id or seg[2] > compaction["last_seq"]]
        return Parts(
            head=groups[0] if groups else [],
            pinned=pinned,
            summary=compaction["summary"] if compaction else None,
            turns=[g for _, g in turns],
        )

    async def step_events(self, tenant_id: str, run_id: str, step: int) -> StepEvents:
        """The turn events of one step (user messages, decisions, the answer, tool results)."""
        query = (
            select(events.c.kind, events.c.payload, LEDGER_OUTPUT)
            .select_from(EVENTS_WITH_OUTPUTS)
            .join(runs, runs.c.run_id == events.c.run_id)
            .where(
                run_filter(tenant_id, run_id),
                events.c.step == step,
                events.c.kind.in_(TURN_KINDS),
            )
            .order_by(events.c.seq)
        )
        async with self.engine.connect() as conn:
            return [(r.kind, resolved(r.payload, r.ledger_output)) for r in await conn.execute(query)]

    async def recall_basis(self, tenant_id: str, run_id: str, step: int) -> tuple[str, int]:
        """(the run's task, the first step of this run still in the window before `step`): episodes
        of steps still in the window would only repeat what the model sees."""
        async with self.engine.connect() as conn:
            found = (
                await conn.execute(
                    select(
                        runs.c.task,
                        select(checkpoints.c.state)
                        .where(checkpoints.c.run_id == runs.c.run_id, checkpoints.c.step == step - 1)
                        .scalar_subquery()
                        .label("state"),
                    ).where(run_filter(tenant_id, run_id))
                )
            ).first()
        if found is None:
            raise not_found(tenant_id, run_id)
        window = len(found.state["segments"]) - 1 if found.state else 0
        return found.task, step - window
