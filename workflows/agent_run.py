"""AgentRunWorkflow: one agent run, step by step.

Each step is `call_model`, one `run_tool` per tool call, then `record_step`,
which mirrors the step into Postgres. The workflow carries only small values
(counters, the model's answer, tool previews); contexts are loaded from
checkpoints by the activities and long tool outputs stay in the ledger, so
history stays small however long the context grows.

Between steps the workflow checks, in this order: cancel, budgets (steps,
tokens, cost, wall clock), pause, and whether to continue as new. The
messages a run takes (pause, resume, cancel, send, approve, deny) and its
`progress` query are in `run_messages.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.run_messages import RunMessages

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.compaction_types import CompactionSummary, CompactRunInput, summary_episode
    from waypoint.errors import failure_message
    from waypoint.names import Activity, RunStatus, ToolOutcome, Workflow
    from waypoint.types import (
        Budget,
        CallModelInput,
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
        StepRecord,
        ToolCall,
        ToolResult,
        ToolSpec,
    )

DEFAULT_TOOL = ToolSpec(name="", timeout_seconds=retry.DEFAULT_TOOL_TIMEOUT_SECONDS)
# Inline compaction at most once per this many steps, however large the newest turns are.
COMPACT_EVERY_MIN_STEPS = 5


def stop_reason(
    state: RunState, cancel_reason: str | None, deadline_remaining: float | None
) -> tuple[RunStatus, str] | None:
    """Why the run must stop before its next step, as (final status, reason), or None."""
    plan = state.plan
    if cancel_reason is not None:
        return RunStatus.CANCELLED, cancel_reason
    if state.step >= plan.max_steps:
        return RunStatus.MAX_STEPS, f"max_steps: {plan.max_steps} steps done"
    if plan.max_tokens is not None and state.input_tokens + state.output_tokens >= plan.max_tokens:
        used = state.input_tokens + state.output_tokens
        return RunStatus.BUDGET_EXCEEDED, f"token budget reached: {used} of {plan.max_tokens} tokens used"
    if plan.max_cost_usd is not None and state.cost_usd >= plan.max_cost_usd:
        return (
            RunStatus.BUDGET_EXCEEDED,
            f"cost budget reached: ${state.cost_usd:.4f} of ${plan.max_cost_usd:.4f} spent",
        )
    if deadline_remaining is not None and deadline_remaining <= 0:
        return RunStatus.BUDGET_EXCEEDED, f"deadline reached: {plan.deadline_seconds:g} s of wall-clock time passed"
    return None


def not_run(call: ToolCall, outcome: ToolOutcome, why: str) -> ToolResult:
    """The result of a tool call the workflow decided not to run (the model reads `why`)."""
    return ToolResult(call_id=call.id, name=call.name, is_error=True, outcome=outcome, output=f"error: {why}")


@workflow.defn(name=Workflow.AGENT_RUN)
class AgentRunWorkflow(RunMessages):
    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        self._run_id = workflow.info().workflow_id
        self._tenant_id = inp.tenant_id
        if inp.resume is not None:
            state = replace(inp.resume, executions=inp.resume.executions + 1)
            self._paused = state.paused
            self._messages = list(state.pending_messages)
        else:
            plan = await self._start(inp)
            state = RunState(plan=plan, step=plan.start_step, started_at=workflow.now().timestamp())
        self._state = state
        self._status = RunStatus.RUNNING
        first_step = state.step

        status, output, reason = RunStatus.MAX_STEPS, None, None
        try:
            while True:
                stop = stop_reason(self._state, self._cancel_reason, self._deadline_remaining())
                if stop is None and self._paused:
                    await self._wait_while_paused()
                    continue  # look at cancel and budgets again
                if stop is not None:
                    status, reason = stop
                    break
                if self._should_continue_as_new(first_step):
                    await workflow.wait_condition(workflow.all_handlers_finished)
                    self._continue_as_new(inp)
                turn, results = await self._step(inp)
                if not turn.tool_calls:
                    status, output, reason = RunStatus.COMPLETED, turn.content, None
                    break
                if self._state.repairs > self._state.plan.max_repairs:
                    bad = next(r.output for r in results if r.outcome == ToolOutcome.BAD_CALL)
                    status = RunStatus.FAILED
                    reason = f"the model made invalid tool calls {self._state.repairs} steps in a row; last: {bad}"
                    break
        except ActivityError as exc:
            status, reason = RunStatus.FAILED, failure_message(exc)

        state = self._state
        if state.step > state.plan.start_step and status != RunStatus.FAILED:
            await self._memory(inp, remember=state.step, recall=None)
        self._status = status
        result: RunResult = await workflow.execute_activity(
            Activity.FINISH_RUN,
            FinishRunInput(run_id=self._run_id, tenant_id=inp.tenant_id, status=status, output=output, error=reason),
            result_type=RunResult,
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )
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
        )
        try:
            return await workflow.execute_activity(
                Activity.START_RUN,
                start,
                result_type=RunPlan,
                # It may list the tools of the agent's MCP servers (starting stdio servers) first.
                start_to_close_timeout=retry.START_TIMEOUT,
                heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                retry_policy=retry.STORE_RETRY,
            )
        except ActivityError as exc:
            reason = f"run {self._run_id} could not start: {failure_message(exc)}"
        self._status = RunStatus.FAILED
        if workflow.patched("failed-start-row-1"):  # a run given an id always gets a row
            await workflow.execute_activity(
                Activity.FINISH_RUN,
                FinishRunInput(self._run_id, inp.tenant_id, RunStatus.FAILED, error=reason, start=start),
                result_type=RunResult,
                start_to_close_timeout=retry.STORE_TIMEOUT,
                retry_policy=retry.STORE_RETRY,
            )
        raise ApplicationError(reason, non_retryable=True)

    def _deadline_remaining(self) -> float | None:
        state = self._state
        assert state is not None
        if state.plan.deadline_seconds is None:
            return None
        return state.started_at + state.plan.deadline_seconds - workflow.now().timestamp()

    async def _wait(self, condition: Callable[[], bool]) -> None:
        """Wait for `condition`, or cancel, or the deadline (whichever comes first)."""
        remaining = self._deadline_remaining()
        try:
            await workflow.wait_condition(
                lambda: condition() or self._cancel_reason is not None,
                timeout=timedelta(seconds=max(remaining, 0.001)) if remaining is not None else None,
            )
        except TimeoutError:
            pass  # the deadline check that follows ends the run

    async def _set_status(self, status: RunStatus, detail: str | None = None) -> None:
        self._status = status
        await workflow.execute_activity(
            Activity.SET_STATUS,
            SetStatusInput(run_id=self._run_id, status=status, detail=detail, tenant_id=self._tenant_id),
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )

    async def _wait_while_paused(self) -> None:
        await self._set_status(RunStatus.PAUSED)
        await self._wait(lambda: not self._paused)
        if not self._paused:
            await self._set_status(RunStatus.RUNNING)

    def _should_continue_as_new(self, first_step: int) -> bool:
        state = self._state
        assert state is not None
        if state.step == first_step:
            return False  # at least one step per execution
        return (
            workflow.info().is_continue_as_new_suggested()
            or state.step - first_step >= state.plan.continue_as_new_every
        )

    def _continue_as_new(self, inp: RunInput) -> None:
        state = self._state
        assert state is not None
        carried = replace(state, paused=self._paused, pending_messages=list(self._messages))
        workflow.continue_as_new(replace(inp, resume=carried))

    async def _step(self, inp: RunInput) -> tuple[ModelTurn, list[ToolResult]]:
        state = self._state
        assert state is not None
        step = state.step + 1
        user_messages, self._messages = self._messages, []
        remember = step - 1 if step - 1 > state.plan.start_step else None
        recalled = await self._memory(inp, remember=remember, recall=step)
        turn: ModelTurn = await workflow.execute_activity(
            Activity.CALL_MODEL,
            CallModelInput(
                run_id=self._run_id,
                tenant_id=inp.tenant_id,
                agent=inp.agent,
                step=step,
                model=state.plan.model,
                user_messages=user_messages,
                retry=state.plan.retry,
                recalled=recalled,
            ),
            result_type=ModelTurn,
            start_to_close_timeout=timedelta(seconds=state.plan.retry.timeout_seconds),
            heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
            retry_policy=retry.model_retry(state.plan.retry),
        )
        decisions = await self._approvals(step, turn.tool_calls)
        results = list(
            await asyncio.gather(
                *(self._run_tool(inp, step, i, call, decisions.get(call.id)) for i, call in enumerate(turn.tool_calls))
            )
        )
        await workflow.execute_activity(
            Activity.RECORD_STEP,
            StepRecord(
                run_id=self._run_id,
                tenant_id=inp.tenant_id,
                step=step,
                turn=turn,
                # Outputs the ledger holds are read there: history gets no second copy.
                tool_results=[
                    replace(r, output="", stored=True) if ToolOutcome(r.outcome).in_ledger else r for r in results
                ],
                user_messages=user_messages,
                decisions=[
                    {"call_id": cid, "decision": "approved" if ok else "denied", "reason": why or ""}
                    for cid, (ok, why) in decisions.items()
                ],
                context_tokens=state.plan.context_tokens,
            ),
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )
        bad_call = any(r.outcome == ToolOutcome.BAD_CALL for r in results)
        self._state = replace(
            state,
            step=step,
            input_tokens=state.input_tokens + turn.usage.input_tokens,
            output_tokens=state.output_tokens + turn.usage.output_tokens,
            cost_usd=state.cost_usd + turn.cost_usd,
            repairs=state.repairs + 1 if bad_call else 0,
        )
        self._last_action = ", ".join(c.name for c in turn.tool_calls) or "answer"
        if turn.tool_calls and self._over_budget(turn):
            await self._compact_inline(inp)
        return turn, results

    async def _memory(self, inp: RunInput, *, remember: int | None, recall: int | None) -> list[Memory]:
        """Store the episodes of step `remember` and recall memories for step `recall` on the
        memory worker. Memory never stops a run: a failure is logged and the step goes on."""
        state = self._state
        assert state is not None
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
        except ActivityError as exc:
            workflow.logger.warning("memory unavailable at step %s: %s", recall or remember, failure_message(exc))
            return []
        return result.recalled

    def _over_budget(self, turn: ModelTurn) -> bool:
        """Working memory passed its compaction threshold (by the model's own token count)."""
        state = self._state
        assert state is not None
        plan = state.plan
        if plan.compact_at >= 1.0 or turn.usage.input_tokens <= plan.compact_at * plan.context_tokens:
            return False
        if state.step - state.compacted_at_step < COMPACT_EVERY_MIN_STEPS:
            return False
        return workflow.patched("inline-compaction-1")

    async def _compact_inline(self, inp: RunInput) -> None:
        """Compact this run's older history now, with the same activity the Schedule uses."""
        state = self._state
        assert state is not None
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
        except ActivityError as exc:
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
        except ActivityError as exc:
            workflow.logger.warning("summary episode not saved: %s", failure_message(exc))

    async def _approvals(self, step: int, calls: list[ToolCall]) -> dict[str, tuple[bool, str | None]]:
        """Wait, durably, for a human decision on every call whose tool requires approval."""
        state = self._state
        assert state is not None
        needs = {s.name for s in state.plan.tools if s.requires_approval}
        waiting = [c for c in calls if c.name in needs]
        if not waiting:
            return {}
        self._decisions = {}
        self._pending = {
            c.id: PendingApproval(call_id=c.id, tool=c.name, arguments=c.arguments, step=step) for c in waiting
        }
        await self._set_status(RunStatus.WAITING_APPROVAL, ", ".join(f"{c.name} ({c.id})" for c in waiting))
        await self._wait(lambda: not self._pending)
        self._pending = {}
        decisions, self._decisions = self._decisions, {}
        if self._cancel_reason is None:
            await self._set_status(RunStatus.PAUSED if self._paused else RunStatus.RUNNING)
        return decisions

    async def _run_tool(
        self, inp: RunInput, step: int, index: int, call: ToolCall, decision: tuple[bool, str | None] | None
    ) -> ToolResult:
        state = self._state
        assert state is not None
        spec = next((s for s in state.plan.tools if s.name == call.name), DEFAULT_TOOL)
        if spec.requires_approval and decision is None:
            return not_run(call, ToolOutcome.CANCELLED, f"not run: {self._cancel_reason or 'the deadline passed'}")
        if decision is not None and not decision[0]:
            why = f": {decision[1]}" if decision[1] else ""
            return not_run(call, ToolOutcome.DENIED, f"a human denied this call{why}")
        if spec.memory and state.plan.memory_queue is None:
            return not_run(
                call,
                ToolOutcome.FAILED,
                f"{call.name} needs long-term memory, and this deployment has no memory worker",
            )
        try:
            return await workflow.execute_activity(
                Activity.RUN_TOOL,
                RunToolInput(
                    run_id=self._run_id,
                    tenant_id=inp.tenant_id,
                    agent=inp.agent,
                    step=step,
                    call_index=index,
                    call=call,
                ),
                result_type=ToolResult,
                task_queue=state.plan.memory_queue if spec.memory else None,
                start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
                heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                retry_policy=retry.tool_retry(spec),
            )
        except ActivityError as exc:
            # A tool that keeps failing is reported to the model, which can work around it.
            why = f"tool {call.name} failed after {spec.max_attempts} attempt(s): {failure_message(exc)}"
            return not_run(call, ToolOutcome.FAILED, why)
