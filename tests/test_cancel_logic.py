"""A cancel that leaves a true record (patch cancel-tree-1, workflows/cancels.py), in the time-skipping
environment with the activity doubles: a tool in flight finishes and its step is recorded, no model
or tool call starts once the cancel reached a run (proved on each run's own history: none is
scheduled after its update was accepted or its cancel request arrived), a cancel during an approval
wait starts no tool of the step, and a cancel mid-fan-out stops a three-level tree, every run
recording its own end. The real stack (20 cancels at random moments, `verify --all` after each) is
in tests/test_cancel_tree.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from tests.workflow_doubles import Doubles, answer, bench, call, loop_tool, spec, tools
from tests.workflow_helpers import plan, replayed, until, until_status
from waypoint.names import Activity, RunStatus, ToolOutcome, Update, child_run_id
from waypoint.types import CallModelInput, ModelTurn, RunProgress, RunResult

pytestmark = pytest.mark.timeout(60)
WORK = (Activity.CALL_MODEL.value, Activity.RUN_TOOL.value)


async def started_after_cancel(client: Client, run_id: str) -> list[str]:
    """The model and tool activities the run's history schedules after the cancel reached it (the
    `cancel` update accepted, or Temporal's cancel request); fails if none reached it."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    reached, late = False, []
    for e in history.events:
        accepted = e.workflow_execution_update_accepted_event_attributes
        if e.HasField("workflow_execution_update_accepted_event_attributes"):
            reached = reached or accepted.accepted_request.input.name == Update.CANCEL
        elif e.HasField("workflow_execution_cancel_requested_event_attributes"):
            reached = True
        elif reached and e.HasField("activity_task_scheduled_event_attributes"):
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            if name in WORK:
                late.append(f"{name} (event {e.event_id})")
    assert reached, f"no cancel reached {run_id}"
    return late


async def cancel_reached(client: Client, run_id: str) -> bool:
    history = await client.get_workflow_handle(run_id).fetch_history()
    return any(e.HasField("workflow_execution_cancel_requested_event_attributes") for e in history.events)


async def test_a_tool_in_flight_finishes_and_its_step_is_recorded(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until(lambda: len(doubles.tool_calls) == 1, "the tool in flight")
        await handle.execute_update(Update.CANCEL, "enough", result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await handle.result()
        assert (doubles.tools_done, doubles.tools_cut) == ([f"{handle.id}:1:0"], [])
        assert await started_after_cancel(ts.client, handle.id) == []
    assert (result.status, result.error) == (RunStatus.CANCELLED, "enough")
    (step,) = doubles.records
    assert step.step == 1 and [r.outcome for r in step.tool_results] == [ToolOutcome.OK]
    assert doubles.finished[0].interrupted == {
        "step": 1,
        "activity": "run_tool",
        "why": "cancelled during step 1: tool work (call 0) finished; the step is recorded as it ended",
        "recorded": True,
        "in_flight": [
            {
                "call": "tool",
                "call_index": 0,
                "name": "work",
                "idempotency_key": f"{handle.id}:1:0",
                "ended": "finished",
                "outcome": "ok",
            }
        ],
        "not_started": [],
    }


async def test_temporals_cancel_request_lets_the_tool_finish_too(ts: WorkflowEnvironment) -> None:
    """`temporal workflow cancel` (or a parent-close policy): the request lands in the workflow as
    asyncio.CancelledError; the run's body is shielded from it, so it is a cancel like the update."""
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until(lambda: len(doubles.tool_calls) == 1, "the tool in flight")
        await handle.cancel()
        await until_status(handle, RunStatus.RUNNING)  # still: its tool runs on
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await handle.result()
        assert (doubles.tools_done, doubles.tools_cut) == ([f"{handle.id}:1:0"], [])
        assert await started_after_cancel(ts.client, handle.id) == []
        described = await handle.describe()
    assert (result.status, result.error) == (RunStatus.CANCELLED, "its workflow was cancelled")
    assert described.status == WorkflowExecutionStatus.COMPLETED  # it ended on its own, with its record
    assert doubles.steps == [1]
    interrupted = doubles.finished[0].interrupted
    assert interrupted is not None and (interrupted["activity"], interrupted["recorded"]) == ("run_tool", True)


async def test_a_cancel_during_an_approval_wait_starts_no_tool_of_the_step(ts: WorkflowEnvironment) -> None:
    """The step's ungated call waits with the gated one (tools start after the approvals): neither starts."""
    doubles = Doubles(
        plan=plan(tools=[spec("launch", requires_approval=True), spec()]),
        turns=lambda inp: tools(call("launch", id="l1"), call("work", id="w1")),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.WAITING_APPROVAL)
        await handle.execute_update(Update.CANCEL, "not today", result_type=RunProgress)
        result: RunResult = await handle.result()
        assert await started_after_cancel(ts.client, handle.id) == []
    assert (result.status, doubles.tool_calls) == (RunStatus.CANCELLED, [])
    (step,) = doubles.records
    assert [(r.name, r.outcome) for r in step.tool_results] == [
        ("launch", ToolOutcome.CANCELLED),
        ("work", ToolOutcome.CANCELLED),
    ]
    assert step.tool_results[1].output == "error: not run: the run was cancelled (not today)"
    interrupted = doubles.finished[0].interrupted
    assert interrupted is not None
    assert interrupted["in_flight"] == [{"call": "approval", "names": ["launch"], "ended": "not run"}]
    assert interrupted["not_started"] == [{"call_index": 0, "name": "launch"}, {"call_index": 1, "name": "work"}]


LEAD = "double"


def tree_turns(inp: CallModelInput) -> ModelTurn:
    """lead: 3 children (2 at a time); child: a tool and a leaf at once; leaf: a tool. Never answers
    at step 1's end: the cancel comes while every tool is held."""
    if inp.step > 1:
        return answer(f"{inp.agent} done")
    if inp.agent == LEAD:
        return tools(*(call("child", json.dumps({"task": f"part {i}"}), id=f"c{i}") for i in range(3)))
    if inp.agent == "child":
        return tools(call("work", id="w"), call("leaf", json.dumps({"task": "dig"}), id="l"))
    return tools(call("work", id="w"))


async def test_a_cancel_mid_fan_out_stops_the_whole_tree(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(
        plan=plan(agents=["child"], max_parallel_agents=2),
        plans={"child": plan(agents=["leaf"]), "leaf": plan()},
        turns=tree_turns,
        tool_gate=asyncio.Event(),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        lead = handle.id
        children = [child_run_id(lead, 1, i) for i in range(2)]  # the third waits for a slot
        leaves = [child_run_id(c, 1, 1) for c in children]
        await until(lambda: len(doubles.tool_calls) == 4, "two children and two leaves in their tools")
        await handle.execute_update(Update.CANCEL, "stop the tree", result_type=RunProgress)
        for run_id in children + leaves:  # asked at once: the parent's close is still far off (tools are held)
            await until_reached(ts.client, run_id)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await handle.result()
        for run_id in [lead, *children, *leaves]:
            assert await started_after_cancel(ts.client, run_id) == [], run_id
        assert len(doubles.tools_done) == 4 and doubles.tools_cut == []  # every tool in flight finished
        await replayed(handle, "agent_run_cancelled_tree.json")
        await replayed(ts.client.get_workflow_handle(children[0]), "agent_run_cancelled_tree_child.json")
    assert (result.status, result.error) == (RunStatus.CANCELLED, "stop the tree")
    reason = {lead: "stop the tree"}
    for parent, run_id in [*((lead, c) for c in children), *zip(children, leaves, strict=True)]:
        reason[run_id] = f"its caller {parent} was cancelled: {reason[parent]}"
        end = doubles.end_of(run_id)
        assert end is not None and (end.status, end.error) == (RunStatus.CANCELLED, reason[run_id])
        assert doubles.steps_of(run_id) == [1]  # each step recorded as it ended
    assert doubles.end_of(child_run_id(lead, 1, 2)) is None  # the call that waited for a slot never started

    def ledger(run_id: str, index: int) -> tuple[str, str]:
        found = doubles.ledger[f"{run_id}:1:{index}"]
        return found.outcome, found.output

    assert ledger(children[0], 1) == (
        ToolOutcome.TOOL_ERROR,
        f"error: sub-agent leaf ended cancelled: {reason[leaves[0]]}",
    )
    (lead_step,) = [r for r in doubles.records if r.run_id == lead]
    third = lead_step.tool_results[2]
    assert (third.outcome, third.output) == (
        ToolOutcome.CANCELLED,
        "error: not run: the run was cancelled (stop the tree)",
    )
    interrupted = doubles.end_of(lead).interrupted  # type: ignore[union-attr]
    assert interrupted is not None
    assert (interrupted["activity"], interrupted["recorded"]) == ("agents", True)
    assert sorted((e["run_id"], e["ended"]) for e in interrupted["in_flight"]) == [
        (c, RunStatus.CANCELLED) for c in children
    ]
    assert interrupted["not_started"] == [{"call_index": 2, "name": "child"}]
    child = doubles.end_of(children[0]).interrupted  # type: ignore[union-attr]
    assert child is not None
    assert sorted((e["call"], e["ended"]) for e in child["in_flight"]) == [
        ("agent", RunStatus.CANCELLED),
        ("tool", "finished"),
    ]


async def until_reached(client: Client, run_id: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not await cancel_reached(client, run_id):
        assert loop.time() < deadline, f"the cancel never reached {run_id}"
        await asyncio.sleep(0.05)


async def test_a_child_whose_caller_was_terminated_ends_the_same_way(ts: WorkflowEnvironment) -> None:
    """The parent-close policy is the net under the caller's own cancel: a caller that ends without
    one (terminated here) leaves Temporal to cancel its child, which lets its tool finish too."""
    doubles = Doubles(
        plan=plan(agents=["child"]),
        plans={"child": plan()},
        turns=lambda inp: (
            answer("x")
            if inp.step > 1
            else tools(call("child", '{"task": "t"}') if inp.agent == LEAD else call("work", id="w"))
        ),
        tool_gate=asyncio.Event(),
    )
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        child = child_run_id(handle.id, 1, 0)
        await until(lambda: len(doubles.tool_calls) == 1, "the child in its tool")
        await handle.terminate("gone")
        await until_reached(ts.client, child)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        await until(lambda: doubles.end_of(child) is not None, "the child's end")
        assert (doubles.tools_done, doubles.tools_cut) == ([f"{child}:1:0"], [])
        assert await started_after_cancel(ts.client, child) == []
    end = doubles.end_of(child)
    assert end is not None and (end.status, end.error) == (RunStatus.CANCELLED, "its caller ended")
    assert doubles.steps_of(child) == [1]
