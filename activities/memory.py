"""Episodic-memory activities. They run on the memory worker's task queue (`<task_queue>-memory`),
served by the one process that owns the store: in the embedded stack an edge shard can be
opened by one process only, so everything else (other workers, the CLI) reaches memory
through Temporal.

- `memory_step`: store what the last step did, then recall episodes for the next model call;
- `save_episodes`: store episodes built elsewhere (compaction summaries);
- `memory_admin`: search, show or forget, for `waypoint memory ...` and the API.

Episode ids come from (run, step, kind, index), so a retried activity rewrites the same points.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from temporalio import activity

from waypoint import telemetry
from waypoint.activities.boundary import boundary
from waypoint.compaction_types import RememberInput
from waypoint.errors import InvalidInput
from waypoint.memory import Episode, EpisodicStore
from waypoint.memory.steps import (
    memory_of,
    pending_episodes,
    recall_query,
    recall_scope,
    recall_search,
    recalled_memories,
)
from waypoint.names import Activity, MemoryOp
from waypoint.store import RunStore
from waypoint.types import Memory, MemoryAnswer, MemoryRequest, MemoryStepInput, MemoryStepResult


class MemoryActivities:
    def __init__(self, store: RunStore, memory: EpisodicStore):
        self.store = store
        self.memory = memory

    @activity.defn(name=Activity.MEMORY_STEP)
    @boundary
    async def memory_step(self, inp: MemoryStepInput) -> MemoryStepResult:
        """Store the episodes of every step up to `remember_step` not stored yet (a run's last step,
        when it ends; every step, in histories from before the model call did this), then recall for
        `recall_step` (those histories only)."""
        stored = 0
        step = inp.remember_step if inp.remember_step is not None else (inp.recall_step or 1) - 1
        context = await self.store.working.model_context(inp.tenant_id, inp.run_id, step + 1, memory=True)
        if inp.remember_step is not None and context.pending:
            episodes = pending_episodes(inp.tenant_id, inp.agent, inp.run_id, context.pending, context.root_run_id)
            if episodes:
                with telemetry.span("qdrant upsert", {"db.system": "qdrant"}, run_id=inp.run_id, step=step):
                    stored = len(await self.memory.upsert(episodes))
            await self.store.working.mark_remembered(inp.tenant_id, inp.run_id, max(context.pending))
        recalled: list[Memory] = []
        if inp.recall_step is not None and inp.k > 0:
            last = inp.recall_step - 1
            query = recall_query(context.task, last, context.last)
            scope = recall_scope(await self.store.working.fork_chain(inp.tenant_id, inp.run_id))
            began = time.perf_counter()
            with telemetry.span(
                "qdrant search", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.recall_step, tenant=inp.tenant_id
            ):
                hits = await recall_search(self.memory, inp.tenant_id, query, inp.k * 2, inp.agent, scope)
            telemetry.record_recall_latency(time.perf_counter() - began, tenant=inp.tenant_id)
            recalled = recalled_memories(hits, scope, context.window_start, inp.k)
        return MemoryStepResult(stored=stored, recalled=recalled)

    @activity.defn(name=Activity.REMEMBER_MISSING)
    @boundary
    async def remember_missing(self, inp: RememberInput) -> int:
        """Store the episodes memory missed of finished runs (a step whose episodes could not be written
        is never lost: the run's next step, or this, writes it later). Returns how many steps."""
        done = 0
        for run_id, tenant_id, agent, steps in await self.store.working.runs_to_remember(inp.tenant_id, inp.limit):
            while True:
                activity.heartbeat(run_id)
                context = await self.store.working.model_context(tenant_id, run_id, steps + 1, memory=True)
                if not context.pending:
                    break
                episodes = pending_episodes(tenant_id, agent, run_id, context.pending, context.root_run_id)
                if episodes:
                    await self.memory.upsert(episodes)
                await self.store.working.mark_remembered(tenant_id, run_id, max(context.pending))
                done += len(context.pending)
        return done

    @activity.defn(name=Activity.SAVE_EPISODES)
    @boundary
    async def save_episodes(self, episodes: list[dict[str, Any]]) -> int:
        built = [Episode(**e) for e in episodes]
        # Compaction summaries come without their tree: the runs' rows know it.
        roots: dict[str, str] = {}
        for tenant in {e.tenant for e in built if e.root_run_id is None}:
            unknown = sorted({e.run_id for e in built if e.tenant == tenant and e.root_run_id is None})
            roots.update(await self.store.working.tree_roots(tenant, unknown))
        built = [replace(e, root_run_id=roots[e.run_id]) if e.run_id in roots else e for e in built]
        with telemetry.span("qdrant upsert", {"db.system": "qdrant"}):
            return len(await self.memory.upsert(built))

    @activity.defn(name=Activity.MEMORY_ADMIN)
    @boundary
    async def memory_admin(self, req: MemoryRequest) -> MemoryAnswer:
        with telemetry.span(f"qdrant {req.op}", {"db.system": "qdrant"}, tenant=req.tenant_id, run_id=req.run_id):
            if req.op == MemoryOp.SEARCH:
                hits = await self.memory.search(req.tenant_id, req.query, k=req.k, agent=req.agent, run_id=req.run_id)
                return MemoryAnswer(memories=[memory_of(h) for h in hits])
            if req.op == MemoryOp.SHOW and req.run_id:
                episodes = await self.memory.list_run(req.tenant_id, req.run_id)
                return MemoryAnswer(
                    memories=[
                        Memory(
                            e.text,
                            e.run_id,
                            e.step,
                            e.kind,
                            importance=e.importance,
                            stored_at=e.first_at or e.created_at,
                            updated_at=e.created_at,
                        )
                        for e in episodes
                    ]
                )
            if req.op == MemoryOp.FORGET and req.run_id:
                return MemoryAnswer(deleted=await self.memory.delete_run(req.tenant_id, req.run_id))
        raise InvalidInput(f"unknown memory request {req.op!r}: use one of {', '.join(MemoryOp)}")
