"""Episodic-memory activities. They run on the memory worker's task queue (`<task_queue>-memory`),
served by the one process that owns the store: in the embedded stack an edge shard can be
opened by one process only, so everything else (other workers, the CLI) reaches memory
through Temporal.

- `memory_step`: store what the last step did, then recall episodes for the next model call;
- `save_episodes`: store episodes built elsewhere (compaction summaries);
- `memory_admin`: search, show or forget, for `waypoint memory ...`.

Episode ids come from (run, step, kind, index), so a retried activity rewrites the same points.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint import telemetry
from waypoint.compaction_types import SAVE_EPISODES
from waypoint.memory import Episode, EpisodicStore
from waypoint.store.context import PIN_TOOL
from waypoint.store.schema import checkpoints, events
from waypoint.types import MEMORY_ADMIN, MEMORY_STEP, Memory, MemoryRequest, MemoryStepInput, MemoryStepResult

STEP_IMPORTANCE = 0.3
DECISION_IMPORTANCE = 0.8
EPISODE_CHARS = 600  # an episode is a short account of a step, not its transcript
QUERY_CHARS = 1_500
APPROVAL_INDEX = 1_000  # approvals' episode indexes, apart from tool-call indexes at the same step


def _clip(text: str | None, limit: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_account(step: int, rows: list[tuple[str, dict[str, Any]]]) -> str:
    """What a step did and what came of it, in a few hundred characters, with its references."""
    calls: dict[str, str] = {}
    parts: list[str] = []
    for kind, payload in rows:
        if kind == "user_message":
            parts.append(f"user said: {_clip(payload['content'], 150)}")
        elif kind == "model_response":
            for call in payload.get("tool_calls", []):
                calls[call["id"]] = f"{call['name']}({_clip(call['arguments'], 100)})"
            if payload.get("content"):
                parts.append(f"answered: {_clip(payload['content'], 250)}")
        elif kind == "tool_result":
            called = calls.get(payload["call_id"], payload.get("name", "tool"))
            parts.append(f"{called} -> {_clip(payload.get('output'), 200)}")
    return _clip(f"Step {step}: " + "; ".join(parts), EPISODE_CHARS)


def render_memories(hits: list[Memory]) -> list[dict[str, Any]]:
    return [
        {"run_id": m.run_id, "step": m.step, "kind": m.kind, "score": round(m.score, 4), "text": m.text} for m in hits
    ]


class MemoryActivities:
    def __init__(self, engine: AsyncEngine, store: EpisodicStore):
        self.engine = engine
        self.store = store

    async def step_rows(self, run_id: str, step: int) -> list[tuple[str, dict[str, Any]]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(events.c.kind, events.c.payload)
                .where(
                    events.c.run_id == run_id,
                    events.c.step == step,
                    events.c.kind.in_(("user_message", "model_response", "tool_result", "decision")),
                )
                .order_by(events.c.seq)
            )
            return [(r.kind, r.payload) for r in rows]

    def step_episodes(self, inp: MemoryStepInput, step: int, rows: list[tuple[str, dict[str, Any]]]) -> list[Episode]:
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
        own = [(k, p) for k, p in rows if not (k == "tool_result" and p.get("name") in (PIN_TOOL, "memory_save"))]
        found = [episode("step", step_account(step, own), STEP_IMPORTANCE)] if own else []
        approvals = [p for k, p in rows if k == "decision"]
        for i, d in enumerate(approvals):
            why = f": {d['reason']}" if d.get("reason") else ""
            text = f"A human {d['decision']} tool call {d['call_id']} at step {step}{why}"
            found.append(episode("decision", text, DECISION_IMPORTANCE, APPROVAL_INDEX + i))
        return found

    async def recall_query(
        self, run_id: str, step: int, last_rows: list[tuple[str, dict[str, Any]]] | None = None
    ) -> tuple[str, int]:
        """The text to recall by (the task, then the newest step's account) and the first step of
        this run still in the window, whose episodes would only repeat what the model sees.
        `last_rows`: the events of step - 1, when the caller has read them already."""
        async with self.engine.connect() as conn:
            task = await conn.scalar(
                select(events.c.payload["task"].astext).where(events.c.run_id == run_id, events.c.kind == "run_started")
            )
            state = await conn.scalar(
                select(checkpoints.c.state).where(checkpoints.c.run_id == run_id, checkpoints.c.step == step - 1)
            )
        window = len(state["segments"]) - 1 if state else 0
        recent = ""
        if step > 1:
            rows = last_rows if last_rows is not None else await self.step_rows(run_id, step - 1)
            recent = step_account(step - 1, rows)
        return _clip(f"{task or ''}\n{recent}", QUERY_CHARS), step - window

    @activity.defn(name=MEMORY_STEP)
    async def memory_step(self, inp: MemoryStepInput) -> MemoryStepResult:
        stored = 0
        rows: list[tuple[str, dict[str, Any]]] | None = None
        if inp.remember_step is not None:
            rows = await self.step_rows(inp.run_id, inp.remember_step)
            episodes = self.step_episodes(inp, inp.remember_step, rows)
            if episodes:
                with telemetry.span(
                    "qdrant upsert", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.remember_step
                ):
                    stored = len(await self.store.upsert(episodes))
        recalled: list[Memory] = []
        if inp.recall_step is not None and inp.k > 0:
            # The step just remembered is the newest one the query reads: no second read of it.
            last_rows = rows if inp.remember_step == inp.recall_step - 1 else None
            query, window_start = await self.recall_query(inp.run_id, inp.recall_step, last_rows)
            began = time.perf_counter()
            with telemetry.span(
                "qdrant search", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.recall_step, tenant=inp.tenant_id
            ):
                hits = await self.store.search(inp.tenant_id, query, k=inp.k * 2, agent=inp.agent)
            telemetry.record_recall_latency(time.perf_counter() - began, tenant=inp.tenant_id)
            for hit in hits:
                ep = hit.episode
                if ep.run_id == inp.run_id and ep.kind == "step" and ep.step >= window_start:
                    continue  # still in the window, verbatim
                recalled.append(Memory(text=ep.text, run_id=ep.run_id, step=ep.step, kind=ep.kind, score=hit.score))
            recalled = recalled[: inp.k]
        return MemoryStepResult(stored=stored, recalled=recalled)

    @activity.defn(name=SAVE_EPISODES)
    async def save_episodes(self, episodes: list[dict[str, Any]]) -> int:
        built = [Episode(**e) for e in episodes]
        with telemetry.span("qdrant upsert", {"db.system": "qdrant"}):
            return len(await self.store.upsert(built))

    @activity.defn(name=MEMORY_ADMIN)
    async def memory_admin(self, req: MemoryRequest) -> str:
        """JSON text, so the answer's shape can grow without a new activity."""
        with telemetry.span(f"qdrant {req.op}", {"db.system": "qdrant"}, tenant=req.tenant_id, run_id=req.run_id):
            if req.op == "search":
                hits = await self.store.search(req.tenant_id, req.query, k=req.k, agent=req.agent, run_id=req.run_id)
                found = [
                    Memory(
                        text=h.episode.text,
                        run_id=h.episode.run_id,
                        step=h.episode.step,
                        kind=h.episode.kind,
                        score=h.score,
                    )
                    for h in hits
                ]
                return json.dumps(render_memories(found))
            if req.op == "show" and req.run_id:
                episodes = await self.store.list_run(req.tenant_id, req.run_id)
                return json.dumps(
                    [{"step": e.step, "kind": e.kind, "importance": e.importance, "text": e.text} for e in episodes]
                )
            if req.op == "forget" and req.run_id:
                return json.dumps({"deleted": await self.store.delete_run(req.tenant_id, req.run_id)})
        raise ApplicationError(f"unknown memory request {req.op!r}", non_retryable=True)
