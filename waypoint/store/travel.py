"""Time travel over the mirror: the state at any step, the diff of two steps, the event log,
the full transcript, the lineage. Forks are followed to their parent for steps before the fork."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select

from waypoint.errors import NotFound
from waypoint.names import EventKind, LineageKind
from waypoint.store import context
from waypoint.store.base import StoreBase, of_tenant
from waypoint.store.compactions import compaction_by_id
from waypoint.store.hashing import hashed_json
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, event_row
from waypoint.store.rows import AgentCall, EventRow, RunRow
from waypoint.store.schema import events, runs
from waypoint.store.tree_travel import agent_calls, caller_of_step
from waypoint.store.working import read_parts, recalled_text
from waypoint.tokens import estimate_tokens
from waypoint.types import Message
from waypoint.working_memory import rebuild


@dataclass(frozen=True)
class StepState:
    """The state at a step: what the next model call saw (`messages`), rendered from the checkpoint
    of `owner_run_id` (this run, or the ancestor a fork inherited the step from), and the step's events."""

    run_id: str
    step: int
    owner_run_id: str
    at: datetime
    messages: list[Message]
    segments: list[list[Any]]
    pinned: list[list[Any]]
    dropped_steps: int
    events: list[EventRow] = field(default_factory=list)
    # What the next model call (step + 1) received, as recorded, when it has run: the messages above
    # are then that request rebuilt byte for byte (`matches`: its hash equals the recorded one).
    request: dict[str, Any] | None = None
    # The step's sub-agent calls: the child run each started, and its answer.
    children: list[AgentCall] = field(default_factory=list)


@dataclass(frozen=True)
class StateDiff:
    run_id: str
    a: int
    b: int
    added: list[Message] = field(default_factory=list)
    dropped: list[Message] = field(default_factory=list)
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    tokens_a: int = 0
    tokens_b: int = 0


@dataclass(frozen=True)
class LineageLink:
    run_id: str
    forked_at: int | None
    relation: str  # "ancestor" or "fork" (a run started from this one, a fork or a rerun)
    lineage_kind: str = "fork"  # a LineageKind: how the newer run of the pair came from the older


class TimeTravel(StoreBase):
    async def state_at(self, tenant_id: str, run_id: str, step: int, *, with_events: bool = True) -> StepState:
        """The state at `step`: the working memory the next model call saw (exactly, when that call ran
        and recorded what it received), and the step's events."""
        found = await self.checkpoint_at(tenant_id, run_id, step)
        state = found["state"]
        request = await self._next_request(tenant_id, run_id, step)
        async with self.engine.connect() as conn:
            if request is None:
                messages = await context.render(conn, state["segments"])
            else:
                compaction = (
                    await compaction_by_id(conn, request["compaction_id"]) if request["compaction_id"] else None
                )
                parts = await read_parts(conn, found["run_id"], state, compaction)
                parts.user_messages = request.pop("user_messages")
                messages = rebuild(parts, request["recalled_text"], request["dropped_turns"])
                request["matches"] = hashed_json(messages)[0] == request["sha256"]
                if not request["matches"] and request["recalled_text"]:
                    # Recorded while the recalled episodes came after the turns (new at every step then).
                    earlier = rebuild(parts, request["recalled_text"], request["dropped_turns"], recalled_last=True)
                    if hashed_json(earlier)[0] == request["sha256"]:
                        messages, request["matches"] = earlier, True
        step_events = await self.events(tenant_id, found["run_id"], step=step) if with_events else []
        children = await self.step_agent_calls(tenant_id, run_id, step) if with_events else []
        return StepState(
            run_id=run_id,
            step=step,
            owner_run_id=found["run_id"],
            at=found["at"],
            messages=messages,
            segments=state["segments"],
            pinned=state.get("pinned", []),
            dropped_steps=state.get("dropped_steps", 0),
            events=step_events,
            request=request,
            children=children,
        )

    async def step_agent_calls(self, tenant_id: str, run_id: str, step: int) -> list[AgentCall]:
        """The sub-agent calls `step` made (in the run, or in the ancestor a fork inherited the step
        from): the child run of each, how it ended, and its answer."""
        async with self.engine.connect() as conn:
            run = await self._run(conn, tenant_id, run_id)
            caller = await caller_of_step(conn, tenant_id, run, step)
            return await agent_calls(conn, tenant_id, caller, step=step)

    async def _next_request(self, tenant_id: str, run_id: str, step: int) -> dict[str, Any] | None:
        """The record of what step + 1's model call received (with the user messages sent before it),
        or None when that call has not run or was made before calls were recorded."""
        try:
            owner = await self.owner_of_step(tenant_id, run_id, step + 1)
        except NotFound:
            return None
        query = (
            select(events.c.kind, events.c.payload)
            .where(events.c.run_id == owner, events.c.step == step + 1)
            .where(events.c.kind.in_((EventKind.USER_MESSAGE, EventKind.MODEL_RESPONSE)))
            .order_by(events.c.seq)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
            answer = next((r.payload for r in rows if r.kind == EventKind.MODEL_RESPONSE), None)
            if answer is None or not answer.get("request"):
                return None
            request = dict(answer["request"])
            if request.get("recalled_text") is None and request.get("recalled_sha256"):
                # Since migration 0011 the text is kept once, beside the log, and named by its hash.
                request["recalled_text"] = await recalled_text(conn, owner, request["recalled_sha256"])
        users = [r.payload["content"] for r in rows if r.kind == EventKind.USER_MESSAGE]
        return {**request, "user_messages": users}

    async def events(
        self,
        tenant_id: str,
        run_id: str,
        *,
        kinds: Sequence[str] | None = None,
        since_step: int = 0,
        step: int | None = None,
        after_seq: int = 0,
        limit: int | None = None,
    ) -> list[EventRow]:
        """The run's events in log order: of one step, or from `since_step` on; of some kinds; after
        `after_seq` (keyset pagination: pass the last seq seen)."""
        query = (
            select(events, LEDGER_OUTPUT)
            .select_from(EVENTS_WITH_OUTPUTS)
            .where(events.c.run_id == run_id, events.c.seq > after_seq)
        )
        if step is not None:
            query = query.where(events.c.step == step)
        else:
            query = query.where(events.c.step >= since_step)
        if kinds:
            query = query.where(events.c.kind.in_(kinds))
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            rows = (await conn.execute(query.order_by(events.c.seq).limit(limit))).mappings().all()
        return [event_row(r) for r in rows]

    async def diff(self, tenant_id: str, run_id: str, a: int, b: int) -> StateDiff:
        """Messages added and dropped between the states at steps `a` and `b`, other fields changed,
        and the context size of each (estimated tokens)."""
        sa = await self.state_at(tenant_id, run_id, a, with_events=False)
        sb = await self.state_at(tenant_id, run_id, b, with_events=False)
        in_a = {_key(m) for m in sa.messages}
        in_b = {_key(m) for m in sb.messages}
        changed = {
            name: (getattr(sa, name), getattr(sb, name))
            for name in ("dropped_steps", "pinned")
            if getattr(sa, name) != getattr(sb, name)
        }
        return StateDiff(
            run_id=run_id,
            a=a,
            b=b,
            added=[m for m in sb.messages if _key(m) not in in_a],
            dropped=[m for m in sa.messages if _key(m) not in in_b],
            changed=changed,
            tokens_a=estimate_tokens(sa.messages),
            tokens_b=estimate_tokens(sb.messages),
        )

    async def export(self, tenant_id: str, run_id: str) -> AsyncIterator[RunRow | EventRow]:
        """The full transcript: the run row, then every event in order (streamed)."""
        yield await self.get_run(tenant_id, run_id)
        async with self.engine.connect() as conn:
            rows = await conn.stream(
                select(events, LEDGER_OUTPUT)
                .select_from(EVENTS_WITH_OUTPUTS)
                .where(events.c.run_id == run_id)
                .order_by(events.c.seq)
            )
            async for e in rows.mappings():
                yield event_row(e)

    async def lineage(self, tenant_id: str, run_id: str) -> list[LineageLink]:
        """Ancestors (oldest first) with the step each fork was taken at, then the runs started from
        this one; each link says whether it is a fork or a rerun (rows from before reruns are forks)."""
        chain: list[LineageLink] = []
        async with self.engine.connect() as conn:
            run = await self._run(conn, tenant_id, run_id)
            while run.parent_run_id is not None:
                kind = run.lineage_kind or LineageKind.FORK
                chain.insert(0, LineageLink(run.parent_run_id, run.fork_step, "ancestor", kind))
                run = await self._run(conn, tenant_id, run.parent_run_id)
            forks = await conn.execute(
                select(runs.c.run_id, runs.c.fork_step, runs.c.lineage_kind)
                .where(runs.c.parent_run_id == run_id, of_tenant(tenant_id))
                .order_by(runs.c.created_at)
            )
            chain += [LineageLink(f.run_id, f.fork_step, "fork", f.lineage_kind or LineageKind.FORK) for f in forks]
        return chain


def _key(message: dict) -> str:
    return json.dumps(message, sort_keys=True)
