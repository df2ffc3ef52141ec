"""Runs that wait before they start (workflows/starts.py), in the time-skipping environment with the
activity doubles: a delayed run's durable timer, a cancel while it waits (start_run never called),
an enqueued run that waits for the run before it and forks its last step, a run that joins a thread.
The real-stack side (rows, the Agent Protocol's strategies) is in tests/test_http_double_texting.py.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from temporalio.testing import WorkflowEnvironment

from tests.workflow_doubles import Doubles, answer, answer_at, bench, delivery_of, loop_tool
from tests.workflow_helpers import failure, plan, replayed, until_status
from waypoint.names import MemoryView, RunStatus, Update
from waypoint.types import CallModelInput, ForkOrigin, ModelTurn, RunInput, RunProgress, RunResult

pytestmark = pytest.mark.timeout(60)


async def test_a_delayed_run_waits_for_its_time_then_starts(ts: WorkflowEnvironment) -> None:
    """Patch wait-to-start-1: the run's row is written at once (scheduled); after an hour of
    (skipped: the environment skips a waiting workflow's timers) time it starts as any run does."""
    doubles = Doubles(plan=plan(), turns=answer_at(1, "done"))
    async with bench(ts.client, doubles) as b:
        start_at = time.time() + 3600
        handle = await b.start(RunInput(agent="double", task="later", tenant_id="t", start_at=start_at))
        result: RunResult = await handle.result()
        elapsed = await ts.get_current_time(handle) - (await handle.describe()).start_time
        await replayed(handle, "agent_run_delayed.json")
    assert (result.status, result.output) == (RunStatus.COMPLETED, "done")
    assert elapsed >= timedelta(hours=1)
    (held,) = doubles.held
    assert (held.status, held.start_at, held.task) == (RunStatus.SCHEDULED, start_at, "later")
    assert [s.run_id for s in doubles.started] == [handle.id] and doubles.started[0].fork is None


async def test_a_run_cancelled_while_scheduled_ends_cancelled_without_starting(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    async with bench(ts.client, doubles) as b:
        start_at = time.time() + 86400
        with ts.with_time_skipping_disabled():  # the timer waits: a cancel comes first
            handle = await b.start(RunInput(agent="double", task="tomorrow", tenant_id="t", start_at=start_at))
        await until_status(handle, RunStatus.SCHEDULED)
        answered = await handle.execute_update(Update.CANCEL, "not needed", result_type=RunProgress)
        result: RunResult = await handle.result()
        await replayed(handle, "agent_run_cancelled_scheduled.json")
    assert answered.status == RunStatus.SCHEDULED  # the answer comes before the run ends
    assert (result.status, result.steps) == (RunStatus.CANCELLED, 0)
    assert doubles.started == [] and doubles.calls == []
    (end,) = doubles.finished
    assert (end.status, end.error, end.start) == (RunStatus.CANCELLED, "not needed", None)


async def test_temporal_cancelling_a_waiting_run_ends_it_cancelled(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    async with bench(ts.client, doubles) as b:
        start_at = time.time() + 86400
        with ts.with_time_skipping_disabled():  # the timer waits: a cancel comes first
            handle = await b.start(RunInput(agent="double", task="tomorrow", tenant_id="t", start_at=start_at))
        await until_status(handle, RunStatus.SCHEDULED)
        await handle.cancel()
        result: RunResult = await handle.result()
    assert result.status == RunStatus.CANCELLED and doubles.started == []
    assert doubles.finished[0].error == "its workflow was cancelled"


async def test_an_enqueued_run_waits_for_the_run_before_it_then_forks_its_last_step(
    ts: WorkflowEnvironment,
) -> None:
    def turns(inp: CallModelInput) -> ModelTurn:
        if inp.run_id.startswith("first") and inp.step < 3:
            return loop_tool()(inp)
        return answer("done")

    doubles = Doubles(plan=plan(), turns=turns, tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        first = await b.client.start_workflow(
            "AgentRunWorkflow",
            RunInput(agent="double", task="one", tenant_id="t"),
            id="first-run",
            task_queue=b.task_queue,
        )
        await until_status(first, RunStatus.RUNNING)
        second = await b.start(RunInput(agent="double", task="two", tenant_id="t", after_run="first-run"))
        queued = await until_status(second, RunStatus.QUEUED)
        assert queued.step == 0 and [s.run_id for s in doubles.started] == ["first-run"]
        assert [(h.status, h.after_run) for h in doubles.held] == [(RunStatus.QUEUED, "first-run")]
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        result: RunResult = await second.result()
        await replayed(second, "agent_run_enqueued.json")
    assert result.status == RunStatus.COMPLETED
    assert doubles.steps_of("first-run") == [1, 2, 3]
    begun = doubles.started[1]
    assert begun.run_id == second.id
    assert begun.fork == ForkOrigin(run_id="first-run", step=3, message="two", memory=MemoryView.NOW)
    assert doubles.steps_of(second.id) == [4]  # it goes on from the first run's last step


async def test_a_run_cancelled_while_queued_never_starts(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        first = await b.start()
        await until_status(first, RunStatus.RUNNING)
        second = await b.start(RunInput(agent="double", task="two", tenant_id="t", after_run=first.id))
        await until_status(second, RunStatus.QUEUED)
        await second.execute_update(Update.CANCEL, None, result_type=RunProgress)
        result: RunResult = await second.result()
        await first.execute_update(Update.CANCEL, None, result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        await first.result()
    assert (result.status, result.steps) == (RunStatus.CANCELLED, 0)
    assert [s.run_id for s in doubles.started] == [first.id]
    end = doubles.end_of(second.id)
    assert end is not None and end.error == "cancelled by a user"


async def test_a_delayed_enqueued_run_is_scheduled_then_queued(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=loop_tool(), tool_gate=asyncio.Event())
    async with bench(ts.client, doubles) as b:
        first = await b.start()
        await until_status(first, RunStatus.RUNNING)
        start_at = time.time() + 60
        inp = RunInput(agent="double", task="two", tenant_id="t", after_run=first.id, start_at=start_at)
        second = await b.start(inp)
        await until_status(second, RunStatus.QUEUED)  # its minute was skipped
        assert [h.status for h in doubles.held] == [RunStatus.SCHEDULED, RunStatus.QUEUED]
        await second.execute_update(Update.CANCEL, None, result_type=RunProgress)
        await second.result()
        await first.execute_update(Update.CANCEL, None, result_type=RunProgress)
        assert doubles.tool_gate is not None
        doubles.tool_gate.set()
        await first.result()


async def test_a_run_joining_a_thread_goes_on_from_its_newest_run(ts: WorkflowEnvironment) -> None:
    """A cron on a thread: the fired run takes the thread's next place and forks the run before it
    (finished here: at once); on an empty thread it starts fresh."""
    doubles = Doubles(plan=plan(), turns=answer_at(1, "hi"))
    async with bench(ts.client, doubles) as b:
        before = await b.start()
        await before.result()
        doubles.threads = {"t1": [before.id], "empty": []}
        joined = await b.start(RunInput(agent="double", task="again", tenant_id="t", thread_id="t1"))
        fresh = await b.start(RunInput(agent="double", task="first", tenant_id="t", thread_id="empty"))
        assert (await joined.result()).status == RunStatus.COMPLETED
        await replayed(joined, "agent_run_thread_joined.json")
        assert (await fresh.result()).status == RunStatus.COMPLETED
    assert doubles.threads == {"t1": [before.id, joined.id], "empty": [fresh.id]}
    forks = {s.run_id: s.fork for s in doubles.started}
    assert forks[joined.id] == ForkOrigin(run_id=before.id, step=1, message="again", memory=MemoryView.NOW)
    assert forks[fresh.id] is None


async def test_a_run_whose_thread_is_gone_fails_to_start_with_the_reason(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    async with bench(ts.client, doubles) as b:
        handle = await b.start(RunInput(agent="double", task="x", tenant_id="t", thread_id="gone"))
        message = await failure(handle)
    assert message == f"run {handle.id} could not start: thread 'gone' is gone"
    assert doubles.started == []
    (end,) = doubles.finished
    assert (end.status, end.start) == (RunStatus.FAILED, None)  # its row was held: it just ends


async def test_a_run_cancelled_while_scheduled_posts_its_webhook(ts: WorkflowEnvironment) -> None:
    """Patches webhook-1 and -2: a run that ends before it starts has ended all the same; its row
    records the webhook, and its delivery is a workflow of its own."""
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    hook = "https://hooks.example/waypoint"
    async with bench(ts.client, doubles) as b:
        start_at = time.time() + 86400
        with ts.with_time_skipping_disabled():
            inp = RunInput(agent="double", task="tomorrow", tenant_id="t", start_at=start_at, webhook=hook)
            handle = await b.start(inp)
        await until_status(handle, RunStatus.SCHEDULED)
        await handle.execute_update(Update.CANCEL, "not needed", result_type=RunProgress)
        result: RunResult = await handle.result()
        delivery = await delivery_of(ts.client, handle)
        assert await delivery.result() == "delivered"
    assert result.status == RunStatus.CANCELLED and doubles.started == []
    assert [h.webhook for h in doubles.held] == [hook]
    assert [(o.run_id, o.delivery_id) for o in doubles.opened] == [(handle.id, delivery.id)]
    assert doubles.webhook_finished_before == [1]
