"""Tamper evidence and retention: verify a run's hash chain, delete a whole run.

Each run's events form a chain, `hash = sha256(prev_hash || canonical JSON of the event)`,
and each checkpoint stores the hash of its state. `verify` recomputes both and
names the first row that does not match. `verify_tree` does so for a run and every sub-agent
run below it, and checks that each answer a caller's ledger holds is its child's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import Conflict
from waypoint.names import LIVE, RunStatus, ToolOutcome
from waypoint.store.base import StoreBase
from waypoint.store.hashing import event_hash, state_hash
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, mismatch
from waypoint.store.rows import RunRow
from waypoint.store.schema import (
    checkpoints,
    compactions,
    events,
    recalled_texts,
    runs,
    tool_effects,
    webhook_attempts,
    webhook_deliveries,
)
from waypoint.store.tree_travel import agent_calls
from waypoint.store.trees import subtree


@dataclass
class Verdict:
    """What `verify` found: counts, and the problems (empty when the run is intact)."""

    run_id: str
    events: int = 0
    checkpoints: int = 0
    problems: list[str] = field(default_factory=list)
    # Each sub-agent run below it, depth first in call order (`verify` covers the tree).
    below: list[Verdict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(v.ok for v in self.below)

    @property
    def broken(self) -> list[Verdict]:
        """The runs of the tree with problems, this one first."""
        return [v for v in (self, *self.below) if v.problems]


async def call_problems(conn: AsyncConnection, tenant_id: str, run: RunRow) -> list[str]:
    """What does not hold of the run's sub-agent calls: each one its ledger says succeeded has a child
    run that completed, whose output is the ledger's answer."""
    problems = []
    for call in await agent_calls(conn, tenant_id, run):
        if call.outcome != ToolOutcome.OK:
            continue
        where = f"step {call.step} call {call.call_index} ({call.agent})"
        child_id = call.child_run_id or call.recorded_from
        if child_id is None:
            problems.append(f"{where}: the ledger holds an answer, and no child run gave it")
            continue
        child = (await conn.execute(select(runs).where(runs.c.run_id == child_id))).mappings().first()
        if child is None:
            problems.append(f"{where}: its child run {child_id} is gone")
        elif child["status"] != RunStatus.COMPLETED:
            problems.append(f"{where}: the ledger says ok, and its child run {child_id} is {child['status']}")
        elif (child["output"] or "") != (call.answer or ""):
            problems.append(f"{where}: the ledger's answer is not the output of its child run {child_id}")
    return problems


class ChainCheck:
    """A run's events, one at a time in seq order, checked as a hash chain (and each referenced output
    against the ledger's), then its checkpoints in step order: contiguous, each matching its hash.
    Problems go to `verdict`; `full` once it holds ten (the rest is not worth reading)."""

    def __init__(self, run_id: str, fork_step: int | None):
        self.verdict = Verdict(run_id)
        self.prev: str | None = None
        self.expected_seq = 1
        self.expected_step = fork_step or 0  # a fork's checkpoints start at its fork step

    @property
    def full(self) -> bool:
        return len(self.verdict.problems) >= 10

    def event(self, e: Any) -> None:
        verdict = self.verdict
        verdict.events += 1
        if e.seq != self.expected_seq:
            verdict.problems.append(f"event seq {self.expected_seq} is missing (next is {e.seq})")
        self.expected_seq = e.seq + 1
        if e.prev_hash != self.prev:
            verdict.problems.append(f"event seq {e.seq}: prev_hash does not match the hash of the event before")
        digest = event_hash(self.prev, run_id=verdict.run_id, seq=e.seq, step=e.step, kind=e.kind, payload=e.payload)
        if digest != e.hash:
            verdict.problems.append(f"event seq {e.seq} ({e.kind}, step {e.step}): content does not match its hash")
        if (problem := mismatch(e.payload, e.ledger_output)) is not None:
            verdict.problems.append(f"event seq {e.seq} ({e.kind}, step {e.step}): {problem}")
        self.prev = e.hash

    def checkpoint(self, c: Any) -> None:
        verdict = self.verdict
        verdict.checkpoints += 1
        if c.step != self.expected_step:
            verdict.problems.append(f"checkpoint of step {self.expected_step} is missing")
        self.expected_step = c.step + 1
        if state_hash(c.state) != c.state_hash:
            verdict.problems.append(f"checkpoint of step {c.step}: state does not match its hash")


def events_of(*run_ids: str) -> Any:
    """The runs' events with their ledger outputs, by run and seq (what ChainCheck reads)."""
    return (
        select(events, LEDGER_OUTPUT)
        .select_from(EVENTS_WITH_OUTPUTS)
        .where(events.c.run_id.in_(run_ids))
        .order_by(events.c.run_id, events.c.seq)
    )


def checkpoints_of(*run_ids: str) -> Any:
    return (
        select(checkpoints.c.run_id, checkpoints.c.step, checkpoints.c.state, checkpoints.c.state_hash)
        .where(checkpoints.c.run_id.in_(run_ids))
        .order_by(checkpoints.c.run_id, checkpoints.c.step)
    )


class Integrity(StoreBase):
    async def verify(self, tenant_id: str, run_id: str) -> Verdict:
        """Recompute the run's event chain and checkpoint hashes, streaming rows (no full load)."""
        async with self.engine.connect() as conn:
            run = await self._run(conn, tenant_id, run_id)
            check = ChainCheck(run_id, run.fork_step)
            async for e in await conn.stream(events_of(run_id)):
                check.event(e)
                if check.full:
                    return check.verdict
            async for c in await conn.stream(checkpoints_of(run_id)):
                check.checkpoint(c)
        return check.verdict

    async def verify_tree(self, tenant_id: str, run_id: str) -> Verdict:
        """`verify` of the run and of every run below it (in `below`, depth first in call order), each
        with its sub-agent calls checked: a call whose ledger outcome is ok has a child run (its own, or
        the source's child whose recorded answer a rerun gave) that completed with that answer."""
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            nodes = await subtree(conn, tenant_id, run_id)
        verdicts = []
        for node in nodes:
            verdict = await self.verify(tenant_id, node.run.run_id)
            async with self.engine.connect() as conn:
                verdict.problems += await call_problems(conn, tenant_id, node.run)
            verdicts.append(verdict)
        return replace(verdicts[0], below=verdicts[1:])

    async def checkpoint_steps(self, tenant_id: str, run_id: str) -> list[int]:
        """The steps that have a checkpoint, in order (contiguous in an intact run)."""
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            found = await conn.scalars(
                select(checkpoints.c.step).where(checkpoints.c.run_id == run_id).order_by(checkpoints.c.step)
            )
            return list(found)

    async def deletable(self, tenant_id: str, run_id: str) -> RunRow:
        """The run's row if it may be deleted: it has ended and no fork needs its events."""
        async with self.engine.connect() as conn:
            return await self._check_deletable(conn, tenant_id, run_id)

    async def _check_deletable(
        self, conn: AsyncConnection, tenant_id: str, run_id: str, *, lock: bool = False
    ) -> RunRow:
        run = await self._run(conn, tenant_id, run_id, lock=lock)
        if run.status in LIVE:
            raise Conflict(f"run {run_id} is {run.status}: cancel it first (`waypoint cancel {run_id}`)")
        forks = await conn.scalar(select(runs.c.run_id).where(runs.c.parent_run_id == run_id).limit(1))
        if forks:
            raise Conflict(f"run {run_id} has forks (e.g. {forks}): delete them first")
        return run

    async def delete_run(self, tenant_id: str, run_id: str) -> None:
        """The retention path's last step: remove a finished run's rows (its events, checkpoints,
        ledger, recalled texts, compactions, webhook deliveries (whose bodies hold its final state)
        and attempts, and row), in one transaction."""
        async with self.engine.begin() as conn:
            await self._check_deletable(conn, tenant_id, run_id, lock=True)
            await conn.execute(text("SET LOCAL waypoint.retention = 'on'"))
            for table in (tool_effects, recalled_texts, checkpoints, events, compactions, webhook_attempts):
                await conn.execute(delete(table).where(table.c.run_id == run_id))
            scoped = (webhook_deliveries.c.run_id == run_id) & (webhook_deliveries.c.tenant_id == tenant_id)
            await conn.execute(delete(webhook_deliveries).where(scoped))
            await conn.execute(delete(runs).where(runs.c.run_id == run_id))
