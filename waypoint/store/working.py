"""What a step reads of its run: the parts of the next model call's working memory, and what
episodic memory needs (a step's events, the recall query's basis). Tenant-scoped, one or two
queries each: these are on every step's hot path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import literal, or_, select, true, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import NotFound
from waypoint.names import FINISHED, TURN_KINDS, EventKind
from waypoint.store import context
from waypoint.store.base import StoreBase, not_found, run_filter
from waypoint.store.hashing import text_digest
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, resolved
from waypoint.store.schema import checkpoints, compactions, events, recalled_texts, runs
from waypoint.working_memory import HeldRecall, Parts, held_recall

StepEvents = list[tuple[str, dict[str, Any]]]  # (kind, payload) in log order

# Steps whose episodes one model call stores at most (after an outage, the next calls catch up).
CATCH_UP_STEPS = 20
# A model call stores the episodes of the steps not stored yet once there are this many of them (or one of
# them has left the window, where the run's own recall no longer sees it): one upsert per batch of steps
# instead of one per step. Nothing waits on Qdrant meanwhile and nothing is lost: which steps are stored
# is the runs row's `remembered_step`, so the next call, the run's end or the compaction pass stores the rest.
EPISODE_BATCH_STEPS = 8


# The checkpoint a step starts from, its run's row and the run's newest compaction: one round trip.
_NEWEST_COMPACTION = (
    select(compactions.c.id, compactions.c.last_seq, compactions.c.summary)
    .where(compactions.c.run_id == runs.c.run_id)
    .order_by(compactions.c.last_seq.desc(), compactions.c.id.desc())
    .limit(1)
    .lateral("newest_compaction")
)
_CHECKPOINT_READ = select(
    checkpoints.c.state,
    runs.c.task,
    runs.c.remembered_step,
    runs.c.root_run_id,
    _NEWEST_COMPACTION.c.id.label("compaction_id"),
    _NEWEST_COMPACTION.c.last_seq.label("compacted_seq"),
    _NEWEST_COMPACTION.c.summary,
).select_from(checkpoints.join(runs, runs.c.run_id == checkpoints.c.run_id).outerjoin(_NEWEST_COMPACTION, true()))


@dataclass(frozen=True)
class ForkLink:
    """One run of a run's chain of parents, as recall needs it (`WorkingReads.fork_chain`)."""

    run_id: str
    fork_step: int | None  # the parent's step it started from (None: a run of its own)
    memory: str | None  # the MemoryView it was started with (None: a run of its own, or from before)
    fork_at: float | None  # when the parent's checkpoint of that step was written (epoch seconds)
    root_run_id: str | None = None  # the root of its tree of sub-agent runs (itself without a caller)


@dataclass
class ModelContext:
    """What a model call reads of its run, in one connection: its working memory's parts, the
    compaction they used, and (with memory) the task, the steps whose episodes are not stored yet
    and the first step still in the window."""

    parts: Parts
    compaction_id: int | None
    task: str = ""
    remembered_step: int = 0
    window_start: int = 0
    pending: dict[int, StepEvents] = field(default_factory=dict)  # steps not stored yet, oldest first
    last: StepEvents = field(default_factory=list)  # the events of the newest step (step - 1)
    root_run_id: str | None = None  # the root of the run's tree of sub-agent runs, its episodes' tree
    held: HeldRecall | None = None  # the episodes the previous step's call received, which this one may keep
    # Steps not stored yet whose events were not read (their batch is not due): first..through
    deferred: tuple[int, int] | None = None
    kept_recalled: str | None = None  # the SHA-256 of the recalled-memory message the newest step's call kept


async def read_parts(
    conn: AsyncConnection, run_id: str, state: dict[str, Any], compaction: dict[str, Any] | None
) -> Parts:
    """Working memory's parts from a checkpoint's state: its window and pins rendered from the events
    they reference, and `compaction`'s summary in place of the turns it covers."""
    segments = state["segments"]
    groups, pinned = await context.render_parts(conn, segments, state.get("pinned", []))
    turns = list(zip(segments[1:], groups[1:], strict=True))
    if compaction is not None:  # the summary stands for the turns it covers
        turns = [(seg, g) for seg, g in turns if seg[0] != run_id or seg[2] > compaction["last_seq"]]
    return Parts(
        head=groups[0] if groups else [],
        pinned=pinned,
        summary=compaction["summary"] if compaction else None,
        turns=[g for _, g in turns],
    )


async def recalled_text(conn: AsyncConnection, run_id: str, sha256: str) -> str | None:
    """The recalled-memory message a call of `run_id` received, by its hash (None: not kept)."""
    query = select(recalled_texts.c.text).where(recalled_texts.c.run_id == run_id, recalled_texts.c.sha256 == sha256)
    return await conn.scalar(query)


def previous_recall(last: StepEvents, text: str | None) -> HeldRecall | None:
    """The recalled episodes the model call of the newest step received (`last`: its events; `text`:
    the recalled-memory message its last model response names), as the next call may hold them;
    None when it recorded none it could hold."""
    request = next((p.get("request") for k, p in reversed(last) if k == EventKind.MODEL_RESPONSE), None)
    if not request or not request.get("window_key"):
        return None
    return held_recall(request, text if request.get("recalled_sha256") else None)


# The recalled-memory message a model response's call received, beside its event (NULL for the rest).
_RECALLED = recalled_texts.c.text.label("recalled")
_EVENTS_WITH_RECALLED = EVENTS_WITH_OUTPUTS.outerjoin(
    recalled_texts,
    (recalled_texts.c.run_id == events.c.run_id)
    & (recalled_texts.c.sha256 == events.c.payload["request"]["recalled_sha256"].astext),
)


async def _step_events(
    conn: AsyncConnection, run_id: str, spans: list[tuple[int, int]], newest: int | None
) -> tuple[dict[int, StepEvents], str | None]:
    """The turn events of the steps in `spans` (first, through), per step in log order, and the
    recalled-memory message the model call of step `newest` received. Step ranges, not a list of steps:
    one statement's shape whatever the batch, whose plan reads the events and the ledger by their keys."""
    merged: list[tuple[int, int]] = []
    for first, through in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], through))
        else:
            merged.append((first, through))
    rows = await conn.execute(
        select(events.c.step, events.c.kind, events.c.payload, LEDGER_OUTPUT, _RECALLED)
        .select_from(_EVENTS_WITH_RECALLED)
        .where(
            events.c.run_id == run_id,
            or_(*(events.c.step.between(a, b) for a, b in merged)),
            events.c.kind.in_(TURN_KINDS),
        )
        .order_by(events.c.seq)
    )
    read: dict[int, StepEvents] = {}
    recalled = None  # what the newest step's (last) model call was given
    for r in rows:
        read.setdefault(r.step, []).append((r.kind, resolved(r.payload, r.ledger_output)))
        if r.step == newest and r.kind == EventKind.MODEL_RESPONSE:
            recalled = r.recalled
    return read, recalled


class WorkingReads(StoreBase):
    async def keep_recalled_text(self, tenant_id: str, run_id: str, text: str) -> str:
        """Keep the recalled-memory message a model call of the run received, once per text (a retry
        or a replay writes nothing twice); returns its SHA-256, which the step's record carries."""
        digest = text_digest(text)
        source = select(runs.c.run_id, literal(digest), literal(text)).where(run_filter(tenant_id, run_id))
        statement = (
            insert(recalled_texts)
            .from_select(["run_id", "sha256", "text"], source)
            .on_conflict_do_nothing(index_elements=["run_id", "sha256"])
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)
        return digest

    async def model_context(
        self, tenant_id: str, run_id: str, step: int, *, memory: bool, batch: int = 1
    ) -> ModelContext:
        """Everything `call_model` reads for step `step`; `memory`: also what episodic memory needs.
        `batch`: the steps not stored yet are read (`pending`) only once there are `batch` of them or
        the oldest has left the window; before that they are only named (`deferred`)."""
        async with self.engine.connect() as conn:
            found = (
                await conn.execute(
                    _CHECKPOINT_READ.where(checkpoints.c.step == step - 1, run_filter(tenant_id, run_id))
                )
            ).first()
            if found is None:
                await self._run(conn, tenant_id, run_id)  # an unknown run is "not found" first
                raise NotFound(f"run {run_id} has no checkpoint for step {step - 1}")
            compaction = None
            if found.compaction_id is not None:
                compaction = {"id": found.compaction_id, "last_seq": found.compacted_seq, "summary": found.summary}
            parts = await read_parts(conn, run_id, found.state, compaction)
            compaction_id = compaction["id"] if compaction else None
            context = ModelContext(parts, compaction_id, found.task, found.remembered_step)
            context.root_run_id = found.root_run_id
            context.window_start = step - (len(found.state["segments"]) - 1)
            # The oldest steps not stored first (so what is marked stored never has a gap), and the
            # newest step, which the recall query reads.
            first, last = found.remembered_step + 1, min(step - 1, found.remembered_step + CATCH_UP_STEPS)
            due = last - first + 1 >= batch or first < context.window_start
            if memory and first <= last and not due:
                context.deferred = (first, last)
            storing = range(first, last + 1) if due else range(0)
            if memory and step > 1:
                spans = [(step - 1, step - 1), *([(first, last)] if storing else [])]
                read, recalled = await _step_events(conn, run_id, spans, step - 1)
                context.pending = {n: read.get(n, []) for n in storing}
                context.last = read.get(step - 1, [])
                context.held = previous_recall(context.last, recalled)
                context.kept_recalled = text_digest(recalled) if recalled is not None else None
        return context

    async def deferred_steps(self, run_id: str, first: int, through: int) -> dict[int, StepEvents]:
        """The events of the steps `first`..`through` (a model context's `deferred`), to store them now."""
        async with self.engine.connect() as conn:
            read, _ = await _step_events(conn, run_id, [(first, through)], None)
        return {n: read.get(n, []) for n in range(first, through + 1)}

    async def fork_chain(self, tenant_id: str, run_id: str) -> list[ForkLink]:
        """The run, then its parent, the parent's parent... (what recall needs of its lineage: see
        `waypoint.memory.steps.recall_scope`). Two queries, whatever the chain's length."""
        parent = runs.alias("parent")
        chain = (
            select(runs.c.run_id, runs.c.parent_run_id, runs.c.fork_step, runs.c.root_run_id, literal(0).label("depth"))
            .where(run_filter(tenant_id, run_id))
            .cte("chain", recursive=True)
        )
        chain = chain.union_all(
            select(
                parent.c.run_id, parent.c.parent_run_id, parent.c.fork_step, parent.c.root_run_id, chain.c.depth + 1
            ).where(parent.c.run_id == chain.c.parent_run_id, parent.c.tenant_id == tenant_id)
        )
        memory = (
            select(events.c.payload["fork"]["memory"].astext)
            .where(events.c.run_id == chain.c.run_id, events.c.kind == EventKind.RUN_STARTED)
            .order_by(events.c.seq)
            .limit(1)
            .scalar_subquery()
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(chain, memory.label("memory")).order_by(chain.c.depth))).all()
            if not rows:
                raise not_found(tenant_id, run_id)
            # When each fork point's checkpoint was written; a fork may start from a step its parent
            # inherited, whose checkpoint is an older ancestor's: the nearest one above holds it.
            ids = [r.run_id for r in rows]
            steps = {r.fork_step for r in rows if r.fork_step is not None}
            written = {
                (c.run_id, c.step): c.created_at.timestamp()
                for c in await conn.execute(
                    select(checkpoints.c.run_id, checkpoints.c.step, checkpoints.c.created_at).where(
                        checkpoints.c.run_id.in_(ids), checkpoints.c.step.in_(steps)
                    )
                )
            }
        links = []
        for i, r in enumerate(rows):
            above = (written.get((a, r.fork_step)) for a in ids[i + 1 :])
            fork_at = next((t for t in above if t is not None), None) if r.fork_step is not None else None
            links.append(ForkLink(r.run_id, r.fork_step, r.memory, fork_at, r.root_run_id))
        return links

    async def tree_roots(self, tenant_id: str, run_ids: list[str]) -> dict[str, str]:
        """The root of each run's tree of sub-agent runs (runs of other tenants, or unknown, left out)."""
        query = select(runs.c.run_id, runs.c.root_run_id).where(
            runs.c.tenant_id == tenant_id, runs.c.run_id.in_(run_ids), runs.c.root_run_id.is_not(None)
        )
        async with self.engine.connect() as conn:
            return {r.run_id: r.root_run_id for r in await conn.execute(query)}

    async def runs_to_remember(self, tenant_id: str | None, limit: int) -> list[tuple[str, str, str, int]]:
        """Finished runs with steps whose episodes are not stored, as (run_id, tenant_id, agent, steps);
        `tenant_id=None`: every tenant's. Running runs store theirs with their next step."""
        query = (
            select(runs.c.run_id, runs.c.tenant_id, runs.c.agent, runs.c.steps)
            .where(runs.c.remembered_step < runs.c.steps, runs.c.status.in_(list(FINISHED)))
            .order_by(runs.c.updated_at)
            .limit(limit)
        )
        if tenant_id is not None:
            query = query.where(runs.c.tenant_id == tenant_id)
        async with self.engine.connect() as conn:
            return [(r.run_id, r.tenant_id, r.agent, r.steps) for r in await conn.execute(query)]

    async def mark_remembered(self, tenant_id: str, run_id: str, step: int) -> None:
        """Episodes of every step up to `step` are stored."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(runs)
                .where(run_filter(tenant_id, run_id), runs.c.remembered_step < step)
                .values(remembered_step=step)
            )

    async def working_parts(self, tenant_id: str, run_id: str, step: int) -> Parts:
        """The parts of step `step`'s working memory that the run's log holds (see
        `waypoint.working_memory`): the checkpoint of `step - 1`'s window and pinned decisions,
        rendered from the events they reference, and the run's latest compaction summary in place
        of the turns it covers. The caller adds the recalled episodes and the new user messages."""
        return (await self.model_context(tenant_id, run_id, step, memory=False)).parts

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
