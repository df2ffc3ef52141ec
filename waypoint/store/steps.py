"""The two writes every run makes: its start (row, `run_started`, checkpoint 0) and each step.

Both are idempotent under retry: the run row and each (run, step) checkpoint are inserted at
most once, and a retried attempt finds the earlier one's work and writes nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy import func, text
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import NotFound
from waypoint.names import WAITING_TO_START, EventKind, RunStatus, idempotency_key
from waypoint.store import context
from waypoint.store.base import StoreBase, not_found
from waypoint.store.budget import open_pool
from waypoint.store.context import Pin, Segment
from waypoint.store.hashing import hashed_json
from waypoint.store.log import NewEvent, append_events, hash_chain
from waypoint.store.outputs import OUTPUT_REF, output_ref
from waypoint.store.schema import STATE_SCHEMA_VERSION, checkpoints, runs
from waypoint.store.versions import insert_version
from waypoint.transcript import event_messages
from waypoint.types import ForkOrigin, Message, ParentRef, RunPlan, StepRecord
from waypoint.versions import AgentVersion

# Overlapping attempts of one step lose the race at most this many times before giving up.
WRITE_CONFLICT_RETRIES = 5


@dataclass(frozen=True)
class NewRun:
    """What `start_run` writes: the run row and its first event."""

    run_id: str
    tenant_id: str
    agent: str
    task: str
    instructions: str
    plan: RunPlan
    fork: ForkOrigin | None = None
    trace_id: str | None = None
    # The MCP tools listed at start (MCPTool.to_json()): what the model and run_tool use for the
    # rest of the run, so no server is asked again.
    mcp_tools: list[dict[str, Any]] = field(default_factory=list)
    parent: ParentRef | None = None  # a sub-agent run: the call that started it
    priority: int | None = None  # 1 (first) to 5 (last); None: the default, 3
    webhook: str | None = None  # where the run's end is posted
    schedule_id: str | None = None  # the schedule that fired it
    assistant_id: str | None = None  # the Agent Protocol assistant (and version) it runs
    assistant_version: int | None = None
    version: AgentVersion | None = None  # the agent version it starts with (its fingerprint goes on the row)
    batch_id: str | None = None  # the batch of a run that is not a rerun (an experiment's case run)
    # A root run given max_steps (not its agent's default): its tree's model calls share that many steps.
    tree_max_steps: int | None = None


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
        last.hash AS last_hash,
        (SELECT max(last_seq) FROM compactions WHERE run_id = r.run_id) AS compacted_seq
    FROM runs AS r
    LEFT JOIN LATERAL (
        SELECT seq, hash FROM events WHERE run_id = r.run_id ORDER BY seq DESC LIMIT 1
    ) AS last ON true
    WHERE r.run_id = :run_id AND r.tenant_id = :tenant_id
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
        cache_read_tokens = cache_read_tokens + :cache_read_tokens,
        cache_write_tokens = cache_write_tokens + :cache_write_tokens,
        cost_usd = cost_usd + :cost,
        remembered_step = GREATEST(remembered_step, :remembered),
        updated_at = now()
    WHERE run_id = :run_id
    """
)


async def insert_checkpoint(
    conn: AsyncConnection, run_id: str, step: int, state: dict[str, Any], last_seq: int
) -> bool:
    """Insert-or-ignore the checkpoint of (run, step); False if it already existed."""
    digest, _ = hashed_json(state)
    stmt = (
        insert(checkpoints)
        .values(
            run_id=run_id,
            step=step,
            state=state,
            last_event_seq=last_seq,
            state_hash=digest,
            schema_version=STATE_SCHEMA_VERSION,
        )
        .on_conflict_do_nothing(index_elements=["run_id", "step"])
        .returning(checkpoints.c.step)
    )
    return (await conn.execute(stmt)).first() is not None


def step_events(record: StepRecord, ledger_outputs: dict[int, str]) -> tuple[list[NewEvent], list[Message]]:
    """The events of one step, in log order (user messages, decisions, the model's answer, tool
    results), and the messages they stand for. A result whose output the ledger holds
    (`ledger_outputs`, by call index) is stored there only: its event holds a reference."""
    turn = record.turn
    new: list[NewEvent] = [(record.step, EventKind.USER_MESSAGE, {"content": m}) for m in record.user_messages]
    # (an edit or an answer only where a human gave one: plain decisions keep their shape)
    new += [
        (record.step, EventKind.DECISION, {k: v for k, v in asdict(d).items() if v is not None})
        for d in record.decisions
    ]
    new.append(
        (
            record.step,
            EventKind.MODEL_RESPONSE,
            {
                "model": turn.model,
                "content": turn.content,
                "finish_reason": turn.finish_reason,
                "tool_calls": [asdict(c) for c in turn.tool_calls],
                "usage": asdict(turn.usage),
                "cost_usd": turn.cost_usd,
                "latency_ms": turn.latency_ms,
                "attempt": turn.attempt,
                # The spec it called (the fleet's figures count calls per model key by it).
                **({"spec": turn.spec} if turn.spec else {}),
                # What the call received, by reference: `show` rebuilds it from this.
                **({"request": asdict(turn.request)} if turn.request is not None else {}),
                # Blocks the provider needs back verbatim in later calls (event_messages carries them).
                **({"provider_blocks": turn.provider_blocks} if turn.provider_blocks else {}),
            },
        )
    )
    messages = [m for _, kind, p in new for m in event_messages(kind, p)]
    for index, result in enumerate(record.tool_results):
        key = idempotency_key(record.run_id, record.step, index)
        payload: dict[str, Any] = {**asdict(result), "idempotency_key": key}
        if index in ledger_outputs:
            output = ledger_outputs[index]
            del payload["output"]
            payload[OUTPUT_REF] = output_ref(output)
        else:
            output = result.output
        new.append((record.step, EventKind.TOOL_RESULT, payload))
        messages += event_messages(EventKind.TOOL_RESULT, {**payload, "output": output})
    return new, messages


class StepWriter(StoreBase):
    async def create_run(self, new: NewRun) -> RunPlan:
        """The run row, its `run_started` event and checkpoint 0 (instructions and task, or for a
        fork the parent's window at the fork step plus the optional message; a rerun with its own
        instructions heads that window with its `run_started` event instead). Idempotent."""
        plan = new.plan
        fork = new.fork
        inherited: list[Segment] = []
        pinned: list[Pin] = []
        if fork is not None:
            inherited, pinned = await self._fork_window(new.tenant_id, fork)
        async with self.engine.begin() as conn:
            row = dict(
                run_id=new.run_id,
                tenant_id=new.tenant_id,
                agent=new.agent,
                task=new.task,
                model=plan.model,
                status=RunStatus.RUNNING,
                max_steps=plan.max_steps,
                parent_run_id=fork.run_id if fork else None,
                fork_step=fork.step if fork else None,
                lineage_kind=fork.kind if fork else None,
                batch_id=fork.batch_id if fork and fork.batch_id else new.batch_id,
                steps=plan.start_step,
                remembered_step=plan.start_step,  # a fork's earlier steps are its parent's
                trace_id=new.trace_id,
                caller_run_id=new.parent.run_id if new.parent else None,
                caller_step=new.parent.step if new.parent else None,
                caller_call_index=new.parent.call_index if new.parent else None,
                root_run_id=new.parent.root_run_id if new.parent else new.run_id,
                priority=new.priority,
                schedule_id=new.schedule_id,
                webhook=new.webhook,
                assistant_id=new.assistant_id,
                assistant_version=new.assistant_version,
                agent_fingerprint=new.version.fingerprint if new.version is not None else None,
            )
            started = insert(runs).values(**row)
            # A run that waited to start (scheduled, queued) has its row already: it becomes this run
            # (its creation time, its schedule, the run it waited for stay). Any other row is a retry.
            kept = {"run_id", "tenant_id", "root_run_id", "caller_run_id", "caller_step", "caller_call_index"}
            created = (
                await conn.execute(
                    started.on_conflict_do_update(
                        index_elements=["run_id"],
                        set_={k: started.excluded[k] for k in row if k not in kept} | {"updated_at": func.now()},
                        where=(runs.c.status.in_(list(WAITING_TO_START)) & (runs.c.tenant_id == new.tenant_id)),
                    ).returning(runs.c.run_id)
                )
            ).first()
            if created is None:  # a retry after the first attempt committed
                await self._run(conn, new.tenant_id, new.run_id)  # and it is this tenant's
            # A root with a budget opens its tree's pool; a sub-agent run draws from its tree's.
            pool = await open_pool(
                conn,
                run_id=new.run_id,
                tenant_id=new.tenant_id,
                root_run_id=new.parent.root_run_id if new.parent else None,
                max_tokens=plan.max_tokens,
                max_cost_usd=plan.max_cost_usd,
                max_steps=new.tree_max_steps,
            )
            plan = replace(plan, budget_pool=pool)
            if created is None:
                return plan
            if new.version is not None:
                await insert_version(conn, new.tenant_id, new.version)
            payload: dict[str, Any] = {
                "agent": new.agent,
                "instructions": new.instructions,
                "task": new.task,
                "tenant_id": new.tenant_id,
                "plan": asdict(plan),
                "fork": asdict(fork) if fork else None,
            }
            if new.parent is not None:
                payload["parent"] = asdict(new.parent)
            if new.mcp_tools:
                payload["mcp_tools"] = new.mcp_tools
            seq = await append_events(conn, new.run_id, [(plan.start_step, EventKind.RUN_STARTED, payload)])
            if fork is None:
                messages = event_messages(EventKind.RUN_STARTED, payload)
                segments = [context.segment(new.run_id, seq, seq, messages)]
            else:  # the parent's window, then the injected message
                segments = inherited
                if fork.instructions:  # its own head (new instructions, same task) in place of the parent's
                    head = context.segment(new.run_id, seq, seq, event_messages(EventKind.RUN_STARTED, payload))
                    segments = [head, *segments[1:]]
                if fork.message:
                    note = {"content": fork.message}
                    seq = await append_events(conn, new.run_id, [(fork.step, EventKind.USER_MESSAGE, note)])
                    messages = event_messages(EventKind.USER_MESSAGE, note)
                    segments = [*segments, context.segment(new.run_id, seq, seq, messages)]
            await insert_checkpoint(conn, new.run_id, plan.start_step, context.state(segments, pinned=pinned), seq)
        return plan

    async def _fork_window(self, tenant_id: str, fork: ForkOrigin) -> tuple[list[Segment], list[Pin]]:
        """The parent's window at the fork step (references: nothing is copied, the parent is untouched)."""
        found = await self.checkpoint_at(tenant_id, fork.run_id, fork.step)
        return list(found["state"]["segments"]), list(found["state"].get("pinned", []))

    async def record_step(self, record: StepRecord, *, attempt: int = 1) -> int:
        """Append the step's events and write its checkpoint atomically; returns the step's last seq.

        Optimistic, in two statements and no explicit transaction: one reads everything the step
        needs, one writes everything (events, checkpoint, run totals) as a single statement. Two
        attempts of the same step can overlap (the first one's worker stalled past the timeout):
        the unique (run, seq) and (run, step) keys let only one write land, and the other reads
        again and finds the step recorded. Steps of many runs share a worker's event loop, so
        round trips saved here are what lets concurrent runs scale."""
        keys = {
            idempotency_key(record.run_id, record.step, i): i for i, r in enumerate(record.tool_results) if r.stored
        }
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            for _ in range(WRITE_CONFLICT_RETRIES):
                last_seq = await self._record_once(conn, record, keys, attempt)
                if last_seq is not None:
                    return last_seq
        raise RuntimeError(f"run {record.run_id}: step {record.step} kept conflicting with other writers")

    async def _record_once(
        self, conn: AsyncConnection, record: StepRecord, keys: dict[str, int], attempt: int
    ) -> int | None:
        """One read-then-write try; None when a concurrent writer won the race."""
        params = {
            "run_id": record.run_id,
            "tenant_id": record.tenant_id,
            "step": record.step,
            "prev_step": record.step - 1,
            "keys": list(keys),
        }
        found = (await conn.execute(_READ_FOR_STEP, params)).first()
        if found is None:
            raise not_found(record.tenant_id, record.run_id)
        if found.existing is not None:
            return int(found.existing)  # recorded by an earlier attempt: nothing to do
        if found.prev is None:
            raise NotFound(f"run {record.run_id} has no checkpoint for step {record.step - 1}")
        new, messages = step_events(record, {keys[k]: v for k, v in (found.outputs or {}).items()})
        chain = hash_chain(record.run_id, found.last_seq or 0, found.last_hash, new, attempt=attempt)
        last_seq = chain[-1]["seq"]
        step_segment = context.segment(record.run_id, last_seq - len(new) + 1, last_seq, messages)
        prev = found.prev
        compacted = found.compacted_seq if found.compacted_seq is not None else -1
        kept, dropped = context.trim(
            [*prev["segments"], step_segment],
            record.context_tokens,
            hidden=lambda seg: seg[0] == record.run_id and seg[2] <= compacted,
        )
        # Decisions never leave working memory, however far the window moves.
        pins = context.pins_of(record.run_id, ((r["seq"], r["step"], r["kind"], r["payload"]) for r in chain))
        state = context.state(
            kept, dropped_steps=prev.get("dropped_steps", 0) + dropped, pinned=[*prev.get("pinned", []), *pins]
        )
        digest, state_json = hashed_json(state)
        turn = record.turn
        try:
            await conn.execute(
                _WRITE_STEP,
                {
                    "run_id": record.run_id,
                    "step": record.step,
                    "attempt": attempt,
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
                    "cache_read_tokens": turn.usage.cache_read_tokens,
                    "cache_write_tokens": turn.usage.cache_write_tokens,
                    "cost": turn.cost_usd,
                    "remembered": turn.remembered_through or 0,
                },
            )
        except IntegrityError:
            return None  # another writer took these seqs first
        return last_seq
