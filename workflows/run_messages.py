"""What a running agent run answers: the `progress` query and its updates (pause, resume, cancel,
send, approve, deny). Each update is validated first, so a refused one answers the caller with
the reason and changes nothing. AgentRunWorkflow inherits them; the run loop reads the state
they set.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

from waypoint.workflows.cancels import CancelRecord

with workflow.unsafe.imports_passed_through():
    from waypoint.names import FINISHED, DecisionKind, Query, RunStatus, Update
    from waypoint.types import Decision, PendingApproval, RunProgress, RunState, StepDecision


class RunMessages(CancelRecord):
    _state: RunState  # set by the workflow's @workflow.init, before any message can arrive

    def __init__(self) -> None:
        self._run_id = ""
        self._tenant_id = ""
        self._status = "starting"
        self._last_action: str | None = None
        self._paused = False
        self._shown_paused = False  # the run's row says paused (its last status write)
        self._awaiting_children = False  # a step waits on sub-agent runs (patch pause-shown-while-children-run-1)
        self._cancel_reason: str | None = None
        self._messages: list[str] = []
        self._pending: dict[str, PendingApproval] = {}
        self._decisions: dict[str, StepDecision] = {}
        self._store_locally: bool | None = None  # decided once per execution (a patch)
        self._typed_on: bool | None = None  # a typed run answers final_answer calls itself (a patch)
        self._memory_retry_at = 0  # the first step that tries the memory worker again
        self._memory_on_main: bool | None = None  # model calls with memory on the run's own queue (a patch)
        self._flight = {}  # what the current step has in flight (workflows/cancels.py)
        self._unstarted_calls = []

    @workflow.query(name=Query.PROGRESS)
    def progress(self) -> RunProgress:
        state = self._state
        return RunProgress(
            step=state.step,
            status=self._status,
            last_action=self._last_action,
            input_tokens=state.input_tokens,
            output_tokens=state.output_tokens,
            cost_usd=state.cost_usd,
            pending_approvals=list(self._pending.values()),
            queued_messages=len(self._messages),
            execution=state.executions,
        )

    def _refuse_if_ending(self) -> None:
        if self._status in FINISHED or self._cancel_reason is not None:
            raise ApplicationError(f"run {self._run_id} is {self._status}: it takes no more messages")

    @workflow.update(name=Update.PAUSE)
    def pause(self) -> RunProgress:
        self._paused = True
        if self._awaiting_children and self._status == RunStatus.RUNNING:
            self._status = RunStatus.PAUSED  # the answer shows what the row is about to (agent_run.py)
        return self.progress()

    @pause.validator
    def _validate_pause(self) -> None:
        self._refuse_if_ending()
        if self._paused:
            raise ApplicationError(f"run {self._run_id} is already paused")

    @workflow.update(name=Update.RESUME)
    def resume(self) -> RunProgress:
        self._paused = False
        if self._status == RunStatus.PAUSED:  # the answer shows the state after the change
            self._status = RunStatus.RUNNING
        return self.progress()

    @resume.validator
    def _validate_resume(self) -> None:
        self._refuse_if_ending()
        if not self._paused:
            raise ApplicationError(f"run {self._run_id} is not paused")

    @workflow.update(name=Update.CANCEL)
    def cancel(self, reason: str | None) -> RunProgress:
        self._accept_cancel(reason or "cancelled by a user")
        return self.progress()

    @cancel.validator
    def _validate_cancel(self, reason: str | None) -> None:
        self._refuse_if_ending()

    @workflow.update(name=Update.SEND)
    def send(self, text: str) -> RunProgress:
        self._messages.append(text)
        return self.progress()

    @send.validator
    def _validate_send(self, text: str) -> None:
        self._refuse_if_ending()
        if not text.strip():
            raise ApplicationError("the message is empty")

    @workflow.update(name=Update.APPROVE)
    def approve(self, decision: Decision) -> RunProgress:
        self._decide(decision, approved=True)
        return self.progress()

    @approve.validator
    def _validate_approve(self, decision: Decision) -> None:
        pending = self._pending[self._pending_call(decision)]
        if pending.asks_human and decision.answer is None:
            raise ApplicationError(
                f"call {pending.call_id} asks a question ({pending.tool}): approve it with an answer"
            )
        if not pending.asks_human and decision.answer is not None:
            raise ApplicationError(
                f"call {pending.call_id} ({pending.tool}) waits for an approval, not an answer: approve it "
                "(optionally with an edited input) or deny it"
            )
        if pending.asks_human and decision.edited_input is not None:
            raise ApplicationError(f"call {pending.call_id} asks a question: answer it; it has no input to edit")

    @workflow.update(name=Update.DENY)
    def deny(self, decision: Decision) -> RunProgress:
        self._decide(decision, approved=False)
        return self.progress()

    @deny.validator
    def _validate_deny(self, decision: Decision) -> None:
        self._pending_call(decision)

    def _pending_call(self, decision: Decision) -> str:
        if not self._pending:
            raise ApplicationError(f"run {self._run_id} has no tool call waiting for approval")
        if decision.call_id is None:
            if len(self._pending) > 1:
                waiting = ", ".join(f"{p.call_id} ({p.tool})" for p in self._pending.values())
                raise ApplicationError(f"{len(self._pending)} tool calls wait: name one of {waiting}")
            return next(iter(self._pending))
        if decision.call_id not in self._pending:
            raise ApplicationError(f"no tool call {decision.call_id!r} waits for approval in run {self._run_id}")
        return decision.call_id

    def _decide(self, decision: Decision, *, approved: bool) -> None:
        call_id = self._pending_call(decision)
        kind = DecisionKind.APPROVED if approved else DecisionKind.DENIED
        edited, answer = (decision.edited_input, decision.answer) if approved else (None, None)
        self._decisions[call_id] = StepDecision(call_id, kind, decision.reason or "", edited, answer, decision.actor)
        del self._pending[call_id]
        if not self._pending:  # the answer shows the state after the change
            self._status = RunStatus.PAUSED if self._paused else RunStatus.RUNNING
