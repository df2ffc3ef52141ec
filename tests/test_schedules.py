"""Scheduled agents on Temporal Schedules: the Python API (`wp.schedules`), `waypoint cron`, HTTP
`/v1/schedules` and `runs --schedule`. Fired with Temporal's own trigger, never by waiting for a time."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, ScheduleOverlapPolicy

from tests.conftest import ApiServer
from tests.helpers import eventually, one_line_error, waypoint
from waypoint.app import console as out
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.gateway.schedule import desired_schedule
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

    # an update replaces the spec on Temporal and keeps the schedule paused
    await wp.schedules.pause(sid)
    changed = await wp.schedules.update(sid, cron="30 6 * * *", tz="Asia/Tokyo", overlap="skip", max_steps=None)
    assert changed.paused and changed.spec["cron"] == "30 6 * * *" and changed.spec["every"] is None
    assert changed.spec["max_steps"] is None and changed.spec["priority"] == 2  # cleared, and kept
    desc = await client.get_schedule_handle(sid).describe()
    assert desc.schedule.state.paused and desc.schedule.spec.time_zone_name == "Asia/Tokyo"
    assert desc.schedule.spec.intervals == [] and desc.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP

    # delete removes both; the fired run stays, still linked
    await wp.schedules.delete(sid)
    assert await schedule_rows(engine, sid) == []
    with pytest.raises(Exception, match="not found"):
        await client.get_schedule_handle(sid).describe()
    assert [r.run_id for r in await wp.runs(schedule_id=sid)] == [run_id]
    with pytest.raises(NotFound, match="waypoint cron list"):
        await wp.schedules.get(sid)
    assert json.dumps(shown.spec)  # the spec is plain JSON


async def test_bad_schedules_are_refused_whole_and_leave_nothing(
    client: Client, engine: AsyncEngine, settings: Settings, worker
) -> None:
    wp = Waypoint(client, engine, settings)
    bad = [
        ({"cron": "0 25 * * *"}, "invalid cron expression '0 25 \\* \\* \\*': the hour is 0 to 23"),
        ({"cron": "0 9 * *"}, "4 field\\(s\\)"),
        ({"cron": "0 9 ? * mon"}, "the day of month is 1 to 31, got '\\?'"),  # Temporal has no `?`
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"every": 0}, "every must be from 1 second to 1 year"),
        ({"every": -5}, "every must be from 1 second to 1 year"),
        ({}, "exactly one of every"),
        ({"every": 60, "cron": "@daily"}, "exactly one of every"),
        ({"every": 60, "end_at": datetime.now(UTC) - timedelta(minutes=1)}, "in the past"),
        ({"every": 60, "overlap": "sometimes"}, "unknown overlap policy 'sometimes'"),
        ({"every": 60, "jitter_seconds": 60}, "jitter .* must be shorter than every"),
        ({"every": 60, "webhook": "ftp://example.com/x"}, "invalid webhook"),
        ({"every": 60, "agent": "nobody"}, "nobody"),
        ({"every": 60, "thread_id": "no-such-thread"}, "no thread"),
    ]
    for extra, message in bad:
        args = {"agent": "calculator", "task": "add", "schedule_id": "sched-bad", **extra}
        with pytest.raises((InvalidInput, NotFound), match=message):
            await wp.schedules.create(**args)
    assert await schedule_rows(engine, "sched-bad") == []

    # Temporal refuses (its id is taken by a Schedule Waypoint did not make): the row goes again
    taken = f"sched-{uuid.uuid4().hex[:8]}"
    await client.create_schedule(taken, desired_schedule(settings))
    with pytest.raises(Conflict, match="Temporal has a schedule"):
        await wp.schedules.create(agent="calculator", task="add", every=60, schedule_id=taken)
    assert await schedule_rows(engine, taken) == []
    # and that Schedule, which no row of the tenant names, is out of its reach
    with pytest.raises(NotFound):
        await wp.schedules.delete(taken)
    await client.get_schedule_handle(taken).describe()
    await client.get_schedule_handle(taken).delete()

    # what the local check lets through, Temporal takes too
    for expr in ("*/15 9-17 * jan-jun 7", "0 0 1,15 * sun-sat", "@weekly"):
        made = await wp.schedules.create(agent="calculator", task="add", cron=expr, tz="America/New_York")
        assert made.next_runs, expr
        await wp.schedules.delete(made.schedule_id)

    with pytest.raises(NotFound, match="no schedule 'sched-nope': list them with `waypoint cron list`"):
        await wp.schedules.trigger("sched-nope")
    with pytest.raises(NotFound, match="waypoint cron list"):
        await wp.runs(schedule_id="sched-nope")


async def test_cron_on_the_command_line(client: Client, engine: AsyncEngine, settings: Settings, worker) -> None:
    done = await waypoint(
        settings, "cron", "create", "--agent", "calculator", "--task", "add 2 and 3", "--cron", "0 9 * * mon-fri",
        "--tz", "Europe/Paris", "--overlap", "cancel_other", "--catchup", "10m", "--jitter", "30s", "--until", "30d",
        "--paused", "--json",
    )  # fmt: skip
    assert done.code == 0, done.err
    made = json.loads(done.out)
    sid = made["schedule_id"]
    assert made["paused"] is True and made["spec"]["cron"] == "0 9 * * mon-fri" and made["spec"]["catchup"] == 600
    desc = await client.get_schedule_handle(sid).describe()
    assert desc.schedule.spec.time_zone_name == "Europe/Paris" and desc.schedule.state.paused
    assert desc.schedule.policy.overlap == ScheduleOverlapPolicy.CANCEL_OTHER
    assert desc.schedule.policy.catchup_window == timedelta(minutes=10)

    # paused: it fires at no time, and `show` says so as `list` does
    assert made["next_runs"] == []
    shown_paused = await waypoint(settings, "cron", "show", sid)
    assert re.search(r"next\s+-", shown_paused.out), shown_paused.out

    # update: what is given changes, the rest stays (paused stays paused); a contradiction is one line
    done = await waypoint(settings, "cron", "update", sid, "--every", "2h", "--task", "add 4 and 5", "--json")
    assert done.code == 0, done.err
    changed = json.loads(done.out)
    assert (changed["task"], changed["spec"]["every"], changed["spec"].get("cron")) == ("add 4 and 5", 7200, None)
    assert (
        changed["paused"] is True and changed["spec"]["catchup"] == 600 and changed["spec"]["overlap"] == "cancel_other"
    )
    assert (await client.get_schedule_handle(sid).describe()).schedule.spec.intervals[0].every == timedelta(hours=2)
    both = await waypoint(settings, "cron", "update", sid, "--model", "openai:x", "--clear", "model")
    assert "--model and --clear model contradict each other" in one_line_error(both)

    # a paused schedule still fires when triggered
    assert (await waypoint(settings, "cron", "trigger", sid)).code == 0
    wp = Waypoint(client, engine, settings)
    fired = await eventually(lambda: wp.runs(schedule_id=sid), what="the fired run's row")
    await wp.result(fired[0].run_id)
    listed, table = await asyncio.gather(
        waypoint(settings, "runs", "--schedule", sid, "--json"),
        waypoint(settings, "cron", "list"),
    )
    assert [(r["run_id"], r["schedule_id"]) for r in json.loads(listed.out)] == [(fired[0].run_id, sid)]
    assert sid in table.out and "every 2h" in table.out, table.out
    assert f"{fired[0].run_id} completed" in table.out, table.out
    # `waypoint status` shows the schedule that fired a run
    with out.console.capture() as shown:
        out.console.print(out.run_table(await wp.run(fired[0].run_id)))
    assert re.search(rf"schedule_id\s+{sid}", shown.get()), shown.get()

    # delete; and bad input is one `error:` line, exit 1
    create = ("cron", "create", "--agent", "calculator", "--task", "t")
    deleted, *errors = await asyncio.gather(
        waypoint(settings, "cron", "delete", sid),
        waypoint(settings, *create, "--cron", "0 9 * * * *"),
        waypoint(settings, "cron", "show", "sched-nope"),
    )
    assert deleted.code == 0 and await schedule_rows(engine, sid) == []
    assert "invalid cron expression '0 9 * * * *': 6 field(s)" in one_line_error(errors[0])
    assert "no schedule 'sched-nope': list them with `waypoint cron list`" in one_line_error(errors[1])


async def test_schedules_over_http(api: ApiServer, worker, client: Client) -> None:
    http = api.http
    made = await http.post("/v1/schedules", json={"agent": "calculator", "task": "add", "every": 3600})
    assert made.status_code == 201, made.text
    sid = made.json()["schedule_id"]
    assert made.headers["Location"] == f"/v1/schedules/{sid}" and made.json()["spec"]["overlap"] == "skip"
    assert (await http.post(f"/v1/schedules/{sid}/pause", json={"note": "hold"})).json()["paused"] is True
    assert (await http.post(f"/v1/schedules/{sid}/resume")).json()["paused"] is False
    assert (await http.post(f"/v1/schedules/{sid}/trigger")).status_code == 200

    async def fired() -> list[dict[str, object]]:
        runs = (await http.get("/v1/runs", params={"schedule_id": sid})).json()["runs"]
        return [r for r in runs if r["status"] == "completed"]

    done = await eventually(fired, what="the fired run completing")
    assert done[0]["schedule_id"] == sid
    assert [s["schedule_id"] for s in (await http.get("/v1/schedules")).json()["schedules"]] == [sid]
    assert (await http.get(f"/v1/schedules/{sid}")).json()["recent"][0]["run_id"] == done[0]["run_id"]

    for body, code in (
        ({"every": 0}, 422),  # the body's bounds
        ({"every": 60, "overlap": "never"}, 422),
        ({"every": 60, "surprise": 1}, 422),
        ({"cron": "every day"}, 400),  # the client's rules: invalid_input
        ({"cron": "@daily", "tz": "Atlantis/Capital"}, 400),
        ({}, 400),
    ):
        refused = await http.post("/v1/schedules", json={"agent": "calculator", "task": "add", **body})
        assert refused.status_code == code, (body, refused.text)
    assert (await http.get("/v1/schedules/sched-nope")).status_code == 404
    assert (await http.post("/v1/schedules/sched-nope/trigger")).status_code == 404
    assert (await http.get("/v1/runs", params={"schedule_id": "sched-nope"})).status_code == 404

    assert (await http.delete(f"/v1/schedules/{sid}")).status_code == 204
    assert (await http.get(f"/v1/schedules/{sid}")).status_code == 404
    assert (await http.delete(f"/v1/schedules/{sid}")).status_code == 404
