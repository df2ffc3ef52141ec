"""Scheduled agents on Temporal Schedules: the Python API (`wp.schedules`), `waypoint cron`, HTTP
`/v1/schedules` and `runs --schedule`. Fired with Temporal's own trigger, never by waiting for a time."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, ScheduleOverlapPolicy

from tests.helpers import eventually
from waypoint.app.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.names import RunStatus
from waypoint.store.schema import schedules

pytestmark = pytest.mark.postgres


async def schedule_rows(engine: AsyncEngine, schedule_id: str) -> list[str]:
    async with engine.connect() as conn:
        query = select(schedules.c.tenant_id).where(schedules.c.schedule_id == schedule_id)
        return list((await conn.execute(query)).scalars())


async def test_a_schedule_fires_an_ordinary_run_linked_to_it(
    client: Client, engine: AsyncEngine, settings: Settings, worker
) -> None:
    wp = Waypoint(client, engine, settings)
    until = datetime.now(UTC) + timedelta(days=30)
    made = await wp.schedules.create(
        agent="calculator",
        task="add 2 and 3",
        every=3600,
        overlap="buffer_one",
        catchup_seconds=600,
        jitter_seconds=30,
        end_at=until,
        max_steps=5,
        priority=2,
    )
    sid = made.schedule_id
    assert sid.startswith("sched-") and made.tenant_id == settings.tenant and not made.paused
    assert made.spec["every"] == 3600 and made.spec["overlap"] == "buffer_one" and made.next_runs
    # what Temporal holds: the spec and policy as given, the action as start_run starts a run
    desc = await client.get_schedule_handle(sid).describe()
    assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.BUFFER_ONE
    assert desc.schedule.policy.catchup_window == timedelta(seconds=600)
    assert desc.schedule.spec.jitter == timedelta(seconds=30)
    assert desc.schedule.spec.end_at is not None and abs((desc.schedule.spec.end_at - until).total_seconds()) < 1
    assert [i.every for i in desc.schedule.spec.intervals] == [timedelta(hours=1)]
    action = desc.schedule.action
    assert action.task_queue == settings.task_queue and action.id == sid  # type: ignore[attr-defined]
    assert action.priority.priority_key == 2 and action.priority.fairness_key == settings.tenant  # type: ignore[attr-defined]

    # fire it now: the run completes, its row names the schedule, `runs --schedule` lists it
    await wp.schedules.trigger(sid)
    fired = await eventually(lambda: wp.runs(schedule_id=sid), what="the fired run's row")
    run_id = fired[0].run_id
    assert run_id.startswith(f"{sid}-") and fired[0].schedule_id == sid and fired[0].priority == 2
    assert (await wp.result(run_id)).status == RunStatus.COMPLETED
    memo = await (await client.get_workflow_handle(run_id).describe()).memo_value("tenant_id")
    assert memo == settings.tenant
    shown = await wp.schedules.get(sid)
    assert [(r.run_id, r.status) for r in shown.recent] == [(run_id, RunStatus.COMPLETED)]

    # pause and resume reach Temporal
    paused = await wp.schedules.pause(sid, note="holiday")
    assert paused.paused and paused.note == "holiday"
    assert (await client.get_schedule_handle(sid).describe()).schedule.state.paused
    assert not (await wp.schedules.resume(sid)).paused
    assert [s.schedule_id for s in await wp.schedules.list(agent="calculator")] == [sid]

    # another tenant sees nothing of it
    other = "other-tenant"
    with pytest.raises(NotFound, match="waypoint cron list"):
        await wp.schedules.get(sid, tenant_id=other)
    for call in (wp.schedules.pause, wp.schedules.trigger, wp.schedules.delete):
        with pytest.raises(NotFound):
            await call(sid, tenant_id=other)
    assert await wp.schedules.list(tenant_id=other) == []
    assert (await client.get_schedule_handle(sid).describe()).schedule.state.paused is False

    # delete removes both; the fired run stays, still linked
    await wp.schedules.delete(sid)
    assert await schedule_rows(engine, sid) == []
    with pytest.raises(Exception, match="not found"):
        await client.get_schedule_handle(sid).describe()
    assert [r.run_id for r in await wp.runs(schedule_id=sid)] == [run_id]
    with pytest.raises(NotFound, match="waypoint cron list"):
        await wp.schedules.get(sid)
    assert json.dumps(shown.spec)  # the spec is plain JSON
