"""`wp.threads`: the Agent Protocol's threads (conversations, each a chain of runs), tenant-scoped
and validated here for every surface, as the rest of the client does for runs.

    thread = await wp.threads.create(metadata={"user": "ada"}, tenant_id="acme")
    turn = await wp.threads.start_turn(thread.thread_id, Turn("Hello", agent="demo"), tenant_id="acme")
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import Any

from waypoint.access import Action
from waypoint.checks import check_json, check_name, check_text
from waypoint.client._live import Live
from waypoint.client._records import Records
from waypoint.client._scope import Scope, thread_target
from waypoint.client._turns import MULTITASK_STRATEGIES, StartedTurn, Turn, Turns
from waypoint.errors import InvalidInput, NotFound
from waypoint.store.threads import ThreadRow
from waypoint.store.threads import Threads as ThreadStore
from waypoint.types import RunProgress

IF_EXISTS = ("raise", "do_nothing")


class Threads:
    def __init__(self, store: ThreadStore, scope: Scope, turns: Turns, live: Live, records: Records):
        self._store = store
        self._scope = scope
        self._scoped = scope.scoped  # the tenant, once the run ids it names are checked
        self._turns = turns
        self._live = live
        self._records = records
        self.add_message = turns.add_message

    async def start_turn(
        self,
        thread_id: str | None,
        input: Turn,
        strategy: str | None = None,
        *,
        idempotency_key: str | None = None,
        request: Mapping[str, Any] | None = None,
        tenant_id: str | None = None,
    ) -> StartedTurn:
        """Start the thread's next turn: `input.task` for `input.agent`, forking the thread's newest
        run that started (or `input.checkpoint`), under `strategy` when the thread is busy (reject,
        the default; enqueue, interrupt or rollback). Two turns sent at once never take one place:
        see `waypoint.client._turns`. With an idempotency key, a repeat answers the key's run
        (`request`: what the key stands for, default the turn). `thread_id` None: a run on no thread."""
        return await self._turns.start_turn(
            thread_id, input, strategy, idempotency_key=idempotency_key, request=request, tenant_id=tenant_id
        )

    def _tenant(self, tenant_id: str | None, thread_id: str | None, *run_ids: str | None) -> str:
        check_text("the thread id", thread_id)
        return self._scoped(tenant_id, *run_ids)

    async def create(
        self,
        *,
        thread_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        if_exists: str = "raise",
        tenant_id: str | None = None,
    ) -> ThreadRow:
        """A new thread; an existing id is a Conflict, or with `if_exists="do_nothing"` that thread
        (another tenant's id is a Conflict too, never a way in)."""
        thread_id = thread_id or str(uuid.uuid4())  # named here, so the audit log's entry names it too
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            if if_exists not in IF_EXISTS:
                raise InvalidInput("if_exists is raise or do_nothing")
            check_name("the thread id", thread_id)
            check_json("the metadata", metadata)
            tenant = self._tenant(tenant_id, thread_id)
            return await self._store.create_thread(tenant, thread_id=thread_id, metadata=metadata, if_exists=if_exists)

    async def get(self, thread_id: str, *, tenant_id: str | None = None) -> ThreadRow:
        return await self._store.get_thread(self._tenant(tenant_id, thread_id), thread_id)

    async def update(self, thread_id: str, metadata: dict[str, Any], *, tenant_id: str | None = None) -> ThreadRow:
        """Merge `metadata` into the thread's."""
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            check_json("the metadata", metadata)
            return await self._store.update_thread(self._tenant(tenant_id, thread_id), thread_id, metadata)

    async def delete(self, thread_id: str, *, tenant_id: str | None = None) -> None:
        """Forget the thread (its runs stay in the log: `wp.delete` removes a run)."""
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            await self._store.delete_thread(self._tenant(tenant_id, thread_id), thread_id)

    async def copy(self, thread_id: str, *, tenant_id: str | None = None) -> ThreadRow:
        """A new thread holding the same runs (shared, never copied)."""
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            return await self._store.copy_thread(self._tenant(tenant_id, thread_id), thread_id)

    async def search(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        tenant_id: str | None = None,
    ) -> list[ThreadRow]:
        """The tenant's threads, newest first, whose metadata contains `metadata`."""
        check_json("the metadata", metadata)
        tenant = self._scoped(tenant_id)
        return await self._store.search_threads(tenant, metadata=metadata, limit=limit, offset=offset)

    async def count(self, *, metadata: dict[str, Any] | None = None, tenant_id: str | None = None) -> int:
        check_json("the metadata", metadata)
        return await self._store.count_threads(self._scoped(tenant_id), metadata=metadata)

    async def reserve_run(
        self,
        thread_id: str,
        position: int,
        run_id: str,
        *,
        multitask_strategy: str | None = None,
        tenant_id: str | None = None,
    ) -> None:
        """Take slot `position` of the thread for `run_id`, created with `multitask_strategy` (what a
        new run on a busy thread does: reject, enqueue, interrupt or rollback; None: reject); a
        Conflict when another run took it first."""
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            if multitask_strategy not in (None, *MULTITASK_STRATEGIES):
                raise InvalidInput(
                    f"multitask_strategy={multitask_strategy!r} is not one of {', '.join(MULTITASK_STRATEGIES)}"
                )
            tenant = self._tenant(tenant_id, thread_id, run_id)
            await self._store.reserve_thread_run(tenant, thread_id, position, run_id, multitask_strategy)

    async def release_run(self, thread_id: str, run_id: str, *, tenant_id: str | None = None) -> None:
        """Take the run off the thread (a run that could not start, or one deleted); NotFound unless
        the thread is the tenant's and holds the run."""
        async with self._scope.act(Action.THREAD_WRITE, tenant_id, thread_target(thread_id)) as tenant_id:
            tenant = self._tenant(tenant_id, thread_id, run_id)
            await self._store.release_thread_run(tenant, thread_id, run_id)

    async def cancel_run(
        self, run_id: str, reason: str | None = None, *, rollback: bool = False, tenant_id: str | None = None
    ) -> RunProgress:
        """Cancel the run (as `wp.cancel`); `rollback` also takes it off its thread (its steps are no
        part of the thread's state; the run stays in the log, cancelled)."""
        async with self._scope.on_run(Action.CANCEL, tenant_id, run_id) as tenant_id:
            progress = await self._live.cancel(run_id, reason, tenant_id=tenant_id)
            if rollback and (thread_id := await self.of_run(run_id, tenant_id=tenant_id)):
                with contextlib.suppress(NotFound):
                    await self.release_run(thread_id, run_id, tenant_id=tenant_id)
            return progress

    async def delete_run(self, run_id: str, *, thread_id: str | None = None, tenant_id: str | None = None) -> None:
        """Delete a finished run (as `wp.delete`) and take it off `thread_id`, else off the first thread
        that holds it, if one does."""
        async with self._scope.on_run(Action.DELETE, tenant_id, run_id) as tenant_id:
            held = thread_id or await self.of_run(run_id, tenant_id=tenant_id)
            await self._records.delete(run_id, tenant_id=tenant_id)
            if held is None:
                return
            if thread_id is not None:
                await self.release_run(thread_id, run_id, tenant_id=tenant_id)
                return
            with contextlib.suppress(NotFound):
                await self.release_run(held, run_id, tenant_id=tenant_id)

    async def of_run(self, run_id: str, *, tenant_id: str | None = None) -> str | None:
        """The first thread (of this tenant) that holds the run, if any."""
        return await self._store.thread_of_run(self._scoped(tenant_id, run_id), run_id)


__all__ = ["MULTITASK_STRATEGIES", "Threads"]
