"""Agent Protocol crons spoken to by LangGraph's `langgraph-sdk` against a real `waypoint serve`, a
real worker, Temporal and Postgres. Fires come from Temporal's own trigger, never from waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError, BadRequestError, NotFoundError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleOverlapPolicy, ScheduleRange

from tests.conftest import ApiServer
from tests.helpers import eventually, human
from waypoint.client import Waypoint
from waypoint.names import RunStatus
from waypoint.types import RunInput

pytestmark = pytest.mark.postgres


async def action_input(client: Client, cron_id: str) -> RunInput:
    """The RunInput each fire of the cron starts its run with, as Temporal holds it."""
    action = (await client.get_schedule_handle(cron_id).describe()).schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    [decoded] = await client.data_converter.decode(action.args, [RunInput])  # type: ignore[arg-type]
    assert isinstance(decoded, RunInput)
    return decoded


@pytest.mark.timeout(90)
async def test_a_stateless_cron_fires_a_run_and_is_searched_updated_and_deleted(
    api: ApiServer, client: Client, engine: AsyncEngine, worker
):
    lg = get_client(url=api.url, api_key=api.key)
    wp = Waypoint(client, engine, api.settings)
    until = datetime.now(UTC) + timedelta(days=30)
    cron = await lg.crons.create(
        "calculator",
        schedule="0 9 * * mon-fri",
        timezone="Europe/Paris",
        input=human("add 2 and 3"),
        config={"configurable": {"max_steps": 5, "priority": 2}},
        multitask_strategy="enqueue",
        end_time=until,
    )
    cid = cron["cron_id"]
    assert (cron["assistant_id"], cron["thread_id"], cron["schedule"], cron["timezone"]) == (
        "calculator",
        None,
        "0 9 * * mon-fri",
        "Europe/Paris",
    )
    assert cron["enabled"] is True and cron["next_run_date"] is not None
    next_run = datetime.fromisoformat(cron["next_run_date"]).astimezone(ZoneInfo("Europe/Paris"))
    assert (next_run.weekday() < 5, next_run.hour, next_run.minute) == (True, 9, 0)  # 9:00 in Paris, a weekday
    assert cron["payload"]["input"] == human("add 2 and 3")
    assert cron["payload"]["config"] == {"configurable": {"max_steps": 5, "priority": 2}}
    assert cron["payload"]["multitask_strategy"] == "enqueue"
    # what Temporal holds: the expression, its zone, enqueue as buffer-one, the end
    desc = await client.get_schedule_handle(cid).describe()
    [calendar] = desc.schedule.spec.calendars  # Temporal keeps a cron expression as a calendar
    assert (calendar.hour, calendar.minute, calendar.day_of_week) == (
        (ScheduleRange(9),),
        (ScheduleRange(0),),
        (ScheduleRange(1, 5),),
    )
    assert desc.schedule.spec.time_zone_name == "Europe/Paris"
    assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.BUFFER_ONE
    assert desc.schedule.spec.end_at is not None and abs((desc.schedule.spec.end_at - until).total_seconds()) < 1
    inp = await action_input(client, cid)
    assert (inp.task, inp.thread_id, inp.priority, inp.budget.max_steps) == ("add 2 and 3", None, 2, 5)

    assert [c["cron_id"] for c in await lg.crons.search(assistant_id="calculator")] == [cid]
    assert await lg.crons.search(assistant_id="listener") == []
    assert await lg.crons.count() == 1 and await lg.crons.count(assistant_id="listener") == 0
    assert await lg.crons.search(select=["cron_id", "enabled"]) == [{"cron_id": cid, "enabled": True}]

    # Temporal fires it (its own trigger): an ordinary run, linked to the cron, completes
    await client.get_schedule_handle(cid).trigger()
    fired = await eventually(lambda: wp.runs(schedule_id=cid), what="the fired run's row")
    run_id = fired[0].run_id
    assert (await wp.result(run_id)).status == RunStatus.COMPLETED
    assert fired[0].agent == "calculator" and fired[0].task == "add 2 and 3" and fired[0].priority == 2

    # update: a new expression, disabled (Temporal's pause), no end
    changed = await lg.crons.update(cid, schedule="30 8 * * *", enabled=False, end_time=None)
    assert (changed["schedule"], changed["enabled"], changed["end_time"], changed["next_run_date"]) == (
        "30 8 * * *",
        False,
        None,
        None,
    )
    desc = await client.get_schedule_handle(cid).describe()
    [calendar] = desc.schedule.spec.calendars
    assert desc.schedule.state.paused and (calendar.hour, calendar.minute) == (
        (ScheduleRange(8),),
        (ScheduleRange(30),),
    )
    assert desc.schedule.spec.end_at is None
    assert [c["cron_id"] for c in await lg.crons.search(enabled=False)] == [cid]
    assert await lg.crons.search(enabled=True) == []
    assert (await lg.crons.update(cid, enabled=True))["enabled"] is True
    assert not (await client.get_schedule_handle(cid).describe()).schedule.state.paused

    # delete: gone from the search and from Temporal; the run it fired stays
    await lg.crons.delete(cid)
    assert await lg.crons.search() == [] and await lg.crons.count() == 0
    with pytest.raises(Exception, match="not found"):
        await client.get_schedule_handle(cid).describe()
    assert [r.run_id for r in await wp.runs(schedule_id=cid)] == [run_id]
    with pytest.raises(NotFoundError):
        await lg.crons.delete(cid)


async def test_bad_crons_are_one_clear_error_and_leave_nothing(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    with pytest.raises(BadRequestError) as bad:
        await lg.crons.create("calculator", schedule="61 * * * *", input=human("add"))
    assert "invalid cron expression '61 * * * *'" in bad.value.response.text
    with pytest.raises(BadRequestError) as zone:
        await lg.crons.create("calculator", schedule="0 9 * * *", timezone="Mars/Olympus", input=human("add"))
    assert "unknown time zone 'Mars/Olympus'" in zone.value.response.text
    with pytest.raises(NotFoundError) as unknown:
        await lg.crons.create("no-such-agent", schedule="0 9 * * *", input=human("add"))
    assert "no-such-agent" in unknown.value.response.text
    with pytest.raises(BadRequestError) as strategy:
        await lg.crons.create("calculator", schedule="0 9 * * *", input=human("add"), multitask_strategy="queue")
    assert "unknown multitask_strategy 'queue'" in strategy.value.response.text
    with pytest.raises(BadRequestError) as empty:
        await lg.crons.create("calculator", schedule="0 9 * * *")
    assert "the run's task" in empty.value.response.text
    with pytest.raises(APIStatusError) as meta:  # not kept, so refused rather than dropped
        await lg.crons.create("calculator", schedule="0 9 * * *", input=human("add"), metadata={"team": "a"})
    assert meta.value.response.status_code == 501 and "metadata" in meta.value.response.text
    with pytest.raises(NotFoundError):
        await lg.crons.create_for_thread("no-such-thread", "calculator", schedule="0 9 * * *", input=human("add"))
    assert await lg.crons.count() == 0  # nothing half-made
    with pytest.raises(NotFoundError):
        await lg.crons.update("sched-nope", enabled=False)


@pytest.mark.timeout(60)
async def test_a_cron_on_a_thread_fires_runs_that_carry_the_thread(api: ApiServer, client: Client, worker):
    lg = get_client(url=api.url, api_key=api.key)
    thread = await lg.threads.create()
    tid = thread["thread_id"]
    cron = await lg.crons.create_for_thread(
        tid,
        "calculator",
        schedule="0 * * * *",
        input=human("add 2 and 3"),
        multitask_strategy="interrupt",
        enabled=False,
    )
    cid = cron["cron_id"]
    assert cron["thread_id"] == tid and cron["payload"]["multitask_strategy"] == "interrupt"
    assert cron["enabled"] is False and cron["next_run_date"] is None  # created paused
    desc = await client.get_schedule_handle(cid).describe()
    assert desc.schedule.state.paused and desc.schedule.policy.overlap == ScheduleOverlapPolicy.CANCEL_OTHER
    assert (await action_input(client, cid)).thread_id == tid  # each fire joins the thread when it starts
    assert [c["cron_id"] for c in await lg.crons.search(thread_id=tid)] == [cid]
    assert await lg.crons.count(thread_id="another-thread") == 0
    await lg.crons.delete(cid)


@pytest.mark.timeout(90)
async def test_a_fired_thread_cron_run_appears_on_the_thread(api: ApiServer, client: Client, worker):
    lg = get_client(url=api.url, api_key=api.key)
    thread = await lg.threads.create()
    tid = thread["thread_id"]
    first = await lg.runs.wait(tid, "calculator", input=human("add 1 and 1"))
    cron = await lg.crons.create_for_thread(tid, "calculator", schedule="0 * * * *", input=human("add 2 and 3"))
    await client.get_schedule_handle(cron["cron_id"]).trigger()

    async def two_runs() -> list:
        runs = await lg.runs.list(tid)
        return runs if len(runs) == 2 and runs[0]["status"] == "success" else []

    runs = await eventually(two_runs, timeout=60, what="the fired run on the thread")
    assert runs[0]["run_id"].startswith(f"{cron['cron_id']}-")  # the newest is the fired one
    messages = (await lg.threads.get_state(tid))["values"]["messages"]
    assert messages[: len(first["messages"])] == first["messages"]  # it went on from the thread's run
    assert messages[len(first["messages"])]["content"] == "add 2 and 3"


@pytest.mark.timeout(60)
async def test_a_cron_of_a_created_assistant_runs_its_graph_with_its_settings(api: ApiServer, client: Client, worker):
    lg = get_client(url=api.url, api_key=api.key)
    kept = await lg.assistants.create("calculator", context={"max_steps": 3, "priority": 2})
    cron = await lg.crons.create(kept["assistant_id"], schedule="@daily", input=human("add 2 and 3"))
    assert cron["assistant_id"] == "calculator"  # the assistant's graph: a fire starts its agent
    assert (await action_input(client, cron["cron_id"])).priority == 2
    assert (await action_input(client, cron["cron_id"])).budget.max_steps == 3
    await lg.crons.delete(cron["cron_id"])
    told = await lg.assistants.create("calculator", config={"configurable": {"instructions": "Be brief."}})
    with pytest.raises(BadRequestError) as refused:
        await lg.crons.create(told["assistant_id"], schedule="@daily", input=human("add 2 and 3"))
    assert "instructions" in refused.value.response.text and "cannot keep" in refused.value.response.text
