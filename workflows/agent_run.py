"""AgentRunWorkflow: one agent run, step by step.

Each step is `call_model`, one `run_tool` per tool call, then `record_step`,
which mirrors the step into Postgres. The workflow carries only small values
(counters, the model's answer, tool previews); contexts are loaded from
checkpoints by the activities and long tool outputs stay in the ledger, so
history stays small however long the context grows.

Between steps the workflow checks, in this order: cancel, budgets (steps,
tokens, cost, wall clock), pause, and whether to continue as new. Within a step, a model call whose
tree's budget pool (or tenant's daily budget) is spent does not go out: the run ends
`budget_exceeded` (`BudgetSpent`); one whose room is held by calls in flight waits, as for capacity. The
messages a run takes (pause, resume, cancel, send, approve, deny) and its
`progress` query are in `run_messages.py`; sub-agent calls in `subagents.py`; the model
failover of agents with several models in `failover.py`; what a cancel stops, lets finish and
records, across the run's tree, in `cancels.py`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from waypoint.workflows.cancels import TREE_CANCEL, StepCancelled
from waypoint.workflows.capacity import CapacityWaits
from waypoint.workflows.failover import ModelFailover
from waypoint.workflows.run_messages import RunMessages
from waypoint.workflows.starts import WaitToStart, waits_to_start
from waypoint.workflows.subagents import SubAgentCalls, not_started

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.compaction_types import CompactionSummary, CompactRunInput, summary_episode
    from waypoint.errors import MemoryElsewhere, failure_message
    from waypoint.names import FINAL_ANSWER_TOOL, Activity, RunStatus, ToolOutcome, WebhookEvent, Workflow
    from waypoint.pricing import format_usd
    from waypoint.types import (
        Budget,
        CallModelInput,
        DeliverWebhookInput,
        FinishRunInput,
        Memory,
        MemoryStepInput,
        MemoryStepResult,
        ModelTurn,
        PendingApproval,
        RunInput,
        RunPlan,
        RunResult,
        RunState,
        RunToolInput,
        SetStatusInput,
        StartRunInput,
        StepDecision,
        StepRecord,
        ToolCall,
        ToolResult,
        ToolSpec,
        TypedAnswer,
        WebhookDeliveryInput,
    )

DEFAULT_TOOL = ToolSpec(name="", timeout_seconds=retry.DEFAULT_TOOL_TIMEOUT_SECONDS)
# What the model reads after an empty answer (neither text nor a tool call).
EMPTY_ANSWER = "Your last answer was empty. Answer the task in text, or call a tool."
# What an activity that failed raises in the workflow: an ActivityError (its cause inside) when it
# was remote; when it was local, the activity's own ApplicationError, or a timeout.
FAILED = (ActivityError, ApplicationError, ActivityTimeout)
# After a step found no memory worker, the memory queue is tried again this many steps later.
MEMORY_RETRY_STEPS = 10
# What the model reads after a final_answer call that validated (the run ends after its step).
ACCEPTED = "accepted: this is the run's final answer"
# Inline compaction at most once per this many steps, however large the newest turns are.
COMPACT_EVERY_MIN_STEPS = 5
# Patches of issue 41: a fork that only adds a message (update_state) ends `completed` once started
# (runs from before ended at their budget, `max_steps`); a pause or resume taken while a step waits
# on sub-agent runs shows at once, on the row and in the progress query (before: at the step's end).
MESSAGE_ONLY = "message-only-fork-1"
PAUSE_SHOWN = "pause-shown-while-children-run-1"


def stop_reason(
    state: RunState, cancel_reason: str | None, deadline_remaining: float | None
) -> tuple[RunStatus, str] | None:
    """Why the run must stop before its next step, as (final status, reason), or None."""
    plan = state.plan
    if cancel_reason is not None:
        return RunStatus.CANCELLED, cancel_reason
    if state.step >= plan.max_steps:
        return RunStatus.MAX_STEPS, f"max_steps: {plan.max_steps} steps done"
    # A run's budgets cover its sub-agent runs too (children_* stay 0 in runs without any).
    used = state.input_tokens + state.output_tokens + state.children_tokens
    if plan.max_tokens is not None and used >= plan.max_tokens:
        return RunStatus.BUDGET_EXCEEDED, f"token budget reached: {used} of {plan.max_tokens} tokens used"
    if plan.max_cost_usd is not None and state.cost_usd + state.children_cost_usd >= plan.max_cost_usd:
        spent, budget = format_usd(state.cost_usd + state.children_cost_usd), format_usd(plan.max_cost_usd)
        return RunStatus.BUDGET_EXCEEDED, f"cost budget reached: {spent} of {budget} spent"
    if deadline_remaining is not None and deadline_remaining <= 0:
        return RunStatus.BUDGET_EXCEEDED, f"deadline reached: {plan.deadline_seconds:g} s of wall-clock time passed"
    return None


class BudgetSpent(Exception):
    """A model call found a budget it draws from spent (its tree's pool, its tenant's day): the run ends
    `budget_exceeded` with the reason, and the step gets no checkpoint."""


def not_run(call: ToolCall, outcome: ToolOutcome, why: str) -> ToolResult:
    """The result of a tool call the workflow decided not to run (the model reads `why`)."""
    return ToolResult(call_id=call.id, name=call.name, is_error=True, outcome=outcome, output=f"error: {why}")


@workflow.defn(name=Workflow.AGENT_RUN)
class AgentRunWorkflow(RunMessages, SubAgentCalls, ModelFailover, CapacityWaits, WaitToStart):
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        """The run's state exists before its first message can arrive: carried over when the run
        continued as new, else a placeholder (no plan yet, status `starting`) until `start_run`."""
        super().__init__()
        self._run_id = workflow.info().workflow_id
        self._tenant_id = inp.tenant_id
        self._caller = inp.parent is not None  # a sub-agent run
        if inp.resume is not None:
            self._state = replace(inp.resume, executions=inp.resume.executions + 1)
            self._paused = self._state.paused
            self._messages = list(self._state.pending_messages)
        else:
            start_step = inp.fork.step if inp.fork is not None else 0
            self._state = RunState(plan=RunPlan(model=inp.model or "", max_steps=0), step=start_step, started_at=0.0)

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        if not workflow.patched(TREE_CANCEL):  # runs from before: Temporal's cancel request lands anywhere
            return await self._run(inp)
        self._tree_cancel = True
        return await self._shielded(self._run(inp))

    async def _run(self, inp: RunInput) -> RunResult:
        if waits_to_start(inp) and workflow.patched("wait-to-start-1"):
            ready = await self._wait_to_start(inp)
            if ready is None:
                return await self._finish_unstarted(inp)
            inp = ready
        if inp.resume is None:
            plan = await self._start(inp)
            self._state = replace(self._state, plan=plan, step=plan.start_step, started_at=workflow.now().timestamp())
        self._status = RunStatus.RUNNING
        first_step = self._state.step
        fork = inp.fork
        message_only = fork is not None and fork.message_only and workflow.patched(MESSAGE_ONLY)

        status, output, reason = RunStatus.MAX_STEPS, None, None
        output_is_json = False  # output is a typed answer: validated JSON text
        interrupted: dict[str, Any] | None = None
        try:
            while True:
                stop = stop_reason(self._state, self._cancel_requested(), self._deadline_remaining())
                if message_only and (stop is None or stop[0] == RunStatus.MAX_STEPS):
                    status = RunStatus.COMPLETED  # start_run added its message: it has no step to take
                    break
                if stop is None and self._paused:
                    await self._wait_while_paused()
                    continue  # look at cancel and budgets again
                if stop is not None:
                    status, reason = stop
                    break
                if self._shown_paused and workflow.patched(PAUSE_SHOWN):
                    # Resumed after its row said paused (during a step), before this boundary's check.
                    await self._set_status(RunStatus.RUNNING)
                if self._should_continue_as_new(first_step):
                    await self._wait_condition(workflow.all_handlers_finished)
                    if self._tree_cancel and self._cancel_requested() is not None:
                        continue  # a new execution would not know of the cancel
                    self._continue_as_new(inp)
                repairs_before = self._state.repairs
                turn, results = await self._step(inp)
                if self._tree_cancel and self._cancel_requested() is not None:
                    continue  # the step is recorded as it ended; the run ends cancelled, whatever it answered
                answer = turn.answer if self._typed() else None
                if answer is not None and answer.output_json is not None:
                    status, output, reason, output_is_json = RunStatus.COMPLETED, answer.output_json, None, True
                    break
                if answer is not None and answer.call_id is None:
                    # A text answer that is not the typed answer: the model reads why, and may answer again.
                    self._messages.append(answer.error or "")
                    self._state = replace(self._state, repairs=repairs_before + 1)
                    if self._state.repairs > self._state.plan.max_repairs:
                        status = RunStatus.FAILED
                        n = self._state.repairs
                        reason = f"the model's answer did not validate {n} times; last: {answer.error}"
                        break
                    continue
                if not turn.tool_calls and not (turn.content or "").strip() and workflow.patched("empty-answer-1"):
                    # An empty answer is not a completion: the model is told, and may answer again.
                    self._messages.append(EMPTY_ANSWER)
                    self._state = replace(self._state, repairs=repairs_before + 1)
                    if self._state.repairs > self._state.plan.max_repairs:
                        status = RunStatus.FAILED
                        reason = f"the model answered nothing (no text, no tool call) {self._state.repairs} times"
                        break
                    continue
                if not turn.tool_calls:
                    status, output, reason = RunStatus.COMPLETED, turn.content, None
                    break
                if self._state.repairs > self._state.plan.max_repairs:
                    bad = next(r for r in results if r.outcome == ToolOutcome.BAD_CALL)
                    status = RunStatus.FAILED
                    typed = answer is not None and bad.name == FINAL_ANSWER_TOOL
                    what = "answers did not validate" if typed else "made invalid tool calls"
                    reason = f"the model {what} {self._state.repairs} steps in a row; last: {bad.output}"
                    break
        except StepCancelled as stopped:
            status, reason = RunStatus.CANCELLED, self._cancel_reason
            if self._tree_cancel:
                interrupted = self._cancelled_step(
                    stopped.step, recorded=False, why=str(stopped), activity=stopped.activity
                )
            else:
                interrupted = {"step": stopped.step, "activity": stopped.activity, "why": str(stopped)}
        except BudgetSpent as spent:
            status, reason = RunStatus.BUDGET_EXCEEDED, str(spent)
        except FAILED as exc:
            status, reason = RunStatus.FAILED, failure_message(exc)
        except asyncio.CancelledError:
            # Temporal asked the workflow to cancel: its caller ended (the parent-close policy of a
            # sub-agent run) or someone cancelled the workflow itself. The run records its end.
            # (Runs from before cancel-tree-1 only: newer ones take the request as a cancel, cancels.py.)
            if not workflow.patched("cancel-request-1"):
                raise
            self._cancel_reason = self._cancel_reason or (
                "its caller ended" if inp.parent is not None else "its workflow was cancelled"
            )
            status, reason = RunStatus.CANCELLED, self._cancel_reason

        if status == RunStatus.CANCELLED and interrupted is None:
            interrupted = self._cancelled_record  # the step a cancel came during, recorded as it ended
        state = self._state
        # A sub-agent run's caller waits for its end: its last step (the answer, which its caller's
        # next step remembers too) goes to long-term memory with the next compaction pass instead.
        if state.step > state.plan.start_step and status != RunStatus.FAILED and inp.parent is None:
            await self._memory(inp, remember=state.step, recall=None)
        self._status = status
        finish = FinishRunInput(
            run_id=self._run_id,
            tenant_id=inp.tenant_id,
            status=status,
            output=output,
            error=reason,
            interrupted=interrupted,
            output_is_json=output_is_json,
        )
        result: RunResult = await self._store(Activity.FINISH_RUN, finish, RunResult)
        await self._deliver_webhook(inp)
        if status == RunStatus.FAILED:
            raise ApplicationError(f"run {self._run_id} failed at step {state.step + 1}: {reason}", non_retryable=True)
        return result

    async def _start(self, inp: RunInput) -> RunPlan:
        start = StartRunInput(
            run_id=self._run_id,
            tenant_id=inp.tenant_id,
            agent=inp.agent,
            task=inp.task,
            model=inp.model,
            budget=inp.budget or Budget(),
            fork=inp.fork,
            parent=inp.parent,
            pin_model=inp.pin_model,
            priority=inp.priority,
            # An activity's input, not a command: replay compares neither, so no patch is needed.
            schedule_id=inp.schedule_id,
            webhook=inp.webhook,
            instructions=inp.instructions,
            assistant_id=inp.assistant_id,
            assistant_version=inp.assistant_version,
            batch_id=inp.batch_id,
        )
        try:
            # It may list the tools of the agent's MCP servers (starting stdio servers) first.
            plan: RunPlan = await self._store(
                Activity.START_RUN, start, RunPlan, timeout=retry.START_TIMEOUT, policy=retry.START_RETRY
            )
            return plan
        except FAILED as exc:
            reason = f"run {self._run_id} could not start: {failure_message(exc)}"
        self._status = RunStatus.FAILED
        if workflow.patched("failed-start-row-1"):  # a run given an id always gets a row
            # (a run that waited to start has its row: it just ends)
            failed = FinishRunInput(
                self._run_id, inp.tenant_id, RunStatus.FAILED, error=reason, start=None if self._held else start
            )
            await self._store(Activity.FINISH_RUN, failed, RunResult)
            await self._deliver_webhook(inp)
        raise ApplicationError(reason, non_retryable=True)

    async def _deliver_webhook(self, inp: RunInput) -> None:
        """Post the finished run to its webhook, if it has one (after FINISH_RUN: the body is the
        final row). A delivery is a workflow of its own (workflows/webhooks.py) that outlives the
        run's: this one ends once it has started, however long the receiver is down. Runs from before
        patch webhook-2 posted here, retried for half a minute; a final failure was logged and
        dropped, so the run's status and its workflow's result stay as FINISH_RUN made them."""
        if not inp.webhook or not workflow.patched("webhook-1"):
            return
        if workflow.patched("webhook-2"):
            await self._start_delivery(inp)
            return
        delivery = DeliverWebhookInput(
            run_id=self._run_id, tenant_id=inp.tenant_id, url=inp.webhook, delivery_id=f"whd_{workflow.uuid4().hex}"
        )
        try:
            await workflow.execute_activity(
                Activity.DELIVER_WEBHOOK,
                delivery,
                result_type=int,
                start_to_close_timeout=retry.WEBHOOK_ACTIVITY_TIMEOUT,
                retry_policy=retry.WEBHOOK_RETRY,
            )
        except FAILED as exc:
            workflow.logger.warning("run %s: webhook not delivered: %s", self._run_id, failure_message(exc))
        except asyncio.CancelledError:  # the workflow was cancelled while it posted: the run has ended all the same
            workflow.logger.warning("run %s: webhook delivery cancelled", self._run_id)

    async def _start_delivery(self, inp: RunInput) -> None:
        """Start the run's webhook delivery, abandoned to live on when this workflow ends; its id
        (drawn here, so a replay draws the same) is the delivery's and its workflow's."""
        delivery_id = f"whd_{workflow.uuid4().hex}"
        try:
            await workflow.start_child_workflow(
                Workflow.WEBHOOK_DELIVERY,
                WebhookDeliveryInput(delivery_id, inp.tenant_id, self._run_id, WebhookEvent.RUN_FINISHED),
                id=delivery_id,
                task_queue=workflow.info().task_queue,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
            )
        except asyncio.CancelledError:  # the workflow was cancelled while it started: the run has ended all the same
            workflow.logger.warning("run %s: webhook delivery cancelled before it started", self._run_id)

    async def _finish_unstarted(self, inp: RunInput) -> RunResult:
        """End a run that waited to start and never did: cancelled while it waited, or it could not
        join its thread or wait for the run before it. Its row (written when it began to wait) ends
        with the status and the reason; no step ran."""
        status, reason = self._not_started or (RunStatus.CANCELLED, "cancelled before it started")
        self._status = status
        finish = FinishRunInput(run_id=self._run_id, tenant_id=inp.tenant_id, status=status, error=reason)
        result: RunResult = await self._store(Activity.FINISH_RUN, finish, RunResult)
        await self._deliver_webhook(inp)
        if status == RunStatus.FAILED:
            raise ApplicationError(reason, non_retryable=True)
        return result

    def _typed(self) -> bool:
        """Whether this run's agent is typed: its model answers by calling final_answer, which the
        workflow answers itself (plans from before have no output schema, and nothing changes)."""
        if self._state.plan.output_schema is None:
            return False
        if self._typed_on is None:
            self._typed_on = workflow.patched("final-answer-1")
        return self._typed_on

    async def _final_answer(self, call: ToolCall, answer: TypedAnswer | None) -> ToolResult:
        """The result of a final_answer call, checked by call_model: the model reads why a bad answer
        is bad (a bad call, as repairs count them); a good one ends the run after this step."""
        if answer is None or answer.call_id != call.id:
            why = f"call {FINAL_ANSWER_TOOL} once, with the whole answer"
            return ToolResult(call.id, call.name, f"error: {why}", is_error=True, outcome=ToolOutcome.BAD_CALL)
        if answer.output_json is None:
            return ToolResult(call.id, call.name, f"error: {answer.error}", is_error=True, outcome=ToolOutcome.BAD_CALL)
        return ToolResult(call.id, call.name, ACCEPTED)

    def _local_store(self) -> bool:
        """Whether the run's Postgres writes are local activities: each costs a few milliseconds in
        the workflow task instead of a round trip through the server (runs from before keep theirs)."""
        if self._store_locally is None:
            self._store_locally = workflow.patched("local-store-1")
        return self._store_locally

    async def _store(
        self,
        name: Activity,
        arg: Any,
        result_type: type | None = None,
        *,
        timeout: timedelta = retry.STORE_TIMEOUT,
        policy: RetryPolicy = retry.STORE_RETRY,
    ) -> Any:
        """A write to the Postgres mirror: short, idempotent, retried until it lands."""
        if self._local_store():
            return await workflow.execute_local_activity(
                name, arg, result_type=result_type, start_to_close_timeout=timeout, retry_policy=policy
            )
        return await workflow.execute_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=timeout,
            heartbeat_timeout=retry.HEARTBEAT_TIMEOUT if timeout > retry.STORE_TIMEOUT else None,
            retry_policy=policy,
        )

    def _deadline_remaining(self) -> float | None:
        state = self._state
        if state.plan.deadline_seconds is None:
            return None
        return state.started_at + state.plan.deadline_seconds - workflow.now().timestamp()

    async def _wait(self, condition: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait for `condition`, or cancel, or the deadline, or `timeout` seconds (whichever comes first)."""
        remaining = self._deadline_remaining()
        if timeout is not None:
            remaining = timeout if remaining is None else min(remaining, timeout)
        # A deadline past what a timer holds is cut to the longest timer (a huge one failed every
        # workflow task). Replay compares a timer's id, not its duration, so no patch is needed.
        timeout = None if remaining is None else min(max(remaining, 0.001), retry.LONGEST_TIMER_SECONDS)
        try:
            await self._wait_condition(
                lambda: condition() or self._cancel_requested() is not None,
                timeout=timedelta(seconds=timeout) if timeout is not None else None,
            )
        except TimeoutError:
            pass  # the deadline check that follows ends the run

    async def _set_status(self, status: RunStatus, detail: str | None = None, *, children: bool = False) -> None:
        """Show `status` in the progress query and on the run's row; `children`: the run waits on
        its sub-agent runs (SetStatusInput.awaits_children)."""
        self._status = status
        self._shown_paused = status == RunStatus.PAUSED
        inp = SetStatusInput(self._run_id, status, detail, self._tenant_id, self._caller, awaits_children=children)
        await self._store(Activity.SET_STATUS, inp)

    async def _wait_while_paused(self) -> None:
        await self._set_status(RunStatus.PAUSED)
        await self._wait(lambda: not self._paused)
        if not self._paused:
            await self._set_status(RunStatus.RUNNING)

    def _should_continue_as_new(self, first_step: int) -> bool:
        state = self._state
        if state.step == first_step:
            return False  # at least one step per execution
        return (
            workflow.info().is_continue_as_new_suggested()
            or state.step - first_step >= state.plan.continue_as_new_every
        )

    def _continue_as_new(self, inp: RunInput) -> None:
        state = self._state
        carried = replace(state, paused=self._paused, pending_messages=list(self._messages))
        if self._memory_on_main is False:  # a worker without the store took a call: keep the memory queue
            carried = replace(carried, plan=replace(carried.plan, memory_on_main_queue=False))
        workflow.continue_as_new(replace(inp, resume=carried))

    async def _step(self, inp: RunInput) -> tuple[ModelTurn, list[ToolResult]]:
        state = self._state
        step = state.step + 1
        self._begin_step()
        user_messages, self._messages = self._messages, []
        call = CallModelInput(
            run_id=self._run_id,
            tenant_id=inp.tenant_id,
            agent=inp.agent,
            step=step,
            model=state.plan.model,
            user_messages=user_messages,
            retry=state.plan.retry,
            priority=inp.priority,
            # An activity's input, not a command: replay compares neither, so no patch is needed.
            budget_pool=state.plan.budget_pool,
        )
        with self._flying("model", {"call": "model", "model": call.model}) as model_call:
            try:
                if state.plan.memory_queue is not None and workflow.patched("memory-in-call-model-1"):
                    turn = await self._call_model_with_memory(call, state.plan)
                else:  # histories from before: a memory_step activity of its own, then the model call
                    remember = step - 1 if step - 1 > state.plan.start_step else None
                    recalled = await self._memory(inp, remember=remember, recall=step)
                    turn = await self._call_model(replace(call, recalled=recalled))
            except StepCancelled:
                model_call["ended"] = "cancelled"
                raise
            model_call.update(model=turn.model, ended="answered")
        if turn.refused is not None and workflow.patched("budget-pool-1"):
            raise BudgetSpent(turn.refused)  # the call did not go out: a budget it draws from is spent
        # The turn is spent before its calls run: a sub-agent run one of them starts is given what
        # the run has left after this turn, not before it.
        self._state = replace(
            self._state,
            input_tokens=state.input_tokens + turn.usage.input_tokens,
            output_tokens=state.output_tokens + turn.usage.output_tokens,
            cost_usd=state.cost_usd + turn.cost_usd,
        )
        decisions, recorded = await self._approvals(inp, step, turn.tool_calls)
        agents = set(state.plan.agents)
        if called := [c.name for c in turn.tool_calls if c.name in agents]:
            self._last_action = "waiting for sub-agents: " + ", ".join(called)
        # A typed run's final_answer calls are answered here, from call_model's check: no activity.
        answers = {i for i, c in enumerate(turn.tool_calls) if c.name == FINAL_ANSWER_TOOL and self._typed()}
        calls = asyncio.gather(
            *(
                self._final_answer(call, turn.answer)
                if i in answers
                else self._run_agent(inp, step, i, call)
                if call.name in agents
                else self._run_tool(inp, step, i, call, decisions.get(call.id), recorded=call.id in recorded)
                for i, call in enumerate(turn.tool_calls)
            )
        )
        results = list(await (self._while_children_run(calls) if called else calls))
        await self._store(
            Activity.RECORD_STEP,
            StepRecord(
                run_id=self._run_id,
                tenant_id=inp.tenant_id,
                step=step,
                turn=turn,
                # Outputs the ledger holds are read there: history gets no second copy.
                # (a typed run's final_answer results are the workflow's own: not in the ledger).
                tool_results=[
                    replace(r, output="", stored=True) if r.outcome.in_ledger and i not in answers else r
                    for i, r in enumerate(results)
                ],
                user_messages=user_messages,
                decisions=list(decisions.values()),
                context_tokens=state.plan.context_tokens,
            ),
        )
        bad_call = any(r.outcome == ToolOutcome.BAD_CALL for r in results)
        # The turn's usage is counted already, and its sub-agent calls added what their runs used.
        self._state = replace(self._state, step=step, repairs=state.repairs + 1 if bad_call else 0)
        self._last_action = ", ".join(c.name for c in turn.tool_calls) or "answer"
        stopped = self._tree_cancel and self._cancel_requested() is not None
        if stopped and (self._at_cancel or self._unstarted_calls):
            self._cancelled_record = self._cancelled_step(step, recorded=True)
        if turn.tool_calls and not stopped and self._over_budget(turn):
            await self._compact_inline(inp)
        return turn, results

    async def _while_children_run(self, calls: Awaitable[list[ToolResult]]) -> list[ToolResult]:
        """The step's calls, some of them sub-agent runs. A pause taken meanwhile shows at once: the
        client pauses the live children with their caller, so the run's tree holds still, and a run
        that waits on a still tree is paused, not running. A resume shows at once too. A pause taken
        before the children started shows at the step's end, as it always did: they run meanwhile.
        (Runs from before the patch showed either at the step's end.)"""
        if not workflow.patched(PAUSE_SHOWN):
            return await calls
        work = asyncio.ensure_future(calls)
        seen = self._paused

        def settled() -> bool:
            return work.done() or self._cancel_requested() is not None

        def changed() -> bool:  # a pause or a resume came since the loop last looked (seen)
            return settled() or self._paused != seen

        self._awaiting_children = True
        try:
            while True:
                await self._wait_condition(changed)
                if settled():
                    break
                seen = self._paused
                if seen != self._shown_paused:
                    await self._set_status(RunStatus.PAUSED if seen else RunStatus.RUNNING, children=True)
        finally:
            self._awaiting_children = False
        return await work

    async def _call_model_once(
        self,
        call: CallModelInput,
        task_queue: str | None = None,
        policy: RetryPolicy | None = None,
        *,
        redirect: bool = False,
        **timeouts: Any,
    ) -> ModelTurn:
        """One model call with its retries (`_call_model`, in failover.py, picks the model and policy),
        and its waits for capacity (workflows/capacity.py); `redirect`: an open breaker fails over."""
        while True:
            seen = self._capacity_signals
            turn = await self._model_activity(call, task_queue, policy, **timeouts)
            if turn.wait is None or not workflow.patched("capacity-wait-1"):
                break
            await self._wait_for_capacity(turn.wait, seen, redirect=redirect)
            if self._cancel_requested() is not None:
                raise StepCancelled(call.step, f"step {call.step}'s model call was cancelled waiting for capacity")
        if self._status == RunStatus.WAITING_CAPACITY:  # it waited (on this model, or on one it moved from)
            await self._set_status(RunStatus.RUNNING)
        return turn

    async def _model_activity(
        self, call: CallModelInput, task_queue: str | None, policy: RetryPolicy | None, **timeouts: Any
    ) -> ModelTurn:
        state = self._state
        options: dict[str, Any] = {
            "result_type": ModelTurn,
            "task_queue": task_queue,
            "start_to_close_timeout": timedelta(seconds=state.plan.retry.timeout_seconds),
            "heartbeat_timeout": retry.HEARTBEAT_TIMEOUT,
            "retry_policy": policy or retry.model_retry(state.plan.retry),
            **timeouts,
        }
        if not workflow.patched("cancel-model-call-1"):  # runs from before: a cancel waits for the step
            turn: ModelTurn = await workflow.execute_activity(Activity.CALL_MODEL, call, **options)
            return turn
        if self._tree_cancel and self._cancel_requested() is not None:  # (the next model of a failover, say)
            raise StepCancelled(call.step, f"step {call.step}'s model call was not started: the run was cancelled")
        # A cancel stops the call at once, even in the middle of its retries: the attempt running
        # sees it through its heartbeat, and a call waiting for its next attempt just ends.
        # Waiting for the cancellation to complete keeps the attempt's own events before the run's end.
        handle = workflow.start_activity(
            Activity.CALL_MODEL,
            call,
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            **options,
        )
        await self._wait_condition(lambda: handle.done() or self._cancel_requested() is not None)
        if handle.done():
            return await handle  # type: ignore[no-any-return]
        handle.cancel()
        try:
            return await handle  # type: ignore[no-any-return]  # it answered before the cancel took
        except (ActivityError, asyncio.CancelledError) as exc:
            if isinstance(exc, ActivityError) and not isinstance(exc.cause, CancelledError):
                raise
            raise StepCancelled(call.step, f"step {call.step}'s model call was cancelled in flight") from None

    async def _call_model_with_memory(self, call: CallModelInput, plan: RunPlan) -> ModelTurn:
        """The model call on the worker that holds episodic memory, which stores the episodes not stored
        yet and recalls this step's memories in the same activity: no round trip of its own. Memory is
        best-effort: with no memory worker polling, the call goes to the main queue without it, and the
        memory queue is tried again some steps later (its episodes are stored then, none is lost).

        When the worker that started the run holds the store too (one process serves both queues), the
        call goes to the run's own task queue instead, where Temporal starts it eagerly on the worker
        that schedules it. Should it reach a worker that does not hold the store (MemoryElsewhere, before
        anything ran), it goes to the memory queue at once, and so do the run's later calls."""
        if self._on_main_queue(plan):
            try:
                return await self._call_model(replace(call, memory=True, recall_k=plan.recall_k))
            except ActivityError as exc:
                cause = exc.cause
                if not (isinstance(cause, ApplicationError) and cause.type == MemoryElsewhere.__name__):
                    raise
                workflow.logger.warning(
                    "step %s's model call reached a worker without memory: it goes to %s from now on",
                    call.step,
                    plan.memory_queue,
                )
                self._memory_on_main = False
        if call.step >= self._memory_retry_at:
            try:
                return await self._call_model(
                    replace(call, memory=True, recall_k=plan.recall_k),
                    plan.memory_queue,
                    schedule_to_start_timeout=retry.MEMORY_SCHEDULE_TIMEOUT,
                )
            except ActivityError as exc:
                cause = exc.cause
                if not (isinstance(cause, ActivityTimeout) and cause.type == TimeoutType.SCHEDULE_TO_START):
                    raise
                workflow.logger.warning(
                    "no memory worker on %s: step %s goes on without memory", plan.memory_queue, call.step
                )
                self._memory_retry_at = call.step + MEMORY_RETRY_STEPS
        return await self._call_model(call)

    def _on_main_queue(self, plan: RunPlan) -> bool:
        """Whether this run's model calls with memory go to its own task queue (plans from before, and
        runs started on a worker without the store, keep the memory queue)."""
        if self._memory_on_main is None:
            self._memory_on_main = plan.memory_on_main_queue and workflow.patched("memory-on-main-queue-1")
        return self._memory_on_main

    async def _memory(self, inp: RunInput, *, remember: int | None, recall: int | None) -> list[Memory]:
        """Store the episodes of step `remember` and recall memories for step `recall` on the
        memory worker. Memory never stops a run: a failure is logged and the step goes on."""
        state = self._state
        plan = state.plan
        k = plan.recall_k if recall is not None else 0
        if plan.memory_queue is None or (remember is None and k == 0):
            return []
        try:
            result: MemoryStepResult = await workflow.execute_activity(
                Activity.MEMORY_STEP,
                MemoryStepInput(
                    run_id=self._run_id,
                    tenant_id=inp.tenant_id,
                    agent=inp.agent,
                    remember_step=remember,
                    recall_step=recall if k else None,
                    k=k,
                ),
                result_type=MemoryStepResult,
                task_queue=plan.memory_queue,
                schedule_to_start_timeout=retry.MEMORY_SCHEDULE_TIMEOUT,
                start_to_close_timeout=retry.MEMORY_TIMEOUT,
                retry_policy=retry.MEMORY_RETRY,
            )
        except FAILED as exc:
            workflow.logger.warning("memory unavailable at step %s: %s", recall or remember, failure_message(exc))
            return []
        return result.recalled

    def _over_budget(self, turn: ModelTurn) -> bool:
        """Working memory passed its compaction threshold (by the model's own token count)."""
        state = self._state
        plan = state.plan
        if plan.compact_at >= 1.0 or turn.usage.input_tokens <= plan.compact_at * plan.context_tokens:
            return False
        if state.step - state.compacted_at_step < COMPACT_EVERY_MIN_STEPS:
            return False
        return workflow.patched("inline-compaction-1")

    async def _compact_inline(self, inp: RunInput) -> None:
        """Compact this run's older history now, with the same activity the Schedule uses."""
        state = self._state
        self._state = replace(state, compacted_at_step=state.step)
        try:
            done: CompactionSummary = await workflow.execute_activity(
                Activity.COMPACT_RUN,
                CompactRunInput(run_id=self._run_id, tenant_id=inp.tenant_id),
                result_type=CompactionSummary,
                start_to_close_timeout=retry.inline_compaction_timeout(state.plan.retry),
                heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                retry_policy=retry.MEMORY_RETRY,
            )
        except FAILED as exc:
            workflow.logger.warning("inline compaction failed: %s", failure_message(exc))
            return
        if not (done.created and done.summary and state.plan.memory_queue):
            return
        try:
            await workflow.execute_activity(
                Activity.SAVE_EPISODES,
                [summary_episode(done)],
                task_queue=state.plan.memory_queue,
                schedule_to_start_timeout=retry.MEMORY_SCHEDULE_TIMEOUT,
                start_to_close_timeout=retry.MEMORY_TIMEOUT,
                retry_policy=retry.MEMORY_RETRY,
            )
        except FAILED as exc:
            workflow.logger.warning("summary episode not saved: %s", failure_message(exc))

    async def _approvals(
        self, inp: RunInput, step: int, calls: list[ToolCall]
    ) -> tuple[dict[str, StepDecision], set[str]]:
        """Wait, durably, for a human decision on every call whose tool requires approval, but for
        those a rerun with recorded tools answers from the record; returns the decisions and the
        ids of the recorded calls."""
        state = self._state
        needs = {s.name for s in state.plan.tools if s.requires_approval}
        asks = {s.name for s in state.plan.tools if s.asks_human}
        waiting = [(i, c) for i, c in enumerate(calls) if c.name in needs]
        if not waiting:
            return {}, set()
        recorded = await self._recorded_calls(inp, step, waiting)
        waiting = [(i, c) for i, c in waiting if c.id not in recorded]
        if not waiting:
            return {}, recorded
        self._decisions = {}
        self._pending = {
            c.id: PendingApproval(
                call_id=c.id, tool=c.name, arguments=c.arguments, step=step, asks_human=c.name in asks
            )
            for _, c in waiting
        }
        await self._set_status(RunStatus.WAITING_APPROVAL, ", ".join(f"{c.name} ({c.id})" for _, c in waiting))
        with self._flying("approval", {"call": "approval", "names": [c.name for _, c in waiting]}) as wait:
            await self._wait(lambda: not self._pending)
            wait["ended"] = "not run" if self._pending else "decided"
        self._pending = {}
        decisions, self._decisions = self._decisions, {}
        if self._cancel_reason is None:
            await self._set_status(RunStatus.PAUSED if self._paused else RunStatus.RUNNING)
        return decisions, recorded

    async def _recorded_calls(self, inp: RunInput, step: int, calls: list[tuple[int, ToolCall]]) -> set[str]:
        """In a rerun with recorded tools: which of these gated calls (with their positions) match a
        call of the source run. Those are answered from the record and the tool does not run, so
        there is nothing for a human to approve. One short local activity (runs from before, none)."""
        fork = inp.fork
        if fork is None or not fork.answers_from_record:
            return set()
        if not workflow.patched("recorded-approvals-1"):
            return set()
        lookups = [self._tool_input(inp, step, i, c) for i, c in calls]
        found: list[str] = await workflow.execute_local_activity(
            Activity.RECORDED_CALLS,
            lookups,
            result_type=list[str],
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )
        return set(found)

    def _tool_input(self, inp: RunInput, step: int, index: int, call: ToolCall) -> RunToolInput:
        """A tool call's input, with the run whose ledger answers it when this is a rerun with
        recorded tools (from the run's own input: run_tool need not look it up)."""
        fork = inp.fork
        recorded = fork is not None and fork.answers_from_record
        return RunToolInput(
            run_id=self._run_id,
            tenant_id=inp.tenant_id,
            agent=inp.agent,
            step=step,
            call_index=index,
            call=call,
            recorded_from=fork.run_id if fork is not None and recorded else None,
            origin_known=True,
        )

    async def _run_tool(
        self,
        inp: RunInput,
        step: int,
        index: int,
        call: ToolCall,
        decision: StepDecision | None,
        *,
        recorded: bool = False,
    ) -> ToolResult:
        state = self._state
        spec = next((s for s in state.plan.tools if s.name == call.name), DEFAULT_TOOL)
        # A recorded call needs no approval: run_tool answers it from the record.
        if spec.requires_approval and decision is None and not recorded:
            if self._tree_cancel and self._cancel_reason is not None:
                self._skip(index, call.name)
            return not_run(call, ToolOutcome.CANCELLED, f"not run: {self._cancel_reason or 'the deadline passed'}")
        if decision is not None and not decision.approved:
            why = f": {decision.reason}" if decision.reason else ""
            return not_run(call, ToolOutcome.DENIED, f"a human denied this call{why}")
        if decision is not None and (decision.answer is not None or decision.edited_input is not None):
            if workflow.patched("approval-answers-1"):  # runs from before had neither
                if spec.asks_human:  # the human's answer is the call's result: no activity
                    return ToolResult(call.id, call.name, decision.answer or "", outcome=ToolOutcome.ANSWERED)
                if decision.edited_input is not None:  # the tool runs with the human's arguments
                    call = replace(call, arguments=json.dumps(decision.edited_input))
        if self._tree_cancel and (reason := self._cancel_requested()) is not None:
            self._skip(index, call.name)  # no tool starts once a cancel is accepted
            return not_started(call, reason)
        if spec.memory and state.plan.memory_queue is None:
            return not_run(
                call,
                ToolOutcome.FAILED,
                f"{call.name} needs long-term memory, and this deployment has no memory worker",
            )
        run = self._tool_input(inp, step, index, call)
        key = run.idempotency_key
        entry: dict[str, Any] = {"call": "tool", "call_index": index, "name": call.name, "idempotency_key": key}
        with self._flying(f"call {index}", entry):
            result = await self._tool_activity(run, spec)
        entry.update(ended="finished", outcome=result.outcome.value)
        return result

    async def _tool_activity(self, run: RunToolInput, spec: ToolSpec) -> ToolResult:
        """One tool call's activity; it is never cancelled: a cancel lets it finish."""
        state = self._state
        call = run.call
        try:
            if spec.local:  # `@tool(local=True)`: in this worker, no round trip (plans from before have none)
                local: ToolResult = await workflow.execute_local_activity(
                    Activity.RUN_TOOL,
                    run,
                    result_type=ToolResult,
                    start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
                    retry_policy=retry.tool_retry(spec),
                )
                return local
            return await workflow.execute_activity(
                Activity.RUN_TOOL,
                run,
                result_type=ToolResult,
                task_queue=state.plan.memory_queue if spec.memory else None,
                start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
                heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                retry_policy=retry.tool_retry(spec),
            )
        except FAILED as exc:
            # A tool that keeps failing is reported to the model, which can work around it.
            why = f"tool {call.name} failed after {spec.max_attempts} attempt(s): {failure_message(exc)}"
            return not_run(call, ToolOutcome.FAILED, why)
