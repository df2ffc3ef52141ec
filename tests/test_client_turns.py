"""A thread's next turn from Python (`wp.threads.start_turn`) and a run's one status view
(`wp.status`), against a real worker, Temporal and Postgres. Double-texting: turns sent at once
each take a place of their own (the atomic join), never one place twice."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers import eventually, waypoint
from waypoint.client import Turn, Waypoint
from waypoint.errors import Conflict
from waypoint.names import FINISHED, RunStatus

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


async def stepped(wp: Waypoint, run_id: str) -> None:
    async def probe() -> bool:
        return await wp.run_if_written(run_id) is not None and (await wp.run(run_id)).steps >= 1

    await eventually(probe, timeout=30, what=f"run {run_id}'s first step")


async def test_turns_sent_at_once_queue_one_after_another(client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    thread = await wp.threads.create()
    first = await wp.threads.start_turn(thread.thread_id, Turn("count", agent="listener"))
    assert first.status == "starting" and not first.repeat
    await stepped(wp, first.run_id)

    # The live view: the row, and its progress from Temporal while it runs.
    view = await wp.status(first.run_id)
    assert view.row.run_id == first.run_id and view.live is not None and view.live_error is None

    # A busy thread refuses a turn under reject (the default), naming the busy run.
    with pytest.raises(Conflict, match=first.run_id):
        await wp.threads.start_turn(thread.thread_id, Turn("x", agent="listener"))

    # Two turns at once under enqueue: each its own place, the later waiting for the earlier.
    a, b = await asyncio.gather(
        wp.threads.start_turn(thread.thread_id, Turn("stop now", agent="listener"), "enqueue"),
        wp.threads.start_turn(thread.thread_id, Turn("stop now", agent="listener"), "enqueue"),
    )
    assert (a.status, b.status) == (RunStatus.QUEUED, RunStatus.QUEUED)
    members = [m.run_id for m in (await wp.threads.get(thread.thread_id)).runs]
    assert members[0] == first.run_id and sorted(members[1:]) == sorted([a.run_id, b.run_id])
    waits = {(await wp.run_or_planned(r)).after_run_id for r in members[1:]}
    assert waits == {first.run_id, members[1]}  # a chain, not two runs waiting for the first

    await wp.cancel(first.run_id)
    for run_id in members[1:]:
        assert (await wp.result(run_id)).status in FINISHED


async def test_the_status_view_answers_from_postgres_without_temporal(client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("count", agent="listener")
    await stepped(wp, run_id)

    async def unreachable(_run_id: str) -> None:
        from waypoint.errors import Unavailable

        raise Unavailable("Temporal is down")

    gateway = await wp.temporal()
    real = gateway.progress
    gateway.progress = unreachable  # type: ignore[method-assign,assignment]
    try:
        view = await wp.status(run_id)
    finally:
        gateway.progress = real  # type: ignore[method-assign]
    assert view.row.status == RunStatus.RUNNING and view.live is None
    assert view.live_error is not None and "Temporal is down" in view.live_error
    await wp.cancel(run_id)
    assert (await wp.result(run_id)).status == RunStatus.CANCELLED


async def test_the_cli_takes_a_turn_on_a_thread(client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    thread = await wp.threads.create()
    first = await waypoint(settings, "run", "count", "--agent", "listener", "--thread", thread.thread_id)
    assert first.code == 0, first.err
    first_id = first.out.strip()
    await stepped(wp, first_id)

    busy = await waypoint(settings, "run", "stop now", "--agent", "listener", "--thread", thread.thread_id)
    assert busy.code == 1 and first_id in busy.err and "Traceback" not in busy.err

    queued = await waypoint(
        settings, "run", "stop now", "--agent", "listener", "--thread", thread.thread_id, "--multitask", "enqueue"
    )
    assert queued.code == 0, queued.err
    second_id = queued.out.strip()
    assert [m.run_id for m in (await wp.threads.get(thread.thread_id)).runs] == [first_id, second_id]
    assert (await wp.run_or_planned(second_id)).after_run_id == first_id
    await wp.cancel(first_id)
    assert (await wp.result(second_id)).status in FINISHED
