"""Compaction on the real stack: a live run compacted while it runs, CompactionWorkflow passes, the
Schedule, and the CLI (`compaction apply|show`, `compact`; `schedule`, its deprecated alias). One
spawned `waypoint` shows the process; the CLI's other commands run in process (`waypoint_here`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import Client, ScheduleOverlapPolicy
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from tests.helpers import (
    eventually,
    make_run,
    next_call_view,
    one_line_error,
    range_messages,
    tool_heavy,
    waypoint,
    waypoint_here,
    waypoint_in_process,
)
from tests.ports import reserve_port
from tests.processes import env_for, stack_pids, start_dev, stop_dev
from waypoint.activities.compaction import CompactionActivities
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.compaction_types import CompactionInput, CompactionReport, CompactRunInput, RememberInput
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.gateway.schedule import apply_schedule, compact_now, describe_schedule
from waypoint.names import Activity, EventKind, RunStatus, Workflow, memory_task_queue
from waypoint.store import RunStore
from waypoint.store.compactions import latest_compaction
from waypoint.store.db import create_engine
from waypoint.store.log import append_events
from waypoint.tokens import messages_tokens

pytestmark = pytest.mark.postgres


async def test_compacting_a_live_run_loses_no_turn(client, engine, store: RunStore, settings, worker):
    """A real run (the looper agent, 25 of its 50 steps) compacted again and again while it runs.
    Half the steps are still several compactions while it runs: the property is that none of them
    loses a turn, which does not grow with the run's length."""
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("loop", agent="looper", max_steps=25)
    acts = CompactionActivities(store, settings.model_copy(update={"compaction_keep_steps": 1}))
    results = []
    while True:
        try:
            status = (await wp.run(run_id)).status
        except NotFound:  # its row is not written yet
            await asyncio.sleep(0.02)
            continue
        if status != RunStatus.RUNNING:
            break
        results.append(await acts.compact(CompactRunInput(run_id, settings.tenant)))
        await asyncio.sleep(0.05)
    results.append(await acts.compact(CompactRunInput(run_id, settings.tenant)))
    created = [r for r in results if r.created]
    assert len(created) >= 2
    assert [r.last_seq for r in created] == sorted(r.last_seq for r in created)
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
    assert row is not None
    in_range = await range_messages(engine, run_id, row["first_seq"], row["last_seq"])
    assert messages_tokens(in_range) == row["tokens_before"]  # every turn of the range was counted
    everything = await range_messages(engine, run_id, 1, 100_000)
    view = await next_call_view(store, settings, run_id)
    assert view[-1] == everything[-1]  # the newest turn is in working memory


def memory_worker(client: Client, settings: Settings, saved: list) -> Worker:
    @activity.defn(name=Activity.SAVE_EPISODES)
    async def save_episodes(episodes: list[dict]) -> int:
        saved.extend(episodes)
        return len(episodes)

    @activity.defn(name=Activity.REMEMBER_MISSING)
    async def remember_missing(inp: RememberInput) -> int:
        return 0

    queue = memory_task_queue(settings.task_queue)
    return Worker(client, task_queue=queue, activities=[save_episodes, remember_missing])


async def test_a_pass_compacts_big_runs_reports_a_failing_one_and_saves_summaries(
    client, engine, store: RunStore, settings, worker
):
    big = await make_run(store, settings, tool_heavy())
    small = await make_run(store, settings, tool_heavy()[:1])
    saved: list[dict] = []
    cfg = settings.model_copy(update={"compaction_threshold_tokens": 2000})
    async with memory_worker(client, settings, saved):
        report = await compact_now(client, cfg, tenant_id=settings.tenant)
    by_run = {r.run_id: r for r in report.results}
    assert report.selected == 1 and set(by_run) == {big} and small not in by_run  # under the threshold
    assert by_run[big].created and by_run[big].error is None
    assert report.episodes_saved == 1 and report.memory_error is None
    assert saved == [
        {
            "tenant": settings.tenant,
            "agent": "calculator",
            "run_id": big,
            "step": 6,
            "kind": "summary",
            "text": by_run[big].summary,
            "importance": 0.8,
            "index": 0,
        }
    ]
    # A model answer the compactor cannot read: the real compactor fails on it with a KeyError, which
    # a pass retries (PASS_RETRY: 1 s, then 2 s) and then reports with the run; that retry and report
    # is tests/test_workflow_logic.py's, in virtual time. Made after the pass, so the pass waits for none.
    broken = await make_run(store, settings, tool_heavy())
    async with engine.begin() as conn:
        await append_events(
            conn, broken, [(5, EventKind.MODEL_RESPONSE, {"content": None, "tool_calls": [{"id": "x"}]})]
        )
    with pytest.raises(KeyError):  # through the activity's boundary unchanged: Temporal retries it
        await ActivityEnvironment().run(
            CompactionActivities(store, cfg).compact_run, CompactRunInput(broken, settings.tenant)
        )


async def test_a_missing_memory_worker_is_reported_not_fatal(client, store: RunStore, settings, worker):
    run_id = await make_run(store, settings, tool_heavy())
    report = await client.execute_workflow(
        Workflow.COMPACTION,
        CompactionInput(tenant_id=settings.tenant, run_id=run_id, memory_timeout_seconds=1),
        id=f"compaction-{uuid.uuid4().hex[:8]}",
        task_queue=settings.task_queue,
        result_type=CompactionReport,
    )
    assert report.results[0].created and report.episodes_saved == 0
    assert "summary episodes not saved" in report.memory_error
    assert memory_task_queue(settings.task_queue) in report.memory_error


@pytest.mark.timeout(120)
async def test_schedule_apply_is_idempotent_and_a_scheduled_pass_runs(client, agents, settings, fresh_database):
    # A database of its own: a scheduled pass compacts every tenant's runs, largest first, so rows
    # that other tests left would decide what this one sees.
    own = settings.model_copy(
        update={
            "database_url": fresh_database,
            "compaction_schedule_id": f"compaction-{uuid.uuid4().hex[:8]}",
            "compaction_interval_seconds": 2,
            "compaction_threshold_tokens": 2000,
        }
    )
    engine = create_engine(fresh_database)
    store = RunStore(engine)
    run_id = await make_run(store, own, tool_heavy())
    handle = client.get_schedule_handle(own.compaction_schedule_id)
    try:
        async with build_worker(client, engine, own, agents):
            assert await apply_schedule(client, own) == "created"
            first = await handle.describe()
            assert await apply_schedule(client, own) == "unchanged"
            second = await handle.describe()
            assert second.schedule == first.schedule and second.info.last_updated_at == first.info.last_updated_at
            assert first.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
            assert [i.every.total_seconds() for i in first.schedule.spec.intervals] == [2.0]

            async def compacted() -> dict | None:
                async with engine.connect() as conn:
                    return await latest_compaction(conn, run_id)

            row = await eventually(compacted, timeout=60, interval=0.2, what="a scheduled compaction pass")
            assert row["method"] == "extractive"
            shown = await describe_schedule(client, own)
            assert shown.overlap == "SKIP" and shown.actions_taken >= 1
            changed = own.model_copy(update={"compaction_interval_seconds": 60})
            assert await apply_schedule(client, changed) == "updated"
            assert [i.every.total_seconds() for i in (await handle.describe()).schedule.spec.intervals] == [60.0]
    finally:
        await handle.delete()
        await engine.dispose()


async def test_cli_compaction_schedule_and_compact(store: RunStore, settings, memory_worker):
    # With a memory worker, as `waypoint dev` and `serve` have: without one each pass would wait
    # 10 s for it (memory_timeout_seconds) before saying the episodes were not stored.
    cfg = settings.model_copy(
        update={"compaction_schedule_id": f"cli-{uuid.uuid4().hex[:8]}", "compaction_interval_seconds": 3600}
    )
    missing = one_line_error(await waypoint_here(cfg, "compaction", "show"))
    assert "waypoint compaction apply" in missing
    try:
        applied = [await waypoint_here(cfg, "compaction", "apply", "--json") for _ in range(2)]
        assert [json.loads(d.out)["outcome"] for d in applied] == ["created", "unchanged"]
        shown = await waypoint_here(cfg, "compaction", "show")
        assert shown.code == 0 and "overlap SKIP" in shown.out and "3600 s" in shown.out, shown.err
        # The old name still works for one release, and says so in one line on stderr.
        old = await waypoint_here(cfg, "schedule", "show")
        assert old.code == 0 and old.out == shown.out
        assert old.err.strip().splitlines() == [
            "warning: `waypoint schedule` is deprecated and will be removed: use `waypoint compaction` "
            "(`waypoint cron` schedules agents)"
        ]
        assert json.loads((await waypoint_here(cfg, "schedule", "apply", "--json")).out)["outcome"] == "unchanged"
    finally:
        client = await Client.connect(settings.temporal_address)
        await client.get_schedule_handle(cfg.compaction_schedule_id).delete()

    run_id = await make_run(store, settings, tool_heavy())
    done = await waypoint(cfg, "compact", run_id)  # the one spawned process: a pass started from the CLI
    assert done.code == 0, done.err
    assert run_id in done.out and "compacted" in done.out and "extractive" in done.out
    again = json.loads((await waypoint_here(cfg, "compact", run_id, "--json")).out)["results"][0]
    first = json.loads((await waypoint_here(cfg, "compact", run_id, "--json")).out)["results"][0]
    assert again["created"] is False and again["compaction_id"] == first["compaction_id"] is not None
    assert one_line_error(await waypoint_here(cfg, "compact", "run-nope")).startswith("error: no run 'run-nope'")


@pytest.mark.timeout(180)
def test_waypoint_dev_applies_the_schedule(tmp_path: Path):
    state = tmp_path / "state"
    env = env_for(state, reserve_port(), reserve_port())
    proc = start_dev(env, state)
    try:
        shown = waypoint_in_process(env, "compaction", "show", "--json")  # the dev stack is the process here
        assert shown.code == 0, shown.err
        found = json.loads(shown.out)
        assert (found["id"], found["overlap"], found["every_seconds"]) == ("waypoint-compaction", "SKIP", [900.0])
    finally:
        out = stop_dev(proc, stack_pids(proc, state))
    assert "compaction schedule waypoint-compaction created" in out
