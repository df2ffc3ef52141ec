"""A running run: messages to it (pause, resume, cancel, send, approve, deny) and its result. A run
that is stuck takes none of them and says why at once, but a cancel ends it anyway."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any, overload

from waypoint.access import Action, current_actor
from waypoint.checks import check_edited_input, check_name, check_text
from waypoint.client._catalog import Catalog
from waypoint.client._runs import Runs
from waypoint.client._scope import Scope, TemporalLink
from waypoint.client._stuck import Stuck
from waypoint.errors import Conflict, InvalidInput, Mismatch, NotFound
from waypoint.names import FINISHED, RunStatus, Update
from waypoint.store import RunStore
from waypoint.types import Decision, M, PendingApproval, RunProgress, RunResult


def decision(call_id: str | None, reason: str | None) -> Decision:
    """An approval or a denial, its call id and reason checked, by the current actor (the run
    records all three)."""
    return Decision(
        call_id=check_name("the call id", call_id), reason=check_text("the reason", reason), actor=current_actor().id
    )


class Live:
    def __init__(
        self, store: RunStore, temporal: TemporalLink, scope: Scope, stuck: Stuck, runs: Runs, catalog: Catalog
    ):
        self._store = store
        self._temporal = temporal
        self._scope = scope
        self._stuck = stuck
        self._runs = runs
        self._catalog = catalog

    async def _update(self, run_id: str, name: Update, arg: object, tenant_id: str | None) -> RunProgress:
        """Deliver a message; a run that is stuck (its workflow task keeps failing) takes none, and
        says why at once, but a cancel ends it anyway (see `cancel`)."""
        await self._scope.check_tenant(run_id, tenant_id)
        gateway = await self._temporal()
        why = await gateway.stuck(run_id)
        if why is not None:
            if name == Update.CANCEL:
                return await self._cancel_stuck(run_id, arg if isinstance(arg, str) else None, why, tenant_id)
            raise Conflict(
                f"run {run_id} is stuck: {why}. It takes no {name} until a worker can run it again; "
                f"`waypoint cancel {run_id}` ends it (its workflow is terminated), then it can be deleted"
            )
        return await gateway.update(run_id, name, arg)

    async def _cancel_stuck(self, run_id: str, reason: str | None, why: str, tenant_id: str | None) -> RunProgress:
        """A stuck run cannot run its own cancel: its workflow is terminated, and its row (if it has
        one) ends `cancelled` with the reason and why it was stuck."""
        tenant = self._scope.tenant(tenant_id)
        error = f"{reason or 'cancelled by a user'} (while stuck: {why}; its workflow was terminated)"
        await (await self._temporal()).terminate(run_id, error)
        self._stuck.gauge(run_id, tenant, None)
        try:
            row = await self._store.log.finish_run(tenant, run_id, RunStatus.CANCELLED, None, error)
        except NotFound:  # stuck before its row was written: Temporal keeps the reason
            return RunProgress(step=0, status=RunStatus.CANCELLED)
        return RunProgress(
            step=row.steps,
            status=row.status,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost_usd=row.cost_usd,
        )

    async def pause(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """Pause before the next step (the current one finishes); its live sub-agent runs pause too.
        A run whose step waits on its sub-agent runs is `paused` at once (its tree holds still)."""
        async with self._scope.on_run(Action.PAUSE, tenant_id, run_id) as tenant_id:
            progress = await self._update(run_id, Update.PAUSE, None, tenant_id)
            await self._below(run_id, Update.PAUSE, tenant_id)
            return progress

    async def resume(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """Go on after a pause; its paused sub-agent runs go on too."""
        async with self._scope.on_run(Action.RESUME, tenant_id, run_id) as tenant_id:
            progress = await self._update(run_id, Update.RESUME, None, tenant_id)
            await self._below(run_id, Update.RESUME, tenant_id)
            return progress

    async def _below(self, run_id: str, name: Update, tenant_id: str | None) -> None:
        """Deliver a pause or a resume to the live runs below `run_id` in its tree (a workflow cannot
        send an update to another, and Temporal's parent-close policy covers only the parent's end).
        A run that has just ended, or is already in that state, is passed over. A resume goes to every
        live run below, not only those shown `paused`: one paused while it waited for approval still
        shows that wait, and refuses the resume only if it is not paused."""
        for row in await self._store.trees.live_below(self._scope.scoped(tenant_id, run_id), run_id):
            if name == Update.PAUSE and row.status == RunStatus.PAUSED:
                continue
            with contextlib.suppress(Conflict, InvalidInput, NotFound):
                await self._update(row.run_id, name, None, tenant_id)

    async def cancel(self, run_id: str, reason: str | None = None, *, tenant_id: str | None = None) -> RunProgress:
        """End the run and its sub-agent runs with status `cancelled`: no model or tool call starts
        after it, a model call in flight is cancelled, tools in flight finish, and the step gets a
        `step_cancelled` event naming what was in flight (workflows/cancels.py); a stuck run's
        workflow is terminated and its row marked cancelled. Answers once the cancel is accepted."""
        async with self._scope.on_run(Action.CANCEL, tenant_id, run_id) as tenant_id:
            return await self._update(run_id, Update.CANCEL, check_text("the reason", reason), tenant_id)

    async def send(self, run_id: str, text: str, *, tenant_id: str | None = None) -> RunProgress:
        """Add a user message, read by the run's next model call."""
        async with self._scope.on_run(Action.SEND, tenant_id, run_id) as tenant_id:
            if not check_text("the message", text).strip():
                raise InvalidInput("the message is empty: send some text")
            return await self._update(run_id, Update.SEND, text, tenant_id)

    async def approve(
        self,
        run_id: str,
        call_id: str | None = None,
        reason: str | None = None,
        *,
        edited_input: dict[str, Any] | None = None,
        answer: str | None = None,
        tenant_id: str | None = None,
    ) -> RunProgress:
        """Let a tool call that waits for approval run: the run's own, or (given the id of a run
        above it) that of the one run of its tree that waits. `edited_input`: the arguments the tool
        runs with instead of the model's (checked against its schema); `answer`: the answer to an
        `ask_human` call (its result). Both are recorded with the decision."""
        async with self._scope.on_run(Action.APPROVE, tenant_id, run_id) as tenant_id:
            target = await self._waiting_run(run_id, call_id, tenant_id)
            chosen = decision(call_id, reason)
            if edited_input is not None or answer is not None:
                check_text("the answer", answer)
                pending = await self._pending(target, call_id, tenant_id)
                if pending is not None:
                    edited_input = await self._check_answer(target, pending, edited_input, answer, tenant_id)
                chosen = replace(chosen, edited_input=edited_input, answer=answer)
            return await self._update(target, Update.APPROVE, chosen, tenant_id)

    async def _pending(self, run_id: str, call_id: str | None, tenant_id: str | None) -> PendingApproval | None:
        """The call a decision is about, if it waits (the update itself says why when none does)."""
        waiting = (await self._runs.progress(run_id, tenant_id=tenant_id)).pending_approvals
        if call_id is None:
            return waiting[0] if len(waiting) == 1 else None
        return next((p for p in waiting if p.call_id == call_id), None)

    async def _check_answer(
        self,
        run_id: str,
        pending: PendingApproval,
        edited_input: dict[str, Any] | None,
        answer: str | None,
        tenant_id: str | None,
    ) -> dict[str, Any] | None:
        what = f"call {pending.call_id} ({pending.tool})"
        if pending.asks_human:
            if edited_input is not None or answer is None:
                raise Mismatch(f"{what} asks a question: it expects an answer (text), not an edited input")
            return None
        if answer is not None:
            raise Mismatch(
                f"{what} waits for an approval, not an answer: approve it (optionally with an edited input) or deny it"
            )
        row = await self._runs.run(run_id, tenant_id=tenant_id)
        try:
            tools = (await self._catalog.agent(row.agent)).tools
        except NotFound:  # an agent no worker serves now: its run checks the arguments when the tool runs
            tools = []
        schema = next((t.parameters for t in tools if t.name == pending.tool), None)
        return check_edited_input(pending.tool, schema, edited_input)

    async def deny(
        self, run_id: str, call_id: str | None = None, reason: str | None = None, *, tenant_id: str | None = None
    ) -> RunProgress:
        """Refuse a waiting tool call; the model is told, with the reason. As `approve`, the id of a
        run above the waiting one reaches it."""
        async with self._scope.on_run(Action.DENY, tenant_id, run_id) as tenant_id:
            target = await self._waiting_run(run_id, call_id, tenant_id)
            return await self._update(target, Update.DENY, decision(call_id, reason), tenant_id)

    async def _waiting_run(self, run_id: str, call_id: str | None, tenant_id: str | None) -> str:
        """The run whose call a decision given for `run_id` is about: `run_id` itself, unless it is not
        waiting and exactly one run below it is (or one whose pending calls include `call_id`)."""
        tenant = self._scope.scoped(tenant_id, run_id)
        waiting = await self._store.trees.waiting_below(tenant, run_id)
        if not waiting:  # (a run still starting has no row yet: its own update answers)
            return run_id
        row = await self._store.get_run(tenant, run_id)
        if call_id is not None:
            for below in waiting:
                progress = await (await self._temporal()).progress(below.run_id)
                if any(p.call_id == call_id for p in progress.pending_approvals):
                    return below.run_id
            return run_id  # its own call, or its own update says there is no such call
        if row.status not in FINISHED and (await (await self._temporal()).progress(run_id)).pending_approvals:
            return run_id
        if len(waiting) > 1:
            names = ", ".join(w.run_id for w in waiting)
            raise Conflict(f"{len(waiting)} runs below {run_id} wait for approval ({names}): name one of them")
        return waiting[0].run_id

    @overload
    async def result(self, run_id: str, *, tenant_id: str | None = None) -> RunResult: ...

    @overload
    async def result(self, run_id: str, output_type: type[M], *, tenant_id: str | None = None) -> M: ...

    async def result(
        self, run_id: str, output_type: type[M] | None = None, *, tenant_id: str | None = None
    ) -> RunResult | M:
        """Wait for a run to end. A failed run returns its result with status `failed` and the error.
        A typed run's answer is its `output_json`; given its pydantic `output_type`, the answer is
        returned as an instance of it (Conflict when the run ended without one: the reason is in it)."""
        await self._scope.check_tenant(run_id, tenant_id)
        result = await (await self._temporal()).result(run_id)
        if result is None or result.output_stored:  # the whole answer (or its parsed JSON) is in Postgres
            result = (await self._runs.run(run_id, tenant_id=tenant_id)).result()
        return result if output_type is None else result.output_as(output_type)
