"""Sub-agent calls: a tool call naming one of the agent's sub-agents starts a child run.

The child is an AgentRunWorkflow of its own (its own history, log, checkpoints, memory and page),
started as a Temporal child workflow on the parent's task queue, for the parent's tenant. Its id is
derived from the call (`child_run_id`: parent run id, step, call index), so a retried or replayed
parent can never start it twice. A cancelled parent asks its children in flight to cancel at once
and waits for their ends (workflows/cancels.py); the parent-close policy, REQUEST_CANCEL, is the net
under it: a parent that ends, however it ends, cancels the children still running. Each child
records its own end.

The child's final answer comes back as the call's result through `agent_result`, which reads it
from Postgres and writes it to the parent's ledger (the child's workflow result carries a preview
only). A child that fails, runs out of budget or is cancelled is a tool error the model reads.

Calls run in parallel up to the plan's `max_parallel_agents`; the rest wait in call order. Each
child gets at most what its caller has left of its token and cost budgets and of its deadline, and
its caller's `max_agent_depth` caps its own: a limit set above holds for the whole tree below. The
root's token, cost and step budgets are also one pool of the whole tree (`RunPlan.budget_pool`),
which every model call of every run in it reserves from before it goes out, so children running in
parallel share what is left instead of each spending all of it (activities/budget.py).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from temporalio import workflow
from temporalio.exceptions import CancelledError, ChildWorkflowError, WorkflowAlreadyStartedError

from waypoint.workflows.cancels import CancelRecord, StepCancelled

with workflow.unsafe.imports_passed_through():
    from waypoint.names import Activity, ToolOutcome, Workflow, child_run_id
    from waypoint.pricing import format_usd
    from waypoint.types import (
        AgentCallInput,
        AgentCallResult,
        Budget,
        ParentRef,
        RunInput,
        RunResult,
        RunState,
        StepDecision,
        ToolCall,
        ToolResult,
    )

TASK_ARGUMENT = "task"  # waypoint.agents.TASK_ARGUMENT (agents.py imports what a workflow may not)


def not_started(call: ToolCall, reason: str) -> ToolResult:
    """The result of a call a cancel came before (the run records it; the model of a fork reads it)."""
    why = f"error: not run: the run was cancelled ({reason})"
    return ToolResult(call_id=call.id, name=call.name, output=why, is_error=True, outcome=ToolOutcome.CANCELLED)


def agent_task(call: ToolCall) -> tuple[str, str | None]:
    """The task a sub-agent call hands over (its `task`, then any other arguments as JSON), or why
    the call is bad (the model reads it, and may call again)."""
    try:
        arguments = json.loads(call.arguments or "{}")
    except ValueError:
        return "", f"invalid arguments for {call.name}: not JSON: {call.arguments[:200]}"
    if not isinstance(arguments, dict):
        return "", f"invalid arguments for {call.name}: a JSON object is expected"
    task = arguments.pop(TASK_ARGUMENT, None)
    if not isinstance(task, str) or not task.strip():
        return "", f"invalid arguments for {call.name}: {TASK_ARGUMENT!r} (what it should do) is required text"
    if arguments:
        task += "\n\nArguments: " + json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return task, None


class SubAgentCalls(CancelRecord):
    """AgentRunWorkflow's sub-agent calls; the workflow provides what is declared here."""

    _state: RunState
    _run_id: str
    _agent_slots: asyncio.Semaphore | None = None

    async def _store(self, name: Activity, arg: Any, result_type: type | None = None) -> Any:
        raise NotImplementedError

    async def _run_tool(
        self, inp: RunInput, step: int, index: int, call: ToolCall, decision: StepDecision | None
    ) -> ToolResult:
        raise NotImplementedError

    def _deadline_remaining(self) -> float | None:
        raise NotImplementedError

    async def _run_agent(self, inp: RunInput, step: int, index: int, call: ToolCall) -> ToolResult:
        """Call `index` of `step`, naming a sub-agent: its child run's answer, or a tool error."""
        plan = self._state.plan
        fork = inp.fork
        if fork is not None and fork.answers_from_record and not fork.rerun_children:
            return await self._run_tool(inp, step, index, call, None)  # the recorded answer, like any recorded tool
        record = AgentCallInput(run_id=self._run_id, tenant_id=inp.tenant_id, step=step, call_index=index, call=call)
        task, problem = agent_task(call)
        if problem is not None:
            return (await self._agent_result(replace(record, error=problem, outcome=ToolOutcome.BAD_CALL))).result
        if plan.depth >= plan.max_agent_depth:
            why = (
                f"{call.name} was not started: this run is at depth {plan.depth} of its tree, and "
                f"max_agent_depth is {plan.max_agent_depth}; do this part of the work yourself"
            )
            return (await self._agent_result(replace(record, error=why))).result
        if self._agent_slots is None:
            self._agent_slots = asyncio.Semaphore(plan.max_parallel_agents)
        async with self._agent_slots:  # FIFO: the calls waiting for a slot start in call order
            if (reason := self._cancel_requested()) is not None:
                if not self._tree_cancel:
                    raise StepCancelled(step, f"step {step}'s sub-agent calls were cancelled", "agents")
                self._skip(index, call.name)
                return not_started(call, reason)
            budget, spent = self._child_budget(call)
            if spent is not None:
                return (await self._agent_result(replace(record, error=spent))).result
            root = inp.parent.root_run_id if inp.parent is not None else self._run_id
            child = RunInput(
                agent=call.name,
                task=task,
                tenant_id=inp.tenant_id,
                budget=budget,
                parent=ParentRef(self._run_id, step, index, root, plan.depth + 1, plan.max_agent_depth),
                # Temporal gives the child its caller's priority itself; this records it on the child's row.
                priority=inp.priority,
            )
            child_id = child_run_id(self._run_id, step, index)
            try:
                handle = await workflow.start_child_workflow(
                    Workflow.AGENT_RUN,
                    child,
                    id=child_id,
                    result_type=RunResult,
                    task_queue=workflow.info().task_queue,
                    parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                )
            except WorkflowAlreadyStartedError:
                why = f"{call.name} was not started: a run {child_id} exists already"
                return (await self._agent_result(replace(record, error=why))).result
            entry: dict[str, Any] = {"call": "agent", "call_index": index, "name": call.name, "run_id": child_id}
            with self._flying(f"call {index}", entry):
                await self._wait_condition(lambda: handle.done() or self._cancel_requested() is not None)
                if not handle.done() and not self._tree_cancel:  # it ends, and its close cancels the child
                    raise StepCancelled(step, f"step {step}'s sub-agent runs were cancelled in flight", "agents")
                if not handle.done():
                    # Asked now, not when this run closes: the child stops starting work at once, and
                    # this step waits for its end (its tools in flight finish first).
                    handle.cancel(self._child_cancel_reason())
                try:
                    ended: RunResult = await handle
                    entry["ended"] = ended.status
                except ChildWorkflowError as exc:
                    # it failed: its row says how, and agent_result tells the model
                    entry["ended"] = "cancelled" if isinstance(exc.cause, CancelledError) else "failed"
        done = await self._agent_result(replace(record, child_run_id=child_id))
        state = self._state
        self._state = replace(
            state,
            children_tokens=state.children_tokens + done.tokens,
            children_cost_usd=state.children_cost_usd + done.cost_usd,
        )
        return done.result

    async def _agent_result(self, record: AgentCallInput) -> AgentCallResult:
        result: AgentCallResult = await self._store(Activity.AGENT_RESULT, record, AgentCallResult)
        return result

    def _child_budget(self, call: ToolCall) -> tuple[Budget, str | None]:
        """What a child may use: what this run has left of its budgets and deadline (None: no limit),
        or why nothing is left."""
        state = self._state
        plan = state.plan
        tokens = cost = deadline = None
        if plan.max_tokens is not None:
            tokens = plan.max_tokens - (state.input_tokens + state.output_tokens + state.children_tokens)
            if tokens <= 0:
                return Budget(), f"{call.name} was not started: the token budget ({plan.max_tokens}) is spent"
        if plan.max_cost_usd is not None:
            cost = plan.max_cost_usd - (state.cost_usd + state.children_cost_usd)
            if cost <= 0:
                budget = format_usd(plan.max_cost_usd)
                return Budget(), f"{call.name} was not started: the cost budget ({budget}) is spent"
        deadline = self._deadline_remaining()
        if deadline is not None and deadline <= 0:
            return Budget(), f"{call.name} was not started: the run's deadline has passed"
        return Budget(max_tokens=tokens, max_cost_usd=cost, deadline_seconds=deadline), None
