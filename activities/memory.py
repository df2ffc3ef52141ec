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
from typing import Any

from temporalio import activity

from activities.boundary import boundary
from waypoint import telemetry
from waypoint.errors import InvalidInput
from waypoint.memory import Episode, EpisodicStore, Recalled
from waypoint.names import MEMORY_SAVE_TOOL, PIN_TOOL, Activity, EpisodeKind, EventKind, MemoryOp
from waypoint.store import RunStore
from waypoint.store.working import StepEvents
from waypoint.transcript import clip, decision_text, step_account
from waypoint.types import Memory, MemoryAnswer, MemoryRequest, MemoryStepInput, MemoryStepResult

STEP_IMPORTANCE = 0.3
DECISION_IMPORTANCE = 0.8
QUERY_CHARS = 1_500
APPROVAL_INDEX = 1_000  # approvals' episode indexes, apart from tool-call indexes at the same step


def memory_of(hit: Recalled) -> Memory:
    ep = hit.episode
    return Memory(text=ep.text, run_id=ep.run_id, step=ep.step, kind=ep.kind, score=hit.score, importance=ep.importance)


def step_episodes(inp: MemoryStepInput, step: int, rows: StepEvents) -> list[Episode]:
    """The episodes of one step: its account, and each human decision taken in it."""

    def episode(kind: str, text: str, importance: float, index: int = 0) -> Episode:
        return Episode(
            tenant=inp.tenant_id,
            agent=inp.agent,
            run_id=inp.run_id,
            step=step,
            kind=kind,
            text=text,
            importance=importance,
            index=index,
        )

    # Memory tools' results are not steps' news: pin_decision and memory_save store their own.
    own = [
        (k, p) for k, p in rows if not (k == EventKind.TOOL_RESULT and p.get("name") in (PIN_TOOL, MEMORY_SAVE_TOOL))
    ]
    found = [episode(EpisodeKind.STEP, step_account(step, own), STEP_IMPORTANCE)] if own else []
    approvals = [p for k, p in rows if k == EventKind.DECISION]
    for i, d in enumerate(approvals):
        text = f"At step {step}, {decision_text(d)}"
        found.append(episode(EpisodeKind.DECISION, text, DECISION_IMPORTANCE, APPROVAL_INDEX + i))
    return found


class MemoryActivities:
    def __init__(self, store: RunStore, memory: EpisodicStore):
        self.store = store
        self.memory = memory

    async def recall_query(self, inp: MemoryStepInput, step: int, last: StepEvents | None) -> tuple[str, int]:
        """The text to recall by (the task, then the newest step's account) and the first step of
        this run still in the window. `last`: the events of step - 1, when already read."""
        task, window_start = await self.store.recall_basis(inp.tenant_id, inp.run_id, step)
        recent = ""
        if step > 1:
            rows = last if last is not None else await self.store.step_events(inp.tenant_id, inp.run_id, step - 1)
            recent = step_account(step - 1, rows)
        return clip(f"{task}\n{recent}", QUERY_CHARS), window_start

    @activity.defn(name=Activity.MEMORY_STEP)
    @boundary
    async def memory_step(self, inp: MemoryStepInput) -> MemoryStepResult:
        stored = 0
        rows: StepEvents | None = None
        if inp.remember_step is not None:
            rows = await self.store.step_events(inp.tenant_id, inp.run_id, inp.remember_step)
            episodes = step_episodes(inp, inp.remember_step, rows)
            if episodes:
                with telemetry.span(
                    "qdrant upsert", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.remember_step
                ):
                    stored = len(await self.memory.upsert(episodes))
        recalled: list[Memory] = []
        if inp.recall_step is not None and inp.k > 0:
            # The step just remembered is the newest one the query reads: no second read of it.
            last = rows if inp.remember_step == inp.recall_step - 1 else None
            query, window_start = await self.recall_query(inp, inp.recall_step, last)
            began = time.perf_counter()
            with telemetry.span(
                "qdrant search", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.recall_step, tenant=inp.tenant_id
            ):
                hits = await self.memory.search(inp.tenant_id, query, k=inp.k * 2, agent=inp.agent)
            telemetry.record_recall_latency(time.perf_counter() - began, tenant=inp.tenant_id)
            for hit in hits:
                ep = hit.episode
                if ep.run_id == inp.run_id and ep.kind == EpisodeKind.STEP and ep.step >= window_start:
                    continue  # still in the window, verbatim
                recalled.append(memory_of(hit))
            recalled = recalled[: inp.k]
        return MemoryStepResult(stored=stored, recalled=recalled)

    @activity.defn(name=Activity.SAVE_EPISODES)
    @boundary
    async def save_episodes(self, episodes: list[dict[str, Any]]) -> int:
        built = [Episode(**e) for e in episodes]
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
                    memories=[Memory(e.text, e.run_id, e.step, e.kind, importance=e.importance) for e in episodes]
                )
            if req.op == MemoryOp.FORGET and req.run_id:
                return MemoryAnswer(deleted=await self.memory.delete_run(req.tenant_id, req.run_id))
        raise InvalidInput(f"unknown memory request {req.op!r}: use one of {', '.join(MemoryOp)}")
