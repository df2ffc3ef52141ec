"""A thread's next turn (`wp.threads.start_turn`): the Agent Protocol's run on a thread, from Python,
the CLI and HTTP alike. The first turn starts the agent; each later one forks the thread's newest
run that started, at its last step, with the new message. A turn on a busy thread follows its
multitask strategy (reject, enqueue, interrupt, rollback: see `waypoint.app.http.protocol.runs`).

The turn takes the thread's next place atomically (`store.starts.join_thread`), so two turns sent at once
(double-texting) never take one place: under enqueue or interrupt the later one waits for the
earlier; otherwise it is a Conflict. A turn that cannot start gives its place back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from waypoint.access import Action
from waypoint.checks import check_name, check_text, new_run_id
from waypoint.client._live import Live
from waypoint.client._scope import Scope, thread_target
from waypoint.client._starts import Starts
from waypoint.client._travel import Travel
from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.names import FINISHED, STARTING, MemoryView, RunStatus
from waypoint.store import RunStore
from waypoint.store.rows import RunRow
from waypoint.store.threads import ThreadRow
from waypoint.types import Budget

# What a new run on a busy thread does (the Agent Protocol's multitask strategies); the first is the default.
MULTITASK_STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")
STARTED_WITHIN_SECONDS = 10.0  # how long a turn waits for the start of the turn it came in just after


@dataclass(frozen=True)
class Turn:
    """What a turn runs: `task` (the user's message) with `agent`, and what the run gets (as for
    `start_run`). `checkpoint`: a `<run_id>:<step>` of the thread to go on from instead of its newest
    run; `create_thread`: a thread that does not exist is created (else NotFound)."""

    task: str
    agent: str
    model: str | None = None
    budget: Budget = field(default_factory=Budget)
    priority: int | None = None
    after_seconds: float | None = None
    webhook: str | None = None
    instructions: str | None = None
    assistant: tuple[str, int] | None = None
    checkpoint: str | None = None
    create_thread: bool = False


@dataclass(frozen=True)
class StartedTurn:
    """The turn's run and the status it starts in (starting, queued or scheduled); `repeat`: an
    idempotency key answered an earlier turn's run, and nothing started (`status` is None then)."""

    run_id: str
    status: str | None
    repeat: bool = False


def newest_started(thread: ThreadRow) -> RunRow | None:
    """The newest run of the thread that started (has a checkpoint): where the next run forks."""
    for member in reversed(thread.runs):
        if member.run is not None and member.run.max_steps > 0:
            return member.run
    return None


def fork_point(thread: ThreadRow, checkpoint: str | None) -> tuple[RunRow | None, int]:
    if checkpoint:
        run_id, _, step = checkpoint.rpartition(":")
        for member in thread.runs:
            if member.run_id == run_id and member.run is not None and step.isascii() and step.isdigit():
                return member.run, int(step)
        raise NotFound(f"thread {thread.thread_id} has no checkpoint {checkpoint!r}: its history lists them")
    last = newest_started(thread)
    return (last, last.steps) if last is not None else (None, 0)


class Turns:
    def __init__(self, store: RunStore, scope: Scope, starts: Starts, travel: Travel, live: Live):
        self._store = store
        self._scope = scope
        self._starts = starts
        self._travel = travel
        self._live = live

    async def start_turn(
        self,
        thread_id: str | None,
        turn: Turn,
        strategy: str | None = None,
        *,
        idempotency_key: str | None = None,
        request: Mapping[str, Any] | None = None,
        tenant_id: str | None = None,
    ) -> StartedTurn:
        """Start the thread's next turn (`thread_id` None: a run on no thread) under `strategy` (None:
        reject). With an idempotency key, a repeat answers the key's run: the key is claimed before
        the thread's place is taken, so a repeat neither takes a second place nor meets the thread
        busy with its own run (`request`: what the key stands for, default the turn)."""
        async with self._scope.act(Action.START, tenant_id, thread_target(thread_id)) as tenant_id:
            if strategy not in (None, *MULTITASK_STRATEGIES):
                raise InvalidInput(f"multitask_strategy={strategy!r} is not one of {', '.join(MULTITASK_STRATEGIES)}")
            check_text("the thread id", thread_id)
            tenant = self._scope.tenant(tenant_id)
            asked = (
                request if request is not None else {"thread_id": thread_id, "turn": asdict(turn), "strategy": strategy}
            )
            async with self._starts.idempotent(idempotency_key, asked, run_id=new_run_id(), tenant_id=tenant) as claim:
                if not claim.created:
                    return StartedTurn(claim.run_id, None, repeat=True)
                if thread_id is None:
                    await self._start(claim.run_id, tenant, turn, None)
                    return StartedTurn(claim.run_id, RunStatus.SCHEDULED if turn.after_seconds else STARTING)
                status = await self._take_turn(
                    tenant, thread_id, turn, strategy or MULTITASK_STRATEGIES[0], claim.run_id
                )
                return StartedTurn(claim.run_id, status)

    async def _take_turn(self, tenant: str, thread_id: str, turn: Turn, strategy: str, run_id: str) -> str:
        thread = await self._thread(tenant, thread_id, turn.create_thread)
        last = thread.last
        busy = last is not None and (last.run is None or last.run.status not in FINISHED)
        if busy and strategy == "reject":
            assert last is not None
            raise Conflict(
                f"thread {thread_id} is busy with run {last.run_id}: wait for it (join), cancel it "
                f"(POST /threads/{thread_id}/runs/{last.run_id}/cancel), or pass multitask_strategy enqueue, "
                "interrupt or rollback"
            )
        owner = newest_started(thread)
        if owner is not None and owner.agent != turn.agent:
            raise InvalidInput(f"thread {thread_id} talks to graph {owner.agent!r}: a thread keeps its graph (agent)")
        after: str | None = None  # the run the new one waits for
        if busy and last is not None:
            if turn.checkpoint:
                raise Conflict(
                    f"thread {thread_id} is busy with run {last.run_id}: a run from a checkpoint waits for none"
                )
            if strategy in ("interrupt", "rollback"):
                with contextlib.suppress(Conflict, InvalidInput):  # a run that ended meanwhile needs nothing
                    reason = f"a new run on its thread (multitask_strategy {strategy})"
                    await self._live.cancel(last.run_id, reason, tenant_id=tenant)
            if strategy == "rollback":
                with contextlib.suppress(NotFound):  # taken off already (a rollback racing this one)
                    await self._store.threads.release_thread_run(tenant, thread_id, last.run_id)
                thread = await self._store.threads.get_thread(tenant, thread_id)
                last = thread.last
            else:
                after = last.run_id
        parent, step = fork_point(thread, turn.checkpoint)
        if turn.after_seconds and after is None and parent is not None:
            if turn.checkpoint:
                raise InvalidInput(
                    "after_seconds with a checkpoint_id is not supported: start the run when it should run"
                )
            after = parent.run_id  # a delayed next turn goes on from that run's last step when it starts
        expected = last.run_id if last is not None else None
        before = await self._store.starts.join_thread(tenant, thread_id, run_id, multitask_strategy=strategy)
        try:
            if before != expected:  # another turn took a place meanwhile
                if after is None or before is None or strategy not in ("enqueue", "interrupt"):
                    raise Conflict(f"thread {thread_id!r} got another run meanwhile: wait for it, then try again")
                after = before  # it waits for the newest turn, as it would have for the one it saw
                await self._started(tenant, before)
            await self._start(run_id, tenant, turn, after if after is not None or parent is None else (parent, step))
        except BaseException:
            with contextlib.suppress(NotFound):  # the thread was deleted meanwhile: its place went with it
                await self._store.threads.release_thread_run(tenant, thread_id, run_id)
            raise
        if after is not None:
            return RunStatus.QUEUED
        return RunStatus.SCHEDULED if turn.after_seconds else STARTING

    async def add_message(
        self, thread_id: str, message: str, *, checkpoint: str | None = None, tenant_id: str | None = None
    ) -> tuple[str, int]:
        """Add a user message to the idle thread's state (or to `checkpoint`'s, a `<run_id>:<step>` of
        the thread: a branch) as a new checkpoint: a fork that ends before its first step (the Agent
        Protocol's update_state). Answers the fork's run and the step of its checkpoint."""
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            tenant = self._scope.tenant(tenant_id)
            thread = await self._store.threads.get_thread(tenant, thread_id)
            last = thread.last
            if last is not None and (last.run is None or last.run.status not in FINISHED):
                raise Conflict(
                    f"thread {thread_id} is busy with run {last.run_id}: its state changes when the run ends "
                    f"(join it, or cancel it: POST /threads/{thread_id}/runs/{last.run_id}/cancel)"
                )
            parent, step = fork_point(thread, checkpoint)
            if parent is None:
                raise NotFound(
                    f"thread {thread_id} has no checkpoint yet: start a run on it (its input is the first message)"
                )
            if step == 0:
                raise InvalidInput(
                    f"checkpoint {parent.run_id}:0 is a run's input: update a later checkpoint, or start a run "
                    f"from it (runs with checkpoint_id {parent.run_id}:0)"
                )
            run_id = new_run_id()
            before = await self._store.starts.join_thread(tenant, thread_id, run_id)
            try:
                if before != (last.run_id if last is not None else None):
                    raise Conflict(f"thread {thread_id!r} got another run meanwhile: wait for it, then try again")
                await self._travel.fork(
                    parent.run_id,
                    step,
                    message=message,
                    memory=MemoryView.NOW,
                    tenant_id=tenant,
                    new_run_id=run_id,
                    message_only=True,
                )
            except BaseException:
                with contextlib.suppress(NotFound):  # the thread was deleted meanwhile: its place went with it
                    await self._store.threads.release_thread_run(tenant, thread_id, run_id)
                raise
            return run_id, step

    async def _started(self, tenant: str, run_id: str) -> None:
        """Wait until a turn that took its place a moment ago is started (Postgres or Temporal knows
        it): its start is in flight in another call, and a run can wait only for a run that exists."""
        deadline = asyncio.get_running_loop().time() + STARTED_WITHIN_SECONDS
        while True:
            try:
                return await self._scope.check_tenant(run_id, tenant)
            except NotFound:
                if asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(0.05)

    async def _thread(self, tenant: str, thread_id: str, create: bool) -> ThreadRow:
        try:
            return await self._store.threads.get_thread(tenant, thread_id)
        except NotFound:
            if not create:
                raise
            check_name("the thread id", thread_id)
            return await self._store.threads.create_thread(tenant, thread_id=thread_id, if_exists="do_nothing")

    async def _start(self, run_id: str, tenant: str, turn: Turn, source: str | tuple[RunRow, int] | None) -> None:
        """Start the turn's run: a new run (after `source`, a run id to wait for, if given), or a
        fork of `source`, a (run, step) of the thread."""
        if not isinstance(source, tuple):
            await self._starts.start_run(
                turn.task,
                agent=turn.agent,
                model=turn.model,
                budget=turn.budget,
                tenant_id=tenant,
                run_id=run_id,
                priority=turn.priority,
                after_seconds=turn.after_seconds,
                after_run=source,
                webhook=turn.webhook,
                instructions=turn.instructions,
                assistant=turn.assistant,
            )
            return
        parent, step = source
        budget = turn.budget
        # A thread's next turn goes on with long-term memory as it is now (other threads' included),
        # never with what a turn after the checkpoint it starts from stored (an abandoned branch).
        await self._travel.fork(
            parent.run_id,
            step,
            message=turn.task,
            model=turn.model,
            memory=MemoryView.NOW,
            tenant_id=tenant,
            new_run_id=run_id,
            priority=turn.priority,
            webhook=turn.webhook,
            # max_steps counts this turn's steps (a run's step numbers go on from its parent's)
            budget=replace(budget, max_steps=step + budget.max_steps) if budget.max_steps else budget,
            instructions=turn.instructions,
            assistant=turn.assistant,
        )
