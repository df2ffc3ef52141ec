"""Writes to the Postgres mirror: run rows, the append-only event log, one checkpoint per step.

Every write here is idempotent under activity retry: the step number comes
from the workflow, and a second `record_step` for a step that already has a
checkpoint changes nothing.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from waypoint import telemetry
from waypoint.agents import AgentRegistry
from waypoint.errors import NotFound, WaypointError
from waypoint.models import Message
from waypoint.store import context, travel
from waypoint.store.context import Segment
from waypoint.store.hashing import chained_event, hashed_json, state_hash
from waypoint.store.reads import run_result
from waypoint.store.schema import STATE_SCHEMA_VERSION, checkpoints, events, runs
from waypoint.types import (
    FINISH_RUN,
    RECORD_STEP,
    SET_STATUS,
    START_RUN,
    FinishRunInput,
    ForkOrigin,
    RunPlan,
    RunResult,
    RunStatus,
    SetStatusInput,
    StartRunInput,
    StepRecord,
    idempotency_key,
)

Event = tuple[int, str, dict[str, Any]]  # (step, kind, payload)
WRITE_CONFLICT_RETRIES = 5


def _attempt() -> int:
    return activity.info().attempt if activity.in_activity() else 1


async def lock_run(conn: AsyncConnection, run_id: str) -> None:
    """Serialize writers of one run until the caller's transaction ends."""
    await conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id).with_for_update())


def hash_chain(run_id: str, last_seq: int, last_hash: str | None, new: list[Event]) -> list[dict[str, Any]]:
    """The rows that extend a run's hash chain, which ends at (`last_seq`, `last_hash`), by `new`."""
    seq, prev = last_seq, last_hash
    rows = []
    for step, kind, payload in new:
        seq += 1
        digest, payload_json = chained_event(prev, run_id=run_id, seq=seq, step=step, kind=kind, payload=payload)
        rows.append(
            {
                "run_id": run_id,
                "seq": seq,
                "step": step,
                "kind": kind,
                "payload": payload,
                "payload_json": payload_json,
                "attempt": _attempt(),
                "prev_hash": prev,
                "hash": digest,
            }
        )
        prev = digest
    return rows


async def append_events(conn: AsyncConnection, run_id: str, new: list[Event], *, locked: bool = False) -> int:
    """Append events to a run's hash chain; returns the last seq. Caller owns the transaction.
    `locked`: the caller already holds the run lock (`lock_run`)."""
    if not locked:  # parallel tool attempts may fail, and append, at once
        await lock_run(conn, run_id)
    last = (
        await conn.execute(
            select(events.c.seq, events.c.hash).where(events.c.run_id == run_id).order_by(events.c.seq.desc()).limit(1)
        )
    ).first()
    rows = hash_chain(run_id, last.seq if last else 0, last.hash if last else None, new)
    if rows:
        await conn.execute(insert(events), [{k: v for k, v in r.items() if k != "payload_json"} for r in rows])
    return rows[-1]["seq"] if rows else (last.seq if last else 0)


# record_step's two statements. Plain SQL with one text whatever the number of events, so the
# driver prepares each once per connection.
_READ_FOR_STEP = text(
    """
    SELECT
        (SELECT last_event_seq FROM checkpoints WHERE run_id = r.run_id AND step = :step) AS existing,
        (SELECT state FROM checkpoints WHERE run_id = r.run_id AND step = :prev_step) AS prev,
        (SELECT jsonb_object_agg(idempotency_key, output) FROM tool_effects
          WHERE idempotency_key = ANY(CAST(:keys AS text[]))) AS outputs,
        last.seq AS last_seq,
        last.hash AS last_hash
    FROM runs AS r
    LEFT JOIN LATERAL (
        SELECT seq, hash FROM events WHERE run_id = r.run_id ORDER BY seq DESC LIMIT 1
    ) AS last ON true
    WHERE r.run_id = :run_id
    """
).columns(prev=JSONB, outputs=JSONB)

_WRITE_STEP = text(
    """
    WITH new_events AS (
        INSERT INTO events (run_id, seq, step, kind, payload, attempt, prev_hash, hash)
        SELECT :run_id, e.seq, :step, e.kind, CAST(e.payload AS jsonb), :attempt, e.prev_hash, e.hash
        FROM unnest(CAST(:seqs AS int[]), CAST(:kinds AS text[]), CAST(:payloads AS text[]),
                    CAST(:prev_hashes AS text[]), CAST(:hashes AS text[])) AS e(seq, kind, payload, prev_hash, hash)
    ), new_checkpoint AS (
        INSERT INTO checkpoints (run_id, step, state, last_event_seq, state_hash, schema_version)
        VALUES (:run_id, :step, CAST(:state AS jsonb), :last_seq, :state_hash, :schema_version)
    )
    UPDATE runs
    SET steps = :step,
        input_tokens = input_tokens + :input_tokens,
        output_tokens = output_tokens + :output_tokens,
        cost_usd = cost_usd + :cost,
        updated_at = now()
    WHERE run_id = :run_id
    """
)


async def insert_checkpoint(
    conn: AsyncConnection, run_id: str, step: int, state: dict[str, Any], last_seq: int
) -> bool:
    """Insert-or-ignore the checkpoint of (run, step); False if it already existed."""
    stmt = (
        insert(checkpoints)
        .values(
            run_id=run_id,
            step=step,
            state=state,
            last_event_seq=last_seq,
            state_hash=state_hash(state),
            schema_version=STATE_SCHEMA_VERSION,
        )
        .on_conflict_do_nothing(index_elements=["run_id", "step"])
        .returning(checkpoints.c.step)
    )
    return (await conn.execute(stmt)).first() is not None


class CheckpointActivities:
    def __init__(self, engine: AsyncEngine, agents: AgentRegistry, *, memory_queue: str | None = None):
        self.engine = engine
        self.agents = agents
        # The task queue of the worker that owns episodic memory; None when there is none.
        self.memory_queue = memory_queue

    @activity.defn(name=START_RUN)
    async def start_run(self, inp: StartRunInput) -> RunPlan:
        """Create the run row, its `run_started` event and checkpoint 0 (instructions + task)."""
        try:
            agent = self.agents.get(inp.agent)
        except WaypointError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
        budget = inp.budget
        plan = RunPlan(
            model=inp.model or agent.model_spec,
            max_steps=budget.max_steps or agent.max_steps,
            tools=agent.tool_specs(),
            retry=agent.model_retry,
            max_tokens=budget.max_tokens or agent.max_tokens,
            max_cost_usd=budget.max_cost_usd or agent.max_cost_usd,
            deadline_seconds=budget.deadline_seconds or agent.deadline_seconds,
            max_repairs=agent.max_repairs,
            continue_as_new_every=agent.continue_as_new_every,
            context_tokens=agent.context_tokens,
            recall_k=agent.recall_k if agent.memory and self.memory_queue else 0,
            memory_queue=self.memory_queue,
            compact_at=agent.compact_at,
        )
        fork = inp.fork
        inherited: list[Segment] = []
        pinned: list[context.Pin] = []
        if fork is not None:
            inherited, pinned = await self._fork_segments(inp.tenant_id, fork)
            plan = replace(plan, start_step=fork.step)
        async with self.engine.begin() as conn:
            created = (
                await conn.execute(
                    insert(runs)
                    .values(
                        run_id=inp.run_id,
                        tenant_id=inp.tenant_id,
                        agent=agent.name,
                        task=inp.task,
                        model=plan.model,
                        status=RunStatus.RUNNING,
                        max_steps=plan.max_steps,
                        parent_run_id=fork.run_id if fork else None,
                        fork_step=fork.step if fork else None,
                        steps=plan.start_step,
                        trace_id=telemetry.trace_id(),  # the run's trace, for `waypoint trace`
                    )
                    .on_conflict_do_nothing(index_elements=["run_id"])
                    .returning(runs.c.run_id)
                )
            ).first()
            if created is not None:  # else a retry after the first attempt committed
                payload = {
                    "agent": agent.name,
                    "instructions": agent.instructions,
                    "task": inp.task,
                    "tenant_id": inp.tenant_id,
                    "plan": asdict(plan),
                    "fork": asdict(fork) if fork else None,
                }
                seq = await append_events(conn, inp.run_id, [(plan.start_step, "run_started", payload)])
                if fork is None:
                    segments = [context.segment(inp.run_id, seq, seq, context.event_messages("run_started", payload))]
                else:  # the parent's window, then the injected message
                    segments = inherited
                    if fork.message:
                        note = {"content": fork.message}
                        seq = await append_events(conn, inp.run_id, [(fork.step, "user_message", note)])
                        messages = context.event_messages("user_message", note)
                        segments = [*segments, context.segment(inp.run_id, seq, seq, messages)]
                state = {"schema": STATE_SCHEMA_VERSION, "segments": segments, "dropped_steps": 0, "pinned": pinned}
                await insert_checkpoint(conn, inp.run_id, plan.start_step, state, seq)
        return plan

    async def _fork_segments(self, tenant_id: str, fork: ForkOrigin) -> tuple[list[Segment], list[context.Pin]]:
        """The parent's window at the fork step (references: nothing is copied, the parent is untouched)."""
        try:
            found = await travel.checkpoint_at(self.engine, tenant_id, fork.run_id, fork.step)
        except WaypointError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
        return list(found["state"]["segments"]), list(found["state"].get("pinned", []))

    @activity.defn(name=RECORD_STEP)
    async def record_step(self, record: StepRecord) -> int:
        """Append the step's events and write its checkpoint atomically; returns the step's last seq.

        Optimistic, in two statements and no explicit transaction: one reads everything the step
        needs, one writes everything (events, checkpoint, run totals) as a single statement. Two
        attempts of the same step can overlap (the first one's worker stalled past the timeout):
        the unique (run, seq) and (run, step) keys let only one write land, and the other reads
        again and finds the step recorded. Steps of many runs share a worker's event loop, so
        round trips saved here are what lets concurrent runs scale."""
        keys = {_key(record, i): i for i, r in enumerate(record.tool_results) if r.stored}
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            for _ in range(WRITE_CONFLICT_RETRIES):
                last_seq = await self._record_once(conn, record, keys)
                if last_seq is not None:
                    return last_seq
        raise ApplicationError(f"run {record.run_id}: step {record.step} kept conflicting with other writers")

    async def _record_once(self, conn: AsyncConnection, record: StepRecord, keys: dict[str, int]) -> int | None:
        """One read-then-write try; None when a concurrent writer won the race."""
        params = {"run_id": record.run_id, "step": record.step, "prev_step": record.step - 1, "keys": list(keys)}
        found = (await conn.execute(_READ_FOR_STEP, params)).first()
        if found is not None and found.existing is not None:
            return int(found.existing)  # recorded by an earlier attempt: nothing to do
        if found is None or found.prev is None:
            raise ApplicationError(
                f"run {record.run_id} has no checkpoint for step {record.step - 1}",
                type=NotFound.__name__,
                non_retryable=True,
            )
        full = {keys[k]: v for k, v in (found.outputs or {}).items()}
        turn = record.turn
        new: list[Event] = [(record.step, "user_message", {"content": m}) for m in record.user_messages]
        new += [(record.step, "decision", d) for d in record.decisions]
        new.append(
            (
                record.step,
                "model_response",
                {
                    "model": turn.model,
                    "content": turn.content,
                    "finish_reason": turn.finish_reason,
                    "tool_calls": [asdict(c) for c in turn.tool_calls],
                    "usage": asdict(turn.usage),
                    "cost_usd": turn.cost_usd,
                    "latency_ms": turn.latency_ms,
                    "attempt": turn.attempt,
                },
            )
        )
        for index, result in enumerate(record.tool_results):
            output = full.get(index, result.output)
            payload = {**asdict(result), "output": output, "idempotency_key": _key(record, index)}
            new.append((record.step, "tool_result", payload))
        chain = hash_chain(record.run_id, found.last_seq or 0, found.last_hash, new)
        last_seq = chain[-1]["seq"]
        messages: list[Message] = [m for _, kind, p in new for m in context.event_messages(kind, p)]
        step_segment = context.segment(record.run_id, last_seq - len(new) + 1, last_seq, messages)
        prev = found.prev
        kept, dropped = context.trim([*prev["segments"], step_segment], record.context_tokens)
        state = {
            "schema": STATE_SCHEMA_VERSION,
            "segments": kept,
            "dropped_steps": prev.get("dropped_steps", 0) + dropped,
            # Decisions never leave working memory, however far the window moves.
            "pinned": [
                *prev.get("pinned", []),
                *context.pins_of(record.run_id, ((r["seq"], r["step"], r["kind"], r["payload"]) for r in chain)),
            ],
        }
        digest, state_json = hashed_json(state)
        try:
            await conn.execute(
                _WRITE_STEP,
                {
                    "run_id": record.run_id,
                    "step": record.step,
                    "attempt": _attempt(),
                    "seqs": [row["seq"] for row in chain],
                    "kinds": [row["kind"] for row in chain],
                    "payloads": [row["payload_json"] for row in chain],
                    "prev_hashes": [row["prev_hash"] for row in chain],
                    "hashes": [row["hash"] for row in chain],
                    "state": state_json,
                    "last_seq": last_seq,
                    "state_hash": digest,
                    "schema_version": STATE_SCHEMA_VERSION,
                    "input_tokens": turn.usage.input_tokens,
                    "output_tokens": turn.usage.output_tokens,
                    "cost": turn.cost_usd,
                },
            )
        except IntegrityError:
            return None  # another writer took these seqs first
        return last_seq

    @activity.defn(name=SET_STATUS)
    async def set_run_status(self, inp: SetStatusInput) -> None:
        """Mirror a live status change (paused, waiting for approval, running again)."""
        async with self.engine.begin() as conn:
            payload = {"status": inp.status, "detail": inp.detail}
            await _transition(conn, inp.run_id, "status_changed", payload, runs.c.status != inp.status)

    @activity.defn(name=FINISH_RUN)
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        """Set the final status once, with a `run_finished` event; a retry changes nothing."""
        async with self.engine.begin() as conn:
            payload = {"status": inp.status, "output": inp.output, "error": inp.error}
            await _transition(
                conn, inp.run_id, "run_finished", payload, output=inp.output, error=inp.error, finished_at=func.now()
            )
            row = (await conn.execute(select(runs).where(runs.c.run_id == inp.run_id))).mappings().one()
        return run_result(row)


async def _transition(
    conn: AsyncConnection, run_id: str, kind: str, payload: dict[str, Any], *where: Any, **values: Any
) -> None:
    """Move an unfinished run to `payload["status"]` and log it; a finished run (or a retry) is left as it is."""
    changed = (
        await conn.execute(
            update(runs)
            .where(runs.c.run_id == run_id, runs.c.status.not_in(RunStatus.FINISHED), *where)
            .values(status=payload["status"], updated_at=func.now(), **values)
            .returning(runs.c.steps)
        )
    ).first()
    if changed is not None:
        await append_events(conn, run_id, [(changed.steps, kind, payload)])


def _key(record: StepRecord, index: int) -> str:
    return idempotency_key(record.run_id, record.step, index)
