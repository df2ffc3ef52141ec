"""The workflow's side of budget pools, in Temporal's time-skipping environment with every activity a
double (tests/workflow_doubles.py): a model call the pool refuses ends the run `budget_exceeded` (a
child's end is its caller's tool error), and one the pool makes wait waits in the workflow, as for
capacity, then goes on. The pool's arithmetic is tests/test_budget_store.py's; the whole tree on the
real stack is tests/test_budget_pool.py's."""

from __future__ import annotations

import json

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.workflow_doubles import Doubles, answer, answer_at, bench, call, tools
from tests.workflow_helpers import LEAD, plan
from waypoint.names import RunStatus, ToolOutcome, WaitReason, child_run_id
from waypoint.types import CallModelInput, CapacityWait, ModelTurn, RunResult

pytestmark = pytest.mark.timeout(60)

SPENT = "token budget reached: 1,480 of 1,500 tokens used by the tree of r; the next model call needs at least 164"


async def test_a_call_the_pool_refuses_ends_the_run_budget_exceeded_with_no_step(
    ts: WorkflowEnvironment,  # noqa: F811
) -> None:
    def turns(inp: CallModelInput) -> ModelTurn:
        return answer_at(5)(inp) if inp.step < 3 else ModelTurn(model=inp.model, refused=SPENT)

    doubles = Doubles(plan=plan(budget_pool="r"), turns=turns)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
        history = await handle.fetch_history()
    assert (result.status, result.error, result.steps) == (RunStatus.BUDGET_EXCEEDED, SPENT, 2)
    assert doubles.steps == [1, 2]  # the refused call's step has no record
    assert {c.budget_pool for c in doubles.calls} == {"r"}  # every call names its tree's pool
    markers = [
        e.marker_recorded_event_attributes for e in history.events if e.HasField("marker_recorded_event_attributes")
    ]
    assert any("budget-pool-1" in str(m.details) for m in markers)


async def test_a_child_the_pool_refuses_is_its_callers_tool_error(ts: WorkflowEnvironment) -> None:  # noqa: F811
    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.agent == LEAD:
            if inp.step == 1:
                return tools(call("child", json.dumps({"task": "count"}), id="a0"))
            return answer("the child ran out")
        return tools(call("work", id="w1")) if inp.step == 1 else ModelTurn(model=inp.model, refused=SPENT)

    doubles = Doubles(plan=plan(agents=["child"], budget_pool="r"), plans={"child": plan(budget_pool="r")}, turns=turns)
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        result: RunResult = await handle.result()
    child = child_run_id(handle.id, 1, 0)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "the child ran out")
    end = doubles.end_of(child)
    assert end is not None and (end.status, end.error) == (RunStatus.BUDGET_EXCEEDED, SPENT)
    told = doubles.ledger[f"{handle.id}:1:0"]
    assert told.outcome == ToolOutcome.TOOL_ERROR
    assert told.output == f"error: sub-agent child ended budget_exceeded: {SPENT}"


async def test_a_call_whose_room_is_held_in_flight_waits_then_goes_on(ts: WorkflowEnvironment) -> None:  # noqa: F811
    """The pool's room is held by a sibling's call: the run waits (waiting_capacity, the pool's key) on
    its timer or a signal, asks again, and goes on; the wait is no step."""
    seen: list[int] = []

    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.step == 1 and not seen:
            seen.append(1)
            held = CapacityWait(key="budget:r", reason=WaitReason.BUDGET, position=1, retry_after=30)
            return ModelTurn(model=inp.model, wait=held)
        return answer_at(2)(inp)

    doubles = Doubles(plan=plan(budget_pool="r"), turns=turns)
    async with bench(ts.client, doubles) as b:
        result: RunResult = await (await b.start()).result()
    assert (result.status, result.steps) == (RunStatus.COMPLETED, 2)
    assert [c.step for c in doubles.calls] == [1, 1, 2]
    assert doubles.statuses == [(RunStatus.WAITING_CAPACITY, "budget:r"), (RunStatus.RUNNING, None)]
