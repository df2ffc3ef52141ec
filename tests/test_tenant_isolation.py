"""Tenant B can reach nothing of tenant A: not through the Python API, not through the CLI, not
through memory recall. Every answer is "not found", as if the run did not exist."""

from __future__ import annotations

import pytest

from tests.helpers import waypoint
from waypoint.client import Waypoint
from waypoint.errors import NotFound

pytestmark = pytest.mark.postgres


async def test_tenant_b_reaches_nothing_of_tenant_a(memory_worker, settings):
    wp_a, store = memory_worker
    run_id = await wp_a.start_run("What is the launch code?", agent="scout")
    assert (await wp_a.result(run_id)).status == "completed"
    assert await wp_a.memory_show(run_id)  # tenant A has memories of the run

    b = Waypoint(wp_a.client, wp_a.engine, settings.model_copy(update={"tenant": "tenant-b"}))
    attempts = {
        "run": b.run(run_id),
        "result": b.result(run_id),
        "progress": b.progress(run_id),
        "timeline": b.timeline(run_id),
        "state": b.state(run_id, 1),
        "diff": b.diff(run_id, 1, 2),
        "events": b.events(run_id),
        "lineage": b.lineage(run_id),
        "fork": b.fork(run_id, 1),
        "verify": b.verify(run_id),
        "replay": b.replay(run_id),
        "delete": b.delete(run_id),
        "trace_id": b.trace_id(run_id),
        "compact": b.compact(run_id),
        "memory_show": b.memory_show(run_id),
        "memory_forget": b.memory_forget(run_id),
        "pause": b.pause(run_id),
        "cancel": b.cancel(run_id),
        "send": b.send(run_id, "hi"),
        "approve": b.approve(run_id),
    }
    for name, attempt in attempts.items():
        with pytest.raises(NotFound):
            await attempt
            pytest.fail(f"{name} reached tenant A's run")
    with pytest.raises(NotFound):
        [line async for line in b.export(run_id)]
    assert run_id not in {r.run_id for r in await b.runs()}
    assert await b.memory_search("launch code ZEBRA-7") == []
    assert await store.count("tenant-b") == 0

    # nothing of A changed: its memories and run are intact
    assert await wp_a.memory_show(run_id)
    assert (await wp_a.verify(run_id)).ok


@pytest.mark.parametrize(
    "args",
    [
        ("status", "{run}"),
        ("show", "{run}", "--step", "1"),
        ("export", "{run}"),
        ("verify", "{run}"),
        ("fork", "{run}", "--step", "1"),
        ("compact", "{run}"),
        ("memory", "show", "{run}"),
        ("trace", "{run}"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
async def test_the_cli_says_not_found_to_another_tenant(memory_worker, settings, args):
    wp_a, _ = memory_worker
    run_id = await wp_a.start_run("What is the launch code?", agent="scout")
    await wp_a.result(run_id)
    done = await waypoint(settings, "--tenant", "tenant-b", *(a.replace("{run}", run_id) for a in args))
    assert done.code == 1
    assert ("not found" in done.err or "no run" in done.err) and run_id in done.err
    assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err


async def test_a_write_to_another_tenants_thread_is_refused_not_skipped(engine, settings):
    a = Waypoint(None, engine, settings.model_copy(update={"tenant": "tenant-a"}))
    b = Waypoint(None, engine, settings.model_copy(update={"tenant": "tenant-b"}))
    thread = await a.threads.create()
    await a.threads.reserve_run(thread.thread_id, 0, "run-of-a")
    with pytest.raises(NotFound):
        await b.threads.release_run(thread.thread_id, "run-of-a")
    assert [r.run_id for r in (await a.threads.get(thread.thread_id)).runs] == ["run-of-a"]
    await a.threads.release_run(thread.thread_id, "run-of-a")
    with pytest.raises(NotFound):  # a slot that is gone is said so, again not skipped
        await a.threads.release_run(thread.thread_id, "run-of-a")
