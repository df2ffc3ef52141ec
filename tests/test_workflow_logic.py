"""The workflows' logic in Temporal's time-skipping environment, with every activity replaced by a
double registered under the same name (tests/workflow_doubles.py): budgets, deadlines, max_steps,
repairs, approvals that wait a simulated week, pause/resume/cancel, messages, continue-as-new,
and the branches each `workflow.patched` guards, as new runs take them. Branches old runs took
are covered by replaying their recorded histories (tests/test_replay.py).

Each test runs in about a second of wall time, whatever virtual time passes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from tests.experiment_doubles import CASE_WORK, ExperimentDoubles
from tests.workflow_doubles import Doubles, answer, answer_at, bench, call, delivery_of, loop_tool, ok, spec, tools
from tests.workflow_helpers import LEAD, failure, plan, progress, replayed, until, until_history, until_status
from waypoint import retry
from waypoint.compaction_types import CompactionInput, CompactionReport
from waypoint.names import (
    DecisionKind,
    LineageKind,
    MemoryOp,
    RunStatus,
    ToolMode,
    ToolOutcome,
    Update,
    WaitReason,
    child_run_id,
)
from waypoint.types import (
    CallModelInput,
    CapacityWait,
    Decision,
    FailoverRecord,
    ForkOrigin,
    MemoryAnswer,
    MemoryRequest,
    ModelTurn,
    RetrySpec,
    RunInput,
    RunPlan,
    RunProgress,
    RunResult,
    RunToolInput,
    StepDecision,
    ToolResult,
)
from waypoint.workflows.compaction import CompactionWorkflow
from waypoint.workflows.memory import MemoryRequestWorkflow

pytestmark = pytest.mark.timeout(60)


async def refused(handle: WorkflowHandle[Any, Any], update: str, *args: Any) -> str:
    """The reason an update was refused (its validator's message)."""
    with pytest.raises(WorkflowUpdateFailedError) as caught:
        await handle.execute_update(update, *args, result_type=RunProgress)
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause.message


# --- how a run ends ----------------------------------------------------------------------------


async def test_completes_when_the_model_answers(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(3, "the answer"))
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    assert (result.status, result.output, result.steps) == (RunStatus.COMPLETED, "the answer", 3)
    assert doubles.steps == [1, 2, 3]
    # one idempotency key per call, from the run id, the step and the call's position
    assert [t.idempotency_key for t in doubles.tool_calls] == [f"{handle.id}:1:0", f"{handle.id}:2:0"]
    assert [(f.status, f.output) for f in doubles.finished] == [(RunStatus.COMPLETED, "the answer")]
    # the model call carries no context, only where to load it from
    assert [c.step for c in doubles.calls] == [1, 2, 3]


async def test_stops_at_max_steps(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(max_steps=4), turns=loop_tool())
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.MAX_STEPS
    assert doubles.steps == [1, 2, 3, 4]
    assert doubles.finished[0].error == "max_steps: 4 steps done"


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        ({"max_tokens": 50}, "token budget reached: 60 of 50 tokens used"),
        ({"max_cost_usd": 0.05}, "cost budget reached: $0.06 of $0.05 spent"),
    ],
)
async def test_budgets_stop_the_run_before_the_next_step(
    ts: WorkflowEnvironment, budget: dict[str, Any], reason: str
) -> None:
    # every turn uses 10 input + 10 output tokens and costs $0.02
    doubles = Doubles(plan=plan(**budget), turns=lambda inp: tools(call("work"), tokens=10, cost=0.02))
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.BUDGET_EXCEEDED
    assert doubles.steps == [1, 2, 3]
    assert doubles.finished[0].error == reason


async def test_a_deadline_ends_a_run_that_waits_for_approval(ts: WorkflowEnvironment) -> None:
    """Three days of virtual time pass while a call waits for a human: the run ends at its
    deadline, the waiting call is recorded as not run."""
    doubles = Doubles(
        plan=plan(deadline_seconds=3 * 86400, tools=[spec("pay", requires_approval=True)]),
        turns=lambda inp: tools(call("pay", id="pay-1")),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
        elapsed = await ts.get_current_time(handle) - (await handle.describe()).start_time
    assert result.status == RunStatus.BUDGET_EXCEEDED
    assert doubles.finished[0].error == "deadline reached: 259200 s of wall-clock time passed"
    assert elapsed >= timedelta(days=3)
    assert doubles.tool_calls == []  # the tool never ran
    (outcome,) = doubles.records[0].tool_results
    assert (outcome.outcome, outcome.output) == (ToolOutcome.CANCELLED, "error: not run: the deadline passed")
    assert RunStatus.WAITING_APPROVAL in doubles.status_names


async def test_a_model_failure_fails_the_run_with_its_reason(ts: WorkflowEnvironment) -> None:
    def refuse(inp: CallModelInput) -> ModelTurn:
        raise ApplicationError("HTTP 400 from the model: bad request", type="ModelRequestRejected", non_retryable=True)

    doubles = Doubles(plan=plan(), turns=refuse)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        message = await failure(handle)
    assert "HTTP 400 from the model: bad request" in message
    assert doubles.records == []
    assert doubles.finished[0].status == RunStatus.FAILED
    assert "HTTP 400 from the model" in (doubles.finished[0].error or "")


async def test_a_run_that_cannot_start_gets_a_failed_row(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), start_error="unknown agent 'nobody'")
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        message = await failure(handle)
    assert message == f"run {handle.id} could not start: unknown agent 'nobody'"
    (finish,) = doubles.finished
    assert finish.status == RunStatus.FAILED and finish.start is not None  # patch failed-start-row-1
    assert finish.start.task == "test" and doubles.calls == []


async def test_a_scheduled_run_names_its_schedule_in_its_start_and_its_failed_row(ts: WorkflowEnvironment) -> None:
    """A schedule's fire starts RunInput(schedule_id=...): START_RUN gets it (runs.schedule_id), and
    so does the failed row of a fire that cannot start."""
    fired = RunInput(agent="double", task="t", tenant_id="t", schedule_id="sched-1")
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    async with bench(ts.client, doubles) as b:
        await (await b.start(fired)).result()
    assert [s.schedule_id for s in doubles.started] == ["sched-1"]
    doubles = Doubles(plan=plan(), start_error="unknown agent 'nobody'")
    async with bench(ts.client, doubles) as b:
        await failure(await b.start(fired))
    assert [f.start.schedule_id for f in doubles.finished if f.start is not None] == ["sched-1"]


# --- repairs -----------------------------------------------------------------------------------


async def test_bad_tool_calls_are_repaired_then_fail_the_run(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(
        plan=plan(max_repairs=2),
        turns=loop_tool(),
        tool=lambda inp: ok(inp, ToolOutcome.BAD_CALL, "error: invalid arguments"),
    )
    async with bench(ts.client, doubles) as b:
        message = await failure(await b.start())
    assert doubles.steps == [1, 2, 3]  # two repairs allowed, the third bad step ends it
    assert "the model made invalid tool calls 3 steps in a row; last: error: invalid arguments" in message


async def test_a_good_call_resets_the_repair_count(ts: WorkflowEnvironment) -> None:
    bad_steps = {1, 2, 4, 5}
    doubles = Doubles(
        plan=plan(max_repairs=2),
        turns=answer_at(7),
        tool=lambda inp: ok(inp, ToolOutcome.BAD_CALL) if inp.step in bad_steps else ok(inp),
    )
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.COMPLETED and doubles.steps == [1, 2, 3, 4, 5, 6, 7]


async def test_empty_answers_are_repairs(ts: WorkflowEnvironment) -> None:
    """Patch empty-answer-1: an empty answer is not a completion; the model is told."""
    doubles = Doubles(plan=plan(max_repairs=1), turns=lambda inp: ModelTurn(model="double"))
    async with bench(ts.client, doubles) as b:
        message = await failure(await b.start())
    assert "the model answered nothing (no text, no tool call) 2 times" in message
    assert doubles.steps == [1, 2]
    assert doubles.calls[1].user_messages == ["Your last answer was empty. Answer the task in text, or call a tool."]


async def test_a_tool_that_keeps_failing_is_reported_to_the_model(ts: WorkflowEnvironment) -> None:
    def broken(inp: RunToolInput) -> ToolResult:
        raise RuntimeError("disk on fire")

    doubles = Doubles(plan=plan(tools=[spec(max_attempts=2)]), turns=answer_at(2), tool=broken)
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.COMPLETED
    assert len(doubles.tool_calls) == 2  # its two attempts
    (outcome,) = doubles.records[0].tool_results
    assert outcome.outcome == ToolOutcome.FAILED
    assert outcome.output.startswith("error: tool work failed after 2 attempt(s): ")
    assert "disk on fire" in outcome.output


# --- approvals ---------------------------------------------------------------------------------


async def test_an_approval_waits_a_simulated_week(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(tools=[spec("pay", requires_approval=True)]), turns=answer_at(2, name="pay"))
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        waiting = await until_status(handle, RunStatus.WAITING_APPROVAL)
        assert [p.call_id for p in waiting.pending_approvals] == ["c1"]
        assert await ts.fast_forward(handle, timedelta(days=7))
        assert (await progress(handle)).status == RunStatus.WAITING_APPROVAL  # still waiting, a week on
        await handle.execute_update(Update.APPROVE, Decision(reason="fine"), result_type=RunProgress)
        result: RunResult = await handle.result()
        elapsed = await ts.get_current_time(handle) - (await handle.describe()).start_time
    assert result.status == RunStatus.COMPLETED
    assert elapsed >= timedelta(days=7)
    assert [t.call.id for t in doubles.tool_calls] == ["c1"]
    assert doubles.records[0].decisions == [StepDecision("c1", DecisionKind.APPROVED, "fine")]
    assert doubles.status_names == [RunStatus.WAITING_APPROVAL, RunStatus.RUNNING]


async def test_a_denied_call_does_not_run(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(tools=[spec("pay", requires_approval=True)]), turns=answer_at(2, name="pay"))
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.WAITING_APPROVAL)
        no_such = await refused(handle, Update.DENY, Decision(call_id="other"))
        assert no_such == f"no tool call 'other' waits for approval in run {handle.id}"
        await handle.execute_update(Update.DENY, Decision(call_id="c1", reason="too much"), result_type=RunProgress)
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED and doubles.tool_calls == []
    (outcome,) = doubles.records[0].tool_results
    assert (outcome.outcome, outcome.output) == (ToolOutcome.DENIED, "error: a human denied this call: too much")


async def test_an_edited_approval_runs_the_tool_with_the_humans_input(ts: WorkflowEnvironment) -> None:
    """Patch approval-answers-1: the tool runs with the edited arguments; the decision records them."""
    doubles = Doubles(
        plan=plan(tools=[spec("pay", requires_approval=True)]),
        turns=lambda inp: tools(call("pay", '{"amount": 900}', id="c1")) if inp.step == 1 else answer("done"),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.WAITING_APPROVAL)
        answered = await refused(handle, Update.APPROVE, Decision(answer="yes"))
        assert "waits for an approval, not an answer" in answered
        edit = Decision(reason="less", edited_input={"amount": 90})
        await handle.execute_update(Update.APPROVE, edit, result_type=RunProgress)
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED
    assert [json.loads(t.call.arguments) for t in doubles.tool_calls] == [{"amount": 90}]
    assert doubles.records[0].decisions == [StepDecision("c1", DecisionKind.APPROVED, "less", {"amount": 90})]


async def test_an_ask_human_call_is_answered_by_its_approval(ts: WorkflowEnvironment) -> None:
    """Patch approval-answers-1: an ask_human call waits, and the answer is its result (no activity)."""
    doubles = Doubles(
        plan=plan(tools=[spec("ask_human", requires_approval=True, asks_human=True)]),
        turns=answer_at(2, name="ask_human"),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        waiting = await until_status(handle, RunStatus.WAITING_APPROVAL)
        assert [(p.call_id, p.asks_human) for p in waiting.pending_approvals] == [("c1", True)]
        assert "approve it with an answer" in await refused(handle, Update.APPROVE, Decision())
        await handle.execute_update(Update.APPROVE, Decision(answer="blue"), result_type=RunProgress)
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED and doubles.tool_calls == []
    (outcome,) = doubles.records[0].tool_results
    assert (outcome.outcome, outcome.output) == (ToolOutcome.ANSWERED, "blue")
    assert doubles.records[0].decisions == [StepDecision("c1", DecisionKind.APPROVED, "", None, "blue")]


async def test_a_rerun_answers_recorded_gated_calls_without_a_human(ts: WorkflowEnvironment) -> None:
    """Patch recorded-approvals-1: in a rerun with recorded tools, a gated call that matches the
    record needs no approval (run_tool answers it from the record)."""
    doubles = Doubles(plan=plan(tools=[spec("pay", requires_approval=True)]), turns=answer_at(2, name="pay"))
    doubles.recorded = {"c1"}
    rerun = ForkOrigin(run_id="run-source", step=0, kind=LineageKind.RERUN, tools=ToolMode.RECORDED)
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start(RunInput(agent="double", task="t", fork=rerun))).result()
    assert result.status == RunStatus.COMPLETED
    assert [[c.call.id for c in lookup] for lookup in doubles.recorded_lookups] == [["c1"]]
    assert RunStatus.WAITING_APPROVAL not in doubles.status_names
    assert [t.call.id for t in doubles.tool_calls] == ["c1"]
    # The source run travels in the inputs: the activities need not look the run's origin up.
    lookups = [*doubles.recorded_lookups[0], *doubles.tool_calls]
    assert [(t.origin_known, t.recorded_from) for t in lookups] == [(True, "run-source")] * 2


# --- messages: pause, resume, cancel, send -------------------------------------------------------


async def test_pause_resume_and_send(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(3), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.RUNNING)
        paused = await handle.execute_update(Update.PAUSE, result_type=RunProgress)
        assert paused.step == 0
        assert await refused(handle, Update.PAUSE) == f"run {handle.id} is already paused"
        sent = await handle.execute_update(Update.SEND, "use the blue one", result_type=RunProgress)
        assert sent.queued_messages == 1
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()  # step 1 ends; the run pauses before step 2
        await until_status(handle, RunStatus.PAUSED)
        assert [c.step for c in doubles.calls] == [1]
        await handle.execute_update(Update.RESUME, result_type=RunProgress)
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED
    assert doubles.status_names == [RunStatus.PAUSED, RunStatus.RUNNING]
    assert [c.user_messages for c in doubles.calls] == [[], ["use the blue one"], []]
    assert doubles.records[1].user_messages == ["use the blue one"]


async def test_a_resume_during_the_step_that_showed_paused_shows_running(ts: WorkflowEnvironment) -> None:
    """Patch pause-shown-while-children-run-1: a run paused while it waited for approval shows
    `paused` once the call is decided; resumed before the step ends, its row says `running` again
    before the next step (runs from before kept `paused` on the row while they ran on)."""
    gated = plan(tools=[spec("pay", requires_approval=True)])
    doubles = Doubles(plan=gated, turns=answer_at(2, name="pay"), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.WAITING_APPROVAL)
        await handle.execute_update(Update.PAUSE, result_type=RunProgress)
        await handle.execute_update(Update.APPROVE, Decision(), result_type=RunProgress)
        await until(lambda: doubles.status_names[-1:] == [RunStatus.PAUSED], "the row written paused")
        resumed = await handle.execute_update(Update.RESUME, result_type=RunProgress)
        assert resumed.status == RunStatus.RUNNING
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()  # the approved call (held until now) ends; step 1 is recorded
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED and doubles.steps == [1, 2]
    assert doubles.status_names == [RunStatus.WAITING_APPROVAL, RunStatus.PAUSED, RunStatus.RUNNING]


async def test_cancel_ends_the_run_after_the_current_step(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        # The step's tool is in flight (a cancel that lands during its model call stops that call at once).
        await until(lambda: len(doubles.tool_calls) == 1, "the tool in flight")
        await handle.execute_update(Update.CANCEL, "enough", result_type=RunProgress)
        assert await refused(handle, Update.SEND, "more") == f"run {handle.id} is running: it takes no more messages"
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await handle.result()
    assert (result.status, doubles.finished[0].error) == (RunStatus.CANCELLED, "enough")
    assert doubles.steps == [1]


async def test_cancel_stops_a_model_call_in_flight(ts: WorkflowEnvironment) -> None:
    """Patch cancel-model-call-1: a cancel does not wait for a model call (say, one stuck in
    retries): the call is cancelled through its heartbeat, the step gets no checkpoint, and the
    run's end says which step was interrupted."""
    doubles = Doubles(plan=plan(), turns=answer_at(3), model_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until(lambda: len(doubles.calls) == 1, "the model call in flight")
        await handle.execute_update(Update.CANCEL, "stop now", result_type=RunProgress)
        result: RunResult = await handle.result()
    assert (result.status, result.error) == (RunStatus.CANCELLED, "stop now")
    assert doubles.model_cancelled == [1] and doubles.records == []
    (finish,) = doubles.finished
    assert finish.interrupted == {
        "step": 1,
        "activity": "call_model",
        "why": "step 1's model call was cancelled in flight",
        "recorded": False,
        "in_flight": [{"call": "model", "model": "double", "ended": "cancelled"}],
        "not_started": [],
    }


async def test_cancel_while_paused(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.RUNNING)
        await handle.execute_update(Update.PAUSE, result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        await until_status(handle, RunStatus.PAUSED)
        await handle.execute_update(Update.CANCEL, None, result_type=RunProgress)
        result: RunResult = await handle.result()
    assert (result.status, doubles.finished[0].error) == (RunStatus.CANCELLED, "cancelled by a user")
    assert doubles.steps == [1]


# --- continue-as-new ---------------------------------------------------------------------------


async def test_continue_as_new_keeps_steps_contiguous_and_carries_messages(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(continue_as_new_every=3), turns=answer_at(8))
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
        executions = [e async for e in ts.client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert (result.status, doubles.steps) == (RunStatus.COMPLETED, [1, 2, 3, 4, 5, 6, 7, 8])
    assert len(executions) == 3  # steps 1-3, 4-6, 7-8
    assert {c.run_id for c in doubles.calls} == {handle.id}  # one run id throughout


async def test_messages_queued_while_paused_cross_continue_as_new(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(continue_as_new_every=1), turns=answer_at(3), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.RUNNING)
        await handle.execute_update(Update.PAUSE, result_type=RunProgress)
        await handle.execute_update(Update.SEND, "after the break", result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        paused = await until_status(handle, RunStatus.PAUSED)
        assert (paused.step, paused.queued_messages) == (1, 1)
        await handle.execute_update(Update.RESUME, result_type=RunProgress)
        result: RunResult = await handle.result()
        executions = [e async for e in ts.client.list_workflows(f"WorkflowId = '{handle.id}'")]
    assert result.status == RunStatus.COMPLETED
    assert len(executions) == 3  # one step per execution
    assert doubles.calls[1].user_messages == ["after the break"]  # read in the second execution


# --- memory, inline compaction, local tools ----------------------------------------------------


async def test_the_model_call_runs_on_the_memory_worker(ts: WorkflowEnvironment) -> None:
    """Patch memory-in-call-model-1: with memory, the model call runs where the store is and
    stores and recalls in the same activity."""
    doubles = Doubles(turns=answer_at(2))
    doubles.plan = plan()
    async with bench(ts.client, doubles, memory=True) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.COMPLETED
    assert doubles.memory_queues == [f"{b.task_queue}-memory"] * 2
    assert [(c.memory, c.recall_k) for c in doubles.calls] == [(True, 3), (True, 3)]


@pytest.mark.parametrize("elsewhere", [False, True], ids=["store-here", "store-elsewhere"])
async def test_the_model_call_with_memory_runs_on_the_run_queue_when_its_worker_holds_memory(
    ts: WorkflowEnvironment, elsewhere: bool
) -> None:
    """Patch memory-on-main-queue-1: the worker that started the run holds the store, so the model
    call, memory inside it, goes to the run's own queue (where Temporal starts it eagerly). A call
    that reaches a worker without the store goes to the memory queue, and so do the later ones."""
    doubles = Doubles(turns=answer_at(3), memory_elsewhere=elsewhere)
    async with bench(ts.client, doubles, memory=True) as b:
        doubles.plan = replace(doubles.plan, memory_on_main_queue=True)
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.COMPLETED and doubles.steps == [1, 2, 3]
    main, memory = b.task_queue, f"{b.task_queue}-memory"
    assert doubles.memory_queues == ([main, memory, memory, memory] if elsewhere else [main] * 3)
    assert all(c.memory and c.recall_k == 3 for c in doubles.calls)


async def test_inline_compaction_when_the_context_passes_its_budget(ts: WorkflowEnvironment) -> None:
    """Patch inline-compaction-1: at most once every 5 steps, when the model reports more input
    tokens than compact_at x context_tokens; its summary goes to episodic memory."""
    doubles = Doubles(turns=lambda inp: tools(call("work"), tokens=90) if inp.step < 12 else answer("done"))
    doubles.plan = plan(context_tokens=100, compact_at=0.5)
    async with bench(ts.client, doubles, memory=True) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED
    assert doubles.compacted == [handle.id, handle.id]  # after steps 5 and 10
    assert [e["text"] for e in doubles.saved_episodes] == [f"summary of {handle.id}"] * 2


async def test_local_tools_run_as_local_activities(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(tools=[spec("fast", local=True), spec("slow")]))
    doubles.turns = lambda inp: tools(call("fast"), call("slow")) if inp.step == 1 else answer("done")
    async with bench(ts.client, doubles) as b:
        await (await b.start()).result()
    assert sorted(zip([t.call.name for t in doubles.tool_calls], doubles.tool_local, strict=True)) == [
        ("fast", True),
        ("slow", False),
    ]


async def test_a_fork_starts_at_its_fork_step(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(6))
    fork = ForkOrigin(run_id="run-parent", step=4, message="try again")
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start(RunInput(agent="double", task="t", fork=fork))).result()
    assert result.status == RunStatus.COMPLETED
    assert doubles.steps == [5, 6]
    assert [(t.origin_known, t.recorded_from) for t in doubles.tool_calls] == [(True, None)]  # tools run live


async def test_a_message_only_fork_ends_completed_without_a_step(ts: WorkflowEnvironment) -> None:
    """Patch message-only-fork-1 (issue 41): a fork that only adds its message (the Agent Protocol's
    update_state) did what it was asked once start_run wrote the message: it ends `completed`, with
    no model call, not `max_steps` at the budget that leaves it no step (runs from before did)."""
    doubles = Doubles(plan=plan(max_steps=4), turns=answer_at(6))
    fork = ForkOrigin(run_id="run-parent", step=4, message="use a pencil", message_only=True)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(RunInput(agent="double", task="use a pencil", tenant_id="t", fork=fork))
        result: RunResult = await handle.result()
        await replayed(handle, "agent_run_message_only.json")
    assert (result.status, result.output, result.error, result.steps) == (RunStatus.COMPLETED, None, None, 0)
    assert [(f.status, f.error) for f in doubles.finished] == [(RunStatus.COMPLETED, None)]
    assert doubles.calls == [] and doubles.records == [] and doubles.statuses == []
    assert [s.fork for s in doubles.started] == [fork]  # start_run got the message to add


# A run without a memory worker goes on without memory after MEMORY_SCHEDULE_TIMEOUT (10 s): a
# schedule-to-start timeout is not skipped, so tests/test_step_shape.py covers that on the real stack
# (with what a compaction pass stores of such a run afterwards).


# --- the compaction and memory workflows --------------------------------------------------------


async def test_a_compaction_pass_reports_each_run(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(compact_runs=["run-a", "run-b", "run-c"], compact_error={"run-b": "no such run"})
    async with bench(ts.client, doubles, memory=True) as b:
        report: CompactionReport = await ts.client.execute_workflow(
            CompactionWorkflow.run, CompactionInput(concurrency=2), id=f"c-{b.task_queue}", task_queue=b.task_queue
        )
    assert report.selected == 3 and sorted(doubles.compacted) == ["run-a", "run-b", "run-c"]
    assert [r.run_id for r in report.failed] == ["run-b"]
    assert "no such run" in (report.failed[0].error or "")
    assert report.episodes_saved == 2 and report.memory_error is None
    assert report.steps_remembered == 2  # patch remember-missing-1: missed episodes caught up


async def test_a_run_whose_compaction_keeps_failing_is_retried_then_reported(ts: WorkflowEnvironment) -> None:
    """A compactor that fails on a run's rows with a bug (a KeyError, retryable as any unknown error)
    is tried PASS_RETRY's attempts, backing off in virtual time, then the run is reported with the
    error's type; the pass goes on (tests/test_compaction_passes.py shows the real compactor's KeyError)."""
    doubles = Doubles(compact_runs=["run-a", "run-b"], compact_crash=["run-b"])
    async with bench(ts.client, doubles, memory=True) as b:
        report: CompactionReport = await ts.client.execute_workflow(
            CompactionWorkflow.run, CompactionInput(concurrency=1), id=f"c-{b.task_queue}", task_queue=b.task_queue
        )
    assert doubles.compacted == ["run-a"] + ["run-b"] * (retry.PASS_RETRY.maximum_attempts or 0)
    assert [r.run_id for r in report.failed] == ["run-b"] and "KeyError" in (report.failed[0].error or "")
    assert report.episodes_saved == 1 and report.memory_error is None


async def test_a_compaction_pass_without_a_memory_worker_says_so(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(compact_runs=["run-a"])
    async with bench(ts.client, doubles) as b:
        report: CompactionReport = await ts.client.execute_workflow(
            CompactionWorkflow.run,
            CompactionInput(memory_timeout_seconds=1),
            id=f"c-{b.task_queue}",
            task_queue=b.task_queue,
        )
    assert report.episodes_saved == 0 and doubles.compacted == ["run-a"]
    assert report.memory_error is not None and "summary episodes not saved" in report.memory_error


async def test_a_memory_request_answers_from_the_memory_worker(ts: WorkflowEnvironment) -> None:
    doubles = Doubles()
    async with bench(ts.client, doubles) as b:
        answer_: MemoryAnswer = await ts.client.execute_workflow(
            MemoryRequestWorkflow.run,
            MemoryRequest(op=MemoryOp.FORGET, tenant_id="t", run_id="run-a"),
            id=f"m-{b.task_queue}",
            task_queue=b.task_queue,
            result_type=MemoryAnswer,
        )
    assert answer_.deleted == 7


def test_the_doubles_cover_every_activity() -> None:
    """A new activity needs a double, or a test of a workflow that calls it hangs instead of failing."""
    from waypoint.names import Activity

    doubled = [*Doubles().activities(), *ExperimentDoubles().activities()]  # the experiment's are its own
    names = {getattr(f, "__temporal_activity_definition").name for f in doubled}
    assert names == {a.value for a in Activity} | {CASE_WORK}  # CASE_WORK: the double case runs' own


# --- sub-agents: child runs of the real AgentRunWorkflow, on the same doubles ------------------------
# The lead run's agent is "double"; its sub-agent is "child". A child's run id is derived from the
# call (child_run_id), and `turns` tells the runs apart by agent and run id.


def fan_out(n: int, name: str = "child") -> ModelTurn:
    """One model turn calling `name` n times, tasks "task 0".."task n-1", call ids a0..a(n-1)."""
    return tools(*(call(name, json.dumps({"task": f"task {i}"}), id=f"a{i}") for i in range(n)))


def index_of(run_id: str) -> int:
    return int(run_id.rsplit(".", 1)[1])


async def until_closed(client: Client, run_id: str, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (await client.get_workflow_handle(run_id).describe()).status == WorkflowExecutionStatus.RUNNING:
        assert loop.time() < deadline, f"{run_id} is still running"
        await asyncio.sleep(0.02)


async def test_sub_agent_calls_run_at_most_max_parallel_agents_at_once_in_call_order(ts: WorkflowEnvironment) -> None:
    """Five calls, two slots: the children start in call order as slots free up, and each answer
    lands at its own call, whatever order the children finish in (child 0 is held until 1-4 are done)."""

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return fan_out(5) if inp.step == 1 else answer("all five answered")
        if index_of(inp.run_id) == 0 and inp.step == 1:
            return tools(call("work", id="w0"))  # waits at the tool gate
        return answer(f"answer of {inp.run_id}")

    doubles = Doubles(
        plan=plan(agents=["child"], max_parallel_agents=2),
        plans={"child": plan()},
        turns=turns,
        tool_gate=asyncio.Event(),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        children = [child_run_id(handle.id, 1, i) for i in range(5)]
        await until(lambda: all(doubles.end_of(c) for c in children[1:]), "children 1-4 finishing")
        assert doubles.end_of(children[0]) is None and doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await handle.result()
        history = await handle.fetch_history()
    assert (result.status, result.output) == (RunStatus.COMPLETED, "all five answered")

    started, live, most = [], set(), 0  # as the parent's history shows them
    for event in history.events:
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            started.append(event.start_child_workflow_execution_initiated_event_attributes.workflow_id)
            live.add(started[-1])
            most = max(most, len(live))
        elif event.HasField("child_workflow_execution_completed_event_attributes"):
            live.discard(event.child_workflow_execution_completed_event_attributes.workflow_execution.workflow_id)
    assert started == children and most == 2
    assert [f.run_id for f in doubles.finished if f.run_id in children][-1] == children[0]  # finished last
    assert {s.run_id: (s.task, s.agent) for s in doubles.started if s.parent} == {
        c: (f"task {i}", "child") for i, c in enumerate(children)
    }
    # in call order: each call's ledger entry is its own child's answer
    (step1,) = [r for r in doubles.records if (r.run_id, r.step) == (handle.id, 1)]
    assert [(r.call_id, r.outcome) for r in step1.tool_results] == [(f"a{i}", ToolOutcome.OK) for i in range(5)]
    assert [doubles.ledger[f"{handle.id}:1:{i}"].output for i in range(5)] == [f"answer of {c}" for c in children]


async def test_a_failing_child_is_a_tool_error_and_the_others_answers_are_kept(ts: WorkflowEnvironment) -> None:
    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return fan_out(3) if inp.step == 1 else answer("went on without it")
        if index_of(inp.run_id) == 1:
            raise ApplicationError(
                "HTTP 400 from the model: bad request", type="ModelRequestRejected", non_retryable=True
            )
        return answer(f"answer of {inp.run_id}")

    doubles = Doubles(plan=plan(agents=["child"]), plans={"child": plan()}, turns=turns)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    assert (result.status, result.output) == (RunStatus.COMPLETED, "went on without it")
    children = [child_run_id(handle.id, 1, i) for i in range(3)]
    assert [doubles.end_of(c).status for c in children] == [  # type: ignore[union-attr]
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.COMPLETED,
    ]
    first, failed, last = (doubles.ledger[f"{handle.id}:1:{i}"] for i in range(3))
    assert (first.outcome, first.output) == (ToolOutcome.OK, f"answer of {children[0]}")
    assert (last.outcome, last.output) == (ToolOutcome.OK, f"answer of {children[2]}")
    assert failed.outcome == ToolOutcome.TOOL_ERROR and failed.is_error
    assert failed.output.startswith("error: sub-agent child ended failed: ") and "HTTP 400" in failed.output
    assert doubles.steps_of(handle.id) == [1, 2]


async def test_a_child_that_reaches_its_budget_is_a_tool_error(ts: WorkflowEnvironment) -> None:
    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return fan_out(1) if inp.step == 1 else answer("noted")
        return tools(call("work", id=f"w{inp.step}"))  # never answers; 20 tokens a turn

    doubles = Doubles(plan=plan(agents=["child"]), plans={"child": plan(max_tokens=30)}, turns=turns)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    child = child_run_id(handle.id, 1, 0)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "noted")
    assert doubles.steps_of(child) == [1, 2]
    done = doubles.ledger[f"{handle.id}:1:0"]
    assert (done.outcome, done.output) == (
        ToolOutcome.TOOL_ERROR,
        "error: sub-agent child ended budget_exceeded: token budget reached: 40 of 30 tokens used",
    )


async def test_cancelling_the_caller_cancels_its_children_in_flight(ts: WorkflowEnvironment) -> None:
    """Patch cancel-tree-1: the caller asks its children to cancel at once (not when it closes) and
    waits for their ends; their tools in flight finish, and the caller's step is recorded with how
    each child ended. The deeper tree and its history are in tests/test_cancel_logic.py."""

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return fan_out(3)
        return tools(call("work", id="w1")) if inp.step == 1 else answer("unreachable")

    doubles = Doubles(plan=plan(agents=["child"]), plans={"child": plan()}, turns=turns, tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until(lambda: len(doubles.tool_calls) == 3, "three children in their tool")
        await handle.execute_update(Update.CANCEL, "stop the tree", result_type=RunProgress)
        children = [child_run_id(handle.id, 1, i) for i in range(3)]
        for child in children:  # the caller's requests reach each child before its tool may end
            await until_history(ts.client, child, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()  # the tools in flight finish after the cancel
        result: RunResult = await handle.result()
        assert sorted(doubles.tools_done) == sorted(f"{c}:1:0" for c in children) and doubles.tools_cut == []
    assert (result.status, result.error) == (RunStatus.CANCELLED, "stop the tree")
    why = f"its caller {handle.id} was cancelled: stop the tree"
    assert [(doubles.end_of(c).status, doubles.end_of(c).error) for c in children] == [  # type: ignore[union-attr]
        (RunStatus.CANCELLED, why)
    ] * 3
    assert [doubles.steps_of(c) for c in children] == [[1]] * 3  # each child's step recorded as it ended
    assert doubles.steps_of(handle.id) == [1]  # and the caller's, with each child's end as its call's result
    answers = [doubles.ledger[f"{handle.id}:1:{i}"] for i in range(3)]
    assert [(a.outcome, a.output) for a in answers] == [
        (ToolOutcome.TOOL_ERROR, f"error: sub-agent child ended cancelled: {why}")
    ] * 3
    end = doubles.end_of(handle.id)
    assert end is not None and end.interrupted is not None
    assert (end.interrupted["step"], end.interrupted["activity"], end.interrupted["recorded"]) == (1, "agents", True)
    assert sorted((e["run_id"], e["ended"]) for e in end.interrupted["in_flight"]) == [
        (c, RunStatus.CANCELLED) for c in children
    ]


async def test_a_child_at_max_agent_depth_starts_no_grandchild(ts: WorkflowEnvironment) -> None:
    """The caller's max_agent_depth bounds its whole tree: the child's own agent allows 4 levels,
    but it sits at depth 1 of a tree whose root allows 1."""

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return fan_out(1) if inp.step == 1 else answer("lead done")
        if inp.agent == "child":
            return fan_out(1, "grandchild") if inp.step == 1 else answer("did it myself")
        return answer("a grandchild ran")

    doubles = Doubles(
        plan=plan(agents=["child"], max_agent_depth=1),
        plans={"child": plan(agents=["grandchild"], max_agent_depth=4)},
        turns=turns,
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
        child = child_run_id(handle.id, 1, 0)
        grandchildren = [e async for e in ts.client.list_workflows(f"WorkflowId = '{child_run_id(child, 1, 0)}'")]
    assert (result.status, result.output) == (RunStatus.COMPLETED, "lead done")
    assert doubles.ledger[f"{handle.id}:1:0"].output == "did it myself"
    refused_ = doubles.ledger[f"{child}:1:0"]
    assert refused_.outcome == ToolOutcome.TOOL_ERROR
    assert refused_.output == (
        "error: grandchild was not started: this run is at depth 1 of its tree, and max_agent_depth is 1; "
        "do this part of the work yourself"
    )
    assert [s.agent for s in doubles.started] == [LEAD, "child"] and grandchildren == []
    assert doubles.started[1].parent is not None and doubles.started[1].parent.max_depth == 1


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ("{}", "'task' (what it should do) is required text"),
        ('{"task": "  "}', "'task' (what it should do) is required text"),
        ('{"task": ', "not JSON"),
    ],
    ids=["no-task", "blank-task", "not-json"],
)
async def test_a_bad_sub_agent_call_is_a_bad_call_and_starts_nothing(
    ts: WorkflowEnvironment, arguments: str, why: str
) -> None:
    def turns(inp: CallModelInput) -> ModelTurn:
        return tools(call("child", arguments, id="a0")) if inp.step == 1 else answer("fixed")

    doubles = Doubles(plan=plan(agents=["child"]), turns=turns)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED
    bad = doubles.ledger[f"{handle.id}:1:0"]
    assert bad.outcome == ToolOutcome.BAD_CALL and bad.output.startswith("error: invalid arguments for child: ")
    assert why in bad.output
    assert [s.agent for s in doubles.started] == [LEAD]  # no child run
    assert [r.outcome for r in doubles.records[0].tool_results] == [ToolOutcome.BAD_CALL]


async def test_a_callers_token_budget_covers_its_children(ts: WorkflowEnvironment) -> None:
    """Each child is given what its caller has left (the caller's turns, the calling one included,
    and its earlier children's whole use), and what the children use counts against the caller."""

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return tools(call("child", json.dumps({"task": f"part {inp.step}"}), id=f"a{inp.step}"))
        return answer(f"part done by {inp.run_id}") if inp.step == 3 else tools(call("work", id=f"w{inp.step}"))

    # every turn: 20 tokens; a child that finishes: 3 turns, 60 tokens
    doubles = Doubles(plan=plan(agents=["child"], max_tokens=200), plans={"child": plan()}, turns=turns)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    budgets = {s.run_id: s.budget.max_tokens for s in doubles.started if s.parent}
    assert budgets == {
        child_run_id(handle.id, 1, 0): 200 - 20,
        child_run_id(handle.id, 2, 0): 200 - 40 - 60,
        child_run_id(handle.id, 3, 0): 200 - 60 - 120,  # 20 left: one turn, then its budget is reached
    }
    third = doubles.ledger[f"{handle.id}:3:0"]
    assert third.outcome == ToolOutcome.TOOL_ERROR and "ended budget_exceeded" in third.output
    # 60 tokens of its own turns, 60 + 60 + 20 of its children's
    assert (result.status, result.error) == (RunStatus.BUDGET_EXCEEDED, "token budget reached: 200 of 200 tokens used")


async def test_a_caller_waiting_on_its_children_shows_a_pause_and_a_resume_at_once(ts: WorkflowEnvironment) -> None:
    """Patch pause-shown-while-children-run-1 (issue 41): a pause taken while the step waits on its
    sub-agent runs shows at once, in the update's answer, the progress query and the row (the client
    pauses the children with it: the tree holds still), not at the step's end, which paused children
    never reach; a resume shows at once too. Paused again when the children end, the run takes no
    step until it is resumed."""

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            return fan_out(2) if inp.step == 1 else answer("both answered")
        return tools(call("work", id="w1")) if inp.step == 1 else answer(f"answer of {inp.run_id}")

    doubles = Doubles(plan=plan(agents=["child"]), plans={"child": plan()}, turns=turns, tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        children = [child_run_id(handle.id, 1, i) for i in range(2)]
        await until(lambda: len(doubles.tool_calls) == 2, "both children in their tool")

        def writes() -> list[tuple[str, str, bool]]:
            return [(w.run_id, w.status, w.awaits_children) for w in doubles.status_writes]

        paused = await handle.execute_update(Update.PAUSE, result_type=RunProgress)
        assert paused.status == RunStatus.PAUSED
        await until(lambda: writes() == [(handle.id, RunStatus.PAUSED, True)], "the caller's row written paused")
        assert (await progress(handle)).status == RunStatus.PAUSED
        resumed = await handle.execute_update(Update.RESUME, result_type=RunProgress)
        assert resumed.status == RunStatus.RUNNING
        await until(lambda: len(writes()) == 2, "the caller's row written running")
        assert writes()[1] == (handle.id, RunStatus.RUNNING, True)
        assert (await progress(handle)).status == RunStatus.RUNNING

        await handle.execute_update(Update.PAUSE, result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()  # the children end while their caller is paused
        await until(lambda: len(writes()) == 4, "the caller paused at its step's end")
        assert writes()[2:] == [(handle.id, RunStatus.PAUSED, True), (handle.id, RunStatus.PAUSED, False)]
        assert all(doubles.end_of(c) is not None for c in children)
        assert doubles.steps_of(handle.id) == [1]  # no step 2 while paused: its pause write came first
        await handle.execute_update(Update.RESUME, result_type=RunProgress)
        result: RunResult = await handle.result()
        await replayed(handle, "agent_run_paused_caller.json")
    assert (result.status, result.output) == (RunStatus.COMPLETED, "both answered")
    assert doubles.steps_of(handle.id) == [1, 2]
    assert writes()[4:] == [(handle.id, RunStatus.RUNNING, False)]


async def test_a_call_made_when_the_budget_is_spent_starts_no_child(ts: WorkflowEnvironment) -> None:
    # The calling turn alone spends the 20 tokens of the budget.
    doubles = Doubles(
        plan=plan(agents=["child"], max_tokens=20),
        turns=lambda inp: fan_out(1) if inp.agent == LEAD else answer("a child ran"),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    assert result.status == RunStatus.BUDGET_EXCEEDED and [s.agent for s in doubles.started] == [LEAD]
    spent = doubles.ledger[f"{handle.id}:1:0"]
    assert (spent.outcome, spent.output) == (
        ToolOutcome.TOOL_ERROR,
        "error: child was not started: the token budget (20) is spent",
    )


# --- failover: a model that keeps failing hands the step to the agent's next model --------------------


def down(*models: str, error: str = "ModelUnavailable") -> Callable[[CallModelInput], ModelTurn]:
    """A model double whose `models` fail with `error` (retryable unless ModelRequestRejected or
    ConfigError, as the activity raises them); the others call `work` until step 3, then answer."""
    model = answer_at(3)

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.model in models:
            retryable = error == "ModelUnavailable"
            raise ApplicationError(
                f"{inp.model} failed: {error}",
                {"status": 503} if retryable else {},
                type=error,
                non_retryable=not retryable,
                next_retry_delay=timedelta(milliseconds=10) if retryable else None,
            )
        return model(inp)

    return turns


def failover_plan(*fallbacks: str, **kw: Any) -> RunPlan:
    return plan(model="a", fallback_models=list(fallbacks), **kw)


@pytest.mark.parametrize("memory", [False, True])
async def test_a_model_that_stays_down_fails_over_after_failover_after_attempts(
    ts: WorkflowEnvironment, memory: bool
) -> None:
    """Three failed attempts on `a`, then the same step calls `b`, and the run stays on `b` (across
    continue-as-new too); the move is logged once, with its reason."""
    doubles = Doubles(plan=failover_plan("b", failover_after=3, continue_as_new_every=1), turns=down("a"))
    async with bench(ts.client, doubles, memory=memory) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    assert (result.status, result.output) == (RunStatus.COMPLETED, "done")
    assert [(c.step, c.model) for c in doubles.calls] == [(1, "a"), (1, "a"), (1, "a"), (1, "b"), (2, "b"), (3, "b")]
    assert [c.failed_over_from for c in doubles.calls[3:]] == [["a"], [], []]  # the model span of the move names it
    assert doubles.failovers == [
        FailoverRecord(handle.id, "t", 1, "a", "b", 3, "a failed: ModelUnavailable", "ModelUnavailable")
    ]
    assert doubles.steps == [1, 2, 3]


async def test_a_rejected_request_fails_the_run_without_failover(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=failover_plan("b"), turns=down("a", error="ModelRequestRejected"))
    async with bench(ts.client, doubles) as b:
        message = await failure(await b.start())
    assert "a failed: ModelRequestRejected" in message
    assert [c.model for c in doubles.calls] == ["a"] and doubles.failovers == []


async def test_the_last_model_keeps_the_full_retry_policy(ts: WorkflowEnvironment) -> None:
    retry_spec = RetrySpec(max_attempts=3, initial_interval_seconds=0.01, max_interval_seconds=1)
    doubles = Doubles(plan=failover_plan("b", failover_after=1, retry=retry_spec), turns=down("a", "b"))
    async with bench(ts.client, doubles) as b:
        message = await failure(await b.start())
    assert [c.model for c in doubles.calls] == ["a"] + ["b"] * 3
    assert "b failed: ModelUnavailable" in message
    assert [(f.from_model, f.to_model, f.after_attempts) for f in doubles.failovers] == [("a", "b", 1)]


async def test_a_model_the_worker_cannot_call_is_passed_over_with_the_reason(ts: WorkflowEnvironment) -> None:
    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.model == "b":  # what the activity raises when the worker has no SDK or key for it
            raise ApplicationError("b: no ANTHROPIC_API_KEY here", type="ConfigError", non_retryable=True)
        return down("a")(inp)

    doubles = Doubles(plan=failover_plan("b", "c", failover_after=1), turns=turns)
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.COMPLETED
    assert [c.model for c in doubles.calls] == ["a", "b", "c", "c", "c"]
    assert [c.failed_over_from for c in doubles.calls[:3]] == [[], ["a"], ["a", "b"]]
    assert [(f.from_model, f.to_model, f.after_attempts, f.error_type, f.last_error) for f in doubles.failovers] == [
        ("a", "b", 1, "ModelUnavailable", "a failed: ModelUnavailable"),
        ("b", "c", 1, "ConfigError", "b: no ANTHROPIC_API_KEY here"),
    ]


async def test_without_a_failover_list_a_model_retries_by_its_policy_alone(ts: WorkflowEnvironment) -> None:
    retry_spec = RetrySpec(max_attempts=2, initial_interval_seconds=0.01, max_interval_seconds=1)
    doubles = Doubles(plan=plan(model="a", retry=retry_spec, failover_after=1), turns=down("a"))
    async with bench(ts.client, doubles) as b:
        await failure(await b.start())
    assert [c.model for c in doubles.calls] == ["a"] * 2 and doubles.failovers == []


# --- capacity: the shared limiter's waits are the workflow's, not an activity's ---------------------


def waits_first(times: int, reason: WaitReason, then: Callable[[CallModelInput], ModelTurn], key: str = "openai:x"):
    """A model double that answers step 1's first `times` calls with a wait, then as `then`."""
    seen: list[int] = []

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.step == 1 and len(seen) < times:
            seen.append(inp.step)
            return ModelTurn(model=inp.model, wait=CapacityWait(key=key, reason=reason, position=3, retry_after=90))
        return then(inp)

    return turns


async def test_a_call_that_waits_for_capacity_waits_in_the_workflow_then_goes_on(ts: WorkflowEnvironment) -> None:
    """Two waits: the run shows waiting_capacity with the key once, asks again after the wait's
    retry_after, then runs on; nothing of the waits reaches a step, and the run's priority goes with
    every call."""
    doubles = Doubles(plan=plan(), turns=waits_first(2, WaitReason.IN_FLIGHT, answer_at(2)))
    async with bench(ts.client, doubles) as b:
        handle = await b.start(RunInput(agent="double", task="t", tenant_id="t", priority=1))
        result: RunResult = await handle.result()
        history = await handle.fetch_history()
    assert (result.status, result.steps) == (RunStatus.COMPLETED, 2)
    assert [c.step for c in doubles.calls] == [1, 1, 1, 2] and {c.priority for c in doubles.calls} == {1}
    assert doubles.statuses == [(RunStatus.WAITING_CAPACITY, "openai:x"), (RunStatus.RUNNING, None)]
    assert doubles.steps == [1, 2] and all(r.turn.wait is None for r in doubles.records)
    timers = [e for e in history.events if e.HasField("timer_started_event_attributes")]
    assert [t.timer_started_event_attributes.start_to_fire_timeout.seconds for t in timers] == [90, 90]


async def test_an_open_breaker_fails_over_at_once_and_a_recovered_model_takes_the_run_back(
    ts: WorkflowEnvironment,
) -> None:
    """On `a` with `b` after it: a breaker wait moves the step to `b` without spending attempts; at
    step 2 the call on `b` finds `a` healthy again (a `recovered` answer) and the run goes back."""

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.step == 1 and inp.model == "a":
            return ModelTurn(model="a", wait=CapacityWait(key="a", reason=WaitReason.BREAKER, retry_after=30))
        if inp.step == 2 and inp.model == "b":
            assert inp.prefer == ["a"]
            return ModelTurn(model="b", wait=CapacityWait(key="a", reason=WaitReason.RECOVERED, position=0))
        return answer_at(3)(inp)

    doubles = Doubles(plan=failover_plan("b", failover_after=3), turns=turns)
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert (result.status, result.steps) == (RunStatus.COMPLETED, 3)
    assert [(c.step, c.model) for c in doubles.calls] == [(1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a")]
    assert [(f.step, f.from_model, f.to_model, f.after_attempts, f.error_type) for f in doubles.failovers] == [
        (1, "a", "b", 0, WaitReason.BREAKER),
        (2, "b", "a", 0, WaitReason.RECOVERED),
    ]
    assert doubles.statuses == []  # neither was a wait


async def test_the_last_model_waits_out_its_breaker(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=waits_first(1, WaitReason.BREAKER, answer_at(1)))
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert result.status == RunStatus.COMPLETED and len(doubles.calls) == 2
    assert doubles.status_names == [RunStatus.WAITING_CAPACITY, RunStatus.RUNNING]


# --- webhooks (patches webhook-1, webhook-2) ------------------------------------------------------

HOOK = "https://hooks.example/waypoint"


def with_webhook(**kw: Any) -> RunInput:
    return RunInput(agent="double", task="test", tenant_id="t", webhook=HOOK, **kw)


async def test_a_webhook_is_delivered_by_a_workflow_of_its_own_after_the_run_ends(ts: WorkflowEnvironment) -> None:
    """Two retryable failures, then delivered: three attempts of one delivery (its workflow's id), all
    after finish_run; the run's workflow had ended before the delivery did."""
    doubles = Doubles(plan=plan(), turns=answer_at(2, "the answer"), webhook_failures=2)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(with_webhook())
        result: RunResult = await handle.result()
        delivery = await delivery_of(ts.client, handle)
        assert await delivery.result() == "delivered"
    assert (result.status, result.output) == (RunStatus.COMPLETED, "the answer")
    (opened,) = doubles.opened
    assert (opened.delivery_id, opened.tenant_id, opened.run_id, opened.event) == (
        delivery.id,
        "t",
        handle.id,
        "run.finished",
    )
    assert opened.delivery_id.startswith("whd_") and doubles.webhook_finished_before == [1]
    assert [(p.delivery_id, p.attempt) for p in doubles.posts] == [(delivery.id, 1), (delivery.id, 2), (delivery.id, 3)]
    assert doubles.closed == []
    run_end, delivery_end = (await handle.describe()).close_time, (await delivery.describe()).close_time
    assert run_end is not None and delivery_end is not None and run_end <= doubles.posts[-1].at <= delivery_end


async def test_a_run_without_a_webhook_posts_nothing(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
        children = [
            e
            async for e in handle.fetch_history_events()
            if e.HasField("start_child_workflow_execution_initiated_event_attributes")
        ]
    assert result.status == RunStatus.COMPLETED and doubles.opened == [] and children == []


async def test_a_refused_webhook_goes_on_the_dead_letter_list_at_once(ts: WorkflowEnvironment) -> None:
    """A 4xx is not retried: one attempt, then the delivery is given up; the run's result is what
    finish_run returned."""
    doubles = Doubles(plan=plan(), turns=answer_at(2, "the answer"), webhook_refused=True)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(with_webhook())
        result: RunResult = await handle.result()
        assert await (await delivery_of(ts.client, handle)).result() == "failed"
    assert (result.status, result.output, result.steps) == (RunStatus.COMPLETED, "the answer", 2)
    assert [p.attempt for p in doubles.posts] == [1]
    (closed,) = doubles.closed
    assert closed.reason == "the webhook answered HTTP 400"


@pytest.mark.timeout(180)  # about a second of wall time per attempt: the dev server's timers tick in seconds
async def test_a_receiver_that_stays_down_is_retried_over_the_whole_window_then_dead_lettered(
    ts: WorkflowEnvironment,
) -> None:
    """Attempts 1, 2, 4 ... s apart, capped at an hour, until no attempt fits in the window; then the
    delivery is given up, on the dead-letter list. The run's workflow ended within a minute of virtual
    time; the delivery's lasted the window. A 4 h window (the setting) shows all of it: the doublings
    reach the cap after about 68 minutes and hourly attempts follow; the default day only adds hours."""
    assert Doubles(plan=plan()).webhook_window >= 24 * 3600  # the default: as long as the senders people know retry
    doubles = Doubles(plan=plan(), turns=answer_at(1, "the answer"), webhook_failures=10**6, webhook_window=4 * 3600)
    window = timedelta(seconds=doubles.webhook_window)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(with_webhook())
        assert (await handle.result()).status == RunStatus.COMPLETED
        run = await handle.describe()
        delivery = await delivery_of(ts.client, handle)
        assert await delivery.result() == "failed"
    posts, (closed,) = doubles.posts, doubles.closed
    assert [p.attempt for p in posts] == list(range(1, len(posts) + 1))
    first, last = posts[0].at, posts[-1].at
    for earlier, later in zip(posts, posts[1:], strict=False):
        wait = retry.webhook_backoff(earlier.attempt)
        # the dev server fires timers on a one-second tick: a wait is its backoff plus up to a few seconds
        assert wait <= later.at - earlier.at <= wait + timedelta(seconds=5), (earlier, later)
    hourly = [p for p in posts[1:] if retry.webhook_backoff(p.attempt - 1) == retry.WEBHOOK_MAX_INTERVAL]
    assert len(hourly) >= 2  # the cap was reached, and held
    assert last <= first + window < last + retry.webhook_backoff(len(posts))  # no attempt fitted after the last
    assert "its retry window ended" in (closed.reason or "") and "HTTP 503" in (closed.reason or "")
    assert last <= closed.at <= first + window + timedelta(minutes=1)
    assert run.close_time is not None and run.start_time is not None
    assert run.close_time - run.start_time < timedelta(minutes=1) and run.close_time <= posts[1].at


async def test_a_failed_run_posts_its_webhook_before_it_fails(ts: WorkflowEnvironment) -> None:
    def refuse(inp: CallModelInput) -> ModelTurn:
        raise ApplicationError("HTTP 400 from the model: bad request", type="ModelRequestRejected", non_retryable=True)

    doubles = Doubles(plan=plan(), turns=refuse)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(with_webhook())
        message = await failure(handle)
        assert await (await delivery_of(ts.client, handle)).result() == "delivered"
    assert "HTTP 400 from the model: bad request" in message  # the run's own failure, not the webhook's
    assert [f.status for f in doubles.finished] == [RunStatus.FAILED]
    assert len(doubles.opened) == 1 and doubles.webhook_finished_before == [1]


async def test_a_run_that_cannot_start_posts_its_webhook(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), start_error="unknown agent 'nobody'")
    async with bench(ts.client, doubles) as b:
        handle = await b.start(with_webhook())
        assert await failure(handle) == f"run {handle.id} could not start: unknown agent 'nobody'"
        assert await (await delivery_of(ts.client, handle)).result() == "delivered"
    (finish,) = doubles.finished
    assert finish.start is not None and finish.start.webhook == HOOK  # its failed row records the webhook
    assert [o.run_id for o in doubles.opened] == [handle.id]


async def test_a_cancelled_run_posts_its_webhook(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start(with_webhook())
        await until_status(handle, RunStatus.RUNNING)
        await handle.execute_update(Update.CANCEL, "enough", result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await handle.result()
        assert await (await delivery_of(ts.client, handle)).result() == "delivered"
    assert result.status == RunStatus.CANCELLED and len(doubles.opened) == 1
