"""The shape of a step: Postgres writes as local activities, memory inside the model call, local
tools; and what keeps a run going when memory is away, without losing an episode."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from waypoint.activities.model import ModelActivities
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_memory_worker, build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.memory import Episode, open_store
from waypoint.names import Activity
from waypoint.store import RunStore
from waypoint.types import CallModelInput

pytestmark = pytest.mark.postgres


async def scheduled_activities(client: Client, run_id: str) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in client.get_workflow_handle(run_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_a_step_is_one_remote_model_call_and_one_remote_tool_call(memory_worker, client: Client):
    wp, _ = memory_worker
    run_id = await wp.start_run("add things", agent="calculator")  # 3 steps, 2 tool calls then 1
    assert (await wp.result(run_id)).status == "completed"
    remote = await scheduled_activities(client, run_id)
    # Memory rides in call_model; the run's writes are local activities; only the final episode
    # (the last step, when the run ends) is a memory activity of its own.
    assert remote.count(Activity.CALL_MODEL) == 3 and remote.count(Activity.RUN_TOOL) == 3
    assert Activity.RECORD_STEP not in remote and Activity.START_RUN not in remote
    assert remote.count(Activity.MEMORY_STEP) == 1
    row = await wp.run(run_id)
    assert row.remembered_step == 3  # every step's episodes are in memory


async def test_one_worker_process_runs_the_model_call_with_memory_on_the_run_queue(one_process_worker, client: Client):
    """`run_worker` (the default: one process opens the store and serves both queues): the model
    call, memory inside it, goes to the run's own task queue, where Temporal can start it eagerly."""
    wp = one_process_worker
    run_id = await wp.start_run("add things", agent="calculator")
    assert (await wp.result(run_id)).status == "completed"
    queues = {
        e.activity_task_scheduled_event_attributes.task_queue.name
        async for e in client.get_workflow_handle(run_id).fetch_history_events()
        if e.activity_task_scheduled_event_attributes.activity_type.name == Activity.CALL_MODEL
    }
    assert queues == {wp.settings.task_queue}
    assert (await wp.run(run_id)).remembered_step == 3  # the calls stored the episodes


async def test_a_model_call_with_memory_on_a_worker_without_the_store_runs_nothing(engine, settings, agents):
    """It fails at once, not retried there, and says why: the workflow sends it to the memory queue."""
    acts = ModelActivities(RunStore(engine), agents, settings)  # a main worker of a process without the store
    call = CallModelInput("run-x", settings.tenant, "calculator", 1, "scripted", memory=True, recall_k=3)
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(acts.call_model, call)
    assert (caught.value.type, caught.value.non_retryable) == ("MemoryElsewhere", True)


async def test_a_local_tool_runs_in_the_workflow_worker_with_the_ledger(client: Client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("double it", agent="quick")
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "twice 21 is 42")
    assert Activity.RUN_TOOL not in await scheduled_activities(client, run_id)
    effects = await wp.effects(run_id)
    assert [(e.idempotency_key, e.tool, e.output, e.outcome) for e in effects] == [
        (f"{run_id}:1:0", "double", "42", "ok")
    ]


class FailingOnce:
    """The episodic store, with the first write failing (as a Qdrant server away would)."""

    def __init__(self, inner):
        self.inner = inner
        self.failed = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def upsert(self, episodes: Sequence[Episode]) -> list[str]:
        if not self.failed:
            self.failed += 1
            raise ConnectionError("qdrant is away")
        return await self.inner.upsert(episodes)


async def test_an_episode_that_could_not_be_stored_is_stored_later(
    client: Client, engine, settings: Settings, agents: AgentRegistry
):
    store = open_store(settings)
    flaky = FailingOnce(store)
    try:
        async with (
            build_worker(client, engine, settings, agents, memory=True),
            build_memory_worker(client, engine, settings, agents, flaky),  # type: ignore[arg-type]
        ):
            wp = Waypoint(client, engine, settings)
            run_id = await wp.start_run("add things", agent="calculator")
            assert (await wp.result(run_id)).status == "completed"  # memory never stops a run
            episodes = await store.list_run(settings.tenant, run_id)
    finally:
        await store.close()
    assert flaky.failed == 1  # step 1's episode met the failure...
    assert sorted({e.step for e in episodes if e.kind == "step"}) == [1, 2, 3]  # ...and was stored later
    assert (await wp.run(run_id)).remembered_step == 3


@pytest.mark.timeout(120)
async def test_a_compaction_pass_stores_what_memory_missed_of_a_finished_run(
    client: Client, engine, settings: Settings, agents: AgentRegistry
):
    from waypoint.gateway.schedule import compact_now

    async with build_worker(client, engine, settings, agents, memory=True):  # memory on, no memory worker
        wp = Waypoint(client, engine, settings.model_copy(update={"memory": True}))
        run_id = await wp.start_run("add things", agent="calculator")
        result = await wp.result(run_id)
    assert result.status == "completed" and result.output == "The answer is 15."
    # The first step waited for a memory worker (MEMORY_SCHEDULE_TIMEOUT, 10 s, in real time: a
    # schedule-to-start timeout is not skipped by the time-skipping tests) and went on without
    # memory; the two steps after it did not try again; the last step's episode was offered once
    # when the run ended (another wait).
    on_memory_queue = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in client.get_workflow_handle(run_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.task_queue.name.endswith("-memory")
    ]
    assert on_memory_queue == [Activity.CALL_MODEL, Activity.MEMORY_STEP]
    assert (await wp.run(run_id)).remembered_step == 0  # nothing stored: the next memory worker does it
    store = open_store(settings)
    try:
        async with (
            build_worker(client, engine, settings, agents, memory=True),
            build_memory_worker(client, engine, settings, agents, store),
        ):
            report = await compact_now(client, settings, tenant_id=settings.tenant)
        episodes = await store.list_run(settings.tenant, run_id)
    finally:
        await store.close()
    assert report.steps_remembered == 3 and report.memory_error is None
    assert sorted({e.step for e in episodes if e.kind == "step"}) == [1, 2, 3]
    assert (await wp.run(run_id)).remembered_step == 3


class Counting:
    """The episodic store, recording the steps of each upsert's step episodes."""

    def __init__(self, inner):
        self.inner = inner
        self.batches: list[list[int]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def upsert(self, episodes: Sequence[Episode]) -> list[str]:
        self.batches.append(sorted({e.step for e in episodes if e.kind == "step"}))
        return await self.inner.upsert(episodes)


async def test_a_runs_episodes_are_stored_in_batches_and_all_of_them_by_its_end(
    client: Client, engine, settings: Settings
):
    """One upsert per EPISODE_BATCH_STEPS steps instead of one per step; the steps still waiting are
    stored by the call that answers (a sub-agent run stores nothing on its way out), the last step by
    the run's end, so every step's episode is in memory once the run is done, each once."""
    from tests.agents import add
    from waypoint import Agent, ScriptedModel, ScriptedTurn
    from waypoint.store.working import EPISODE_BATCH_STEPS

    tool_steps = EPISODE_BATCH_STEPS + 3
    adder = Agent(
        name="long_adder",
        instructions="Add, many times.",
        model=ScriptedModel(
            [*(ScriptedTurn(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(tool_steps)), ScriptedTurn("done")]
        ),
        tools=(add,),
    )
    store = open_store(settings)
    counting = Counting(store)
    try:
        async with (
            build_worker(client, engine, settings, AgentRegistry([adder]), memory=True),
            build_memory_worker(client, engine, settings, AgentRegistry([adder]), counting),  # type: ignore[arg-type]
        ):
            wp = Waypoint(client, engine, settings.model_copy(update={"memory": True}))
            run_id = await wp.start_run("add things", agent="long_adder")
            assert (await wp.result(run_id)).status == "completed"
            episodes = await store.list_run(settings.tenant, run_id)
    finally:
        await store.close()
    last = tool_steps + 1
    assert counting.batches == [
        list(range(1, EPISODE_BATCH_STEPS + 1)),  # the model call of the step after a full batch
        list(range(EPISODE_BATCH_STEPS + 1, last)),  # the answer's call: the steps still waiting
        [last],  # the run's end: the answer's own step
    ]
    assert sorted(e.step for e in episodes if e.kind == "step") == list(range(1, last + 1))
    assert (await wp.run(run_id)).remembered_step == last
