"""State compaction: pins, pruning, summaries (model and fallback), the row, idempotency, the
concurrent run, the workflow and its Schedule. Real Postgres, real Temporal, a real HTTP model."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity
from temporalio.client import Client, ScheduleOverlapPolicy, WorkflowHistory
from temporalio.worker import Replayer, Worker

from activities.checkpoints import CheckpointActivities, append_events
from activities.compaction import CompactionActivities, write_compaction
from waypoint import compaction as logic
from waypoint.agents import AgentRegistry
from waypoint.client import Waypoint
from waypoint.compaction_schedule import apply_schedule, compact_now, describe_schedule
from waypoint.compaction_types import (
    SAVE_EPISODES,
    CompactionInput,
    CompactionReport,
    CompactRunInput,
    memory_task_queue,
)
from waypoint.config import Settings
from waypoint.embedded import free_port
from waypoint.errors import NotFound
from waypoint.fake_openai import FakeOpenAI, Reply, Turn
from waypoint.store import integrity
from waypoint.store.compactions import latest_compaction
from waypoint.store.context import event_messages
from waypoint.store.schema import compactions, events
from waypoint.types import Budget, FinishRunInput, ModelTurn, StartRunInput, StepRecord, ToolCall, ToolResult
from workflows.compaction import CompactionWorkflow

HISTORIES = Path(__file__).parent / "histories" / "compaction"
RECORD = os.environ.get("WAYPOINT_RECORD_HISTORIES") == "1"
BIG = "row " + " ".join(f"value-{i}" for i in range(3000))  # ~ 6,000 tokens


# --- building runs with the real store code ------------------------------------------------------


def step(n: int, calls: list[tuple[str, dict, str]], *, content: str | None = None, decisions=None) -> tuple:
    """One step: the model calls `calls` (name, arguments, output)."""
    tool_calls = [
        ToolCall(id=f"c{n}_{i}", name=name, arguments=json.dumps(args)) for i, (name, args, _) in enumerate(calls)
    ]
    results = [ToolResult(call_id=f"c{n}_{i}", name=name, output=out) for i, (name, _, out) in enumerate(calls)]
    return ModelTurn(model="m", content=content, tool_calls=tool_calls), results, decisions or []


async def make_run(
    agents: AgentRegistry, engine: AsyncEngine, settings: Settings, steps: list[tuple], *, model="scripted"
):
    store = CheckpointActivities(engine, agents)
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await store.start_run(StartRunInput(run_id, settings.tenant, "calculator", "Find the vault code", model, Budget()))
    for n, (turn, results, decisions) in enumerate(steps, start=1):
        await store.record_step(StepRecord(run_id, settings.tenant, n, turn, results, decisions=decisions))
    return run_id, store


def tool_heavy(n_steps: int = 8) -> list[tuple]:
    steps = [
        step(1, [("search", {"q": "vault"}, "Vault 7 is in building B. The access code of vault 7 is 4821.")]),
        step(2, [("fetch", {"url": "http://x/list"}, "page one")], content="Looking at the list."),
        step(3, [("fetch", {"url": "http://x/list"}, "page one, updated")]),  # supersedes step 2's output
        step(4, [("search", {"q": "other"}, "Vault 7 is in building B. The access code of vault 7 is 4821.")]),
        step(5, [("dump", {}, BIG)]),  # oversize
        step(
            6,
            [("pin_decision", {"text": "We use vault 7, not vault 9: vault 9 is flooded."}, "pinned")],
        ),
    ]
    for n in range(7, n_steps + 1):
        steps.append(step(n, [("search", {"q": f"q{n}"}, f"result {n}: nothing new")]))
    return steps


async def event_digest(engine: AsyncEngine, run_id: str) -> list[tuple]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.seq, events.c.hash).where(events.c.run_id == run_id).order_by(events.c.seq)
        )
        return [tuple(r) for r in rows]


def activities_for(engine: AsyncEngine, settings: Settings, **overrides) -> CompactionActivities:
    return CompactionActivities(engine, settings.model_copy(update=overrides))


# --- pure rules ----------------------------------------------------------------------------------


def test_pins_and_pruning_rules():
    ev = [
        logic.LogEvent(
            2,
            1,
            "model_response",
            {
                "content": None,
                "tool_calls": [
                    {"id": "a", "name": "fetch", "arguments": '{"u": 1}'},
                    {"id": "b", "name": "pin_decision", "arguments": '{"text": "Ship on Friday."}'},
                ],
            },
        ),
        logic.LogEvent(3, 1, "tool_result", {"call_id": "a", "name": "fetch", "output": "v1"}),
        logic.LogEvent(4, 2, "decision", {"call_id": "c", "decision": "denied", "reason": "too risky"}),
        logic.LogEvent(
            5,
            2,
            "model_response",
            {
                "content": None,
                "tool_calls": [
                    {"id": "c", "name": "fetch", "arguments": '{ "u" : 1 }'},  # same arguments, other spacing
                    {"id": "d", "name": "grep", "arguments": '{"p": "x"}'},
                    {"id": "e", "name": "grep", "arguments": '{"p": "y"}'},
                    {"id": "f", "name": "cat", "arguments": "{}"},
                ],
            },
        ),
        logic.LogEvent(6, 2, "tool_result", {"call_id": "c", "name": "fetch", "output": "v2"}),
        logic.LogEvent(7, 2, "tool_result", {"call_id": "d", "name": "grep", "output": "same"}),
        logic.LogEvent(8, 2, "tool_result", {"call_id": "e", "name": "grep", "output": "same"}),
        logic.LogEvent(9, 2, "tool_result", {"call_id": "f", "name": "cat", "output": "word " * 400}),
    ]
    pins = logic.find_pins(ev)
    assert [(p.text, p.step, p.source) for p in pins] == [
        ("Ship on Friday.", 1, "pin_decision"),
        ('a human denied fetch({ "u" : 1 }): too risky', 2, "decision"),
    ]
    pruned = {p.seq: p for p in logic.plan_pruning(ev, oversize_tokens=100)}
    assert {s: p.reason for s, p in pruned.items()} == {3: "superseded", 8: "duplicate", 9: "oversize"}
    assert (
        pruned[3].replacement
        == "[output of fetch at step 1, event #3: superseded by the same call at step 2, event #6; it began: v1]"
    )
    assert pruned[8].replacement.startswith(
        "[output of grep at step 2, event #8: identical to the output at step 2, event #7"
    )
    assert pruned[9].replacement.startswith("[output of cat at step 2, event #9, 500 tokens; summary: word word")


def test_extractive_summary_keeps_facts_and_fits_its_budget():
    ev = [
        logic.LogEvent(
            1, 1, "tool_result", {"call_id": "x", "name": "search", "output": "The code of vault 7 is 4821."}
        )
    ]
    ev += [
        logic.LogEvent(i, i, "tool_result", {"call_id": f"x{i}", "name": "t", "output": "nothing " * 50})
        for i in range(2, 300)
    ]
    summary = logic.extractive_summary(ev, [], budget_tokens=400)
    assert "The code of vault 7 is 4821." in summary.text
    assert {"step": 1, "fact": "The code of vault 7 is 4821."} in summary.key_facts
    assert logic.text_tokens(summary.text) <= 450
    assert "earlier steps omitted" in summary.text


# --- compact_run ---------------------------------------------------------------------------------


@pytest.mark.postgres
async def test_fallback_compaction_pins_prunes_and_leaves_the_log_alone(engine, agents, settings):
    run_id, _ = await make_run(agents, engine, settings, tool_heavy())
    before = await event_digest(engine, run_id)
    acts = activities_for(engine, settings, compaction_oversize_tokens=1000)
    result = await acts.compact(CompactRunInput(run_id, settings.tenant))
    assert result.created and result.error is None and result.method == "extractive"
    assert result.tokens_after < result.tokens_before * 0.3
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
    assert row is not None and row["id"] == result.compaction_id
    assert row["fallback_reason"] == "the run's model 'scripted' is not an OpenAI-compatible model"
    # The newest two steps (7, 8) stay outside the range, verbatim.
    assert (row["first_step"], row["last_step"]) == (1, 6)
    assert [p["text"] for p in row["pinned"]] == ["We use vault 7, not vault 9: vault 9 is flooded."]
    reasons = {(p["tool"], p["step"], p["reason"]) for p in row["pruned"]}
    assert reasons == {("fetch", 2, "superseded"), ("search", 4, "duplicate"), ("dump", 5, "oversize")}
    assert "The access code of vault 7 is 4821." in row["summary"]
    # The log is untouched and still gives the whole transcript.
    assert await event_digest(engine, run_id) == before
    assert (await integrity.verify(engine, settings.tenant, run_id)).ok
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.seq, events.c.kind, events.c.payload)
            .where(events.c.run_id == run_id)
            .order_by(events.c.seq)
        )
        pairs = [(r.seq, m) for r in rows for m in event_messages(r.kind, r.payload)]
    assert any(BIG in str(m.get("content")) for _, m in pairs)
    view = logic.compacted_view(pairs, row)
    assert view[0]["role"] == "system" and view[1]["content"] == "Find the vault code"  # the head
    assert "vault 9 is flooded" in view[2]["content"] and view[3]["content"] == row["summary"]
    assert [m["content"] for m in view if m["role"] == "tool"] == ["result 7: nothing new", "result 8: nothing new"]
    assert not any(BIG in str(m.get("content")) for m in view)


@pytest.mark.postgres
async def test_decisions_survive_every_compaction(engine, agents, settings):
    steps = tool_heavy(6)
    steps[1] = replace_decisions(steps[1], [{"call_id": "c2_0", "decision": "approved", "reason": "read-only"}])
    run_id, store = await make_run(agents, engine, settings, steps)
    acts = activities_for(engine, settings, compaction_keep_steps=0)
    first = await acts.compact(CompactRunInput(run_id, settings.tenant))
    # More steps, a second (cumulative) compaction: the first one's pins are carried over.
    await store.record_step(
        StepRecord(run_id, settings.tenant, 7, *step(7, [("pin_decision", {"text": "Budget: 10 EUR."}, "ok")])[:2])
    )
    second = await acts.compact(CompactRunInput(run_id, settings.tenant))
    assert first.created and second.created and second.first_seq == first.first_seq and second.last_seq > first.last_seq
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
    assert [p["text"] for p in row["pinned"]] == [
        'a human approved fetch({"url": "http://x/list"}): read-only',
        "We use vault 7, not vault 9: vault 9 is flooded.",
        "Budget: 10 EUR.",
    ]
    assert "The access code of vault 7 is 4821." in row["summary"]  # carried over as an earlier fact


def replace_decisions(s: tuple, decisions: list[dict]) -> tuple:
    return s[0], s[1], decisions


@pytest.mark.postgres
async def test_model_summary_with_structured_output(engine, agents, settings, fake_openai: FakeOpenAI):
    run_id, _ = await make_run(agents, engine, settings, tool_heavy(), model="openai:fake-model")
    answer = {
        "summary": "Searched for vault 7 and found its building and code.",
        "decisions": [{"step": 6, "text": "Use vault 7."}],
        "open_threads": ["open vault 7"],
        "key_facts": [{"step": 1, "fact": "Vault 7's code is 4821."}],
    }
    fake_openai.answer(Turn(content=json.dumps(answer)))
    result = await activities_for(engine, settings).compact(CompactRunInput(run_id, settings.tenant))
    assert result.created and result.method == "model"
    body = fake_openai.seen[0].body
    assert body["model"] == "fake-model" and body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    prompt = body["messages"][1]["content"]
    assert "[step 1] search -> Vault 7 is in building B." in prompt
    assert "superseded by the same call at step 3" in prompt and BIG not in prompt
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
    assert row["model"] == "openai:fake-model" and row["fallback_reason"] is None
    assert "Searched for vault 7" in row["summary"] and "(step 1) Vault 7's code is 4821." in row["summary"]
    assert row["structured"]["open_threads"] == ["open vault 7"]
    assert [p["text"] for p in row["pinned"]] == ["We use vault 7, not vault 9: vault 9 is flooded."]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "reply",
    [Turn(content="this is not JSON"), Turn(content=json.dumps({"summary": "x"})), Reply(status=503, body="{}")],
    ids=["invalid-json", "schema-mismatch", "http-503"],
)
async def test_a_failing_model_falls_back_to_the_extractive_summary(engine, agents, settings, fake_openai, reply):
    run_id, _ = await make_run(agents, engine, settings, tool_heavy(), model="openai:fake-model")
    fake_openai.answer(reply)
    result = await activities_for(engine, settings).compact(CompactRunInput(run_id, settings.tenant))
    assert result.created and result.method == "extractive"
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
    assert row["fallback_reason"].startswith("the model failed")
    assert "The access code of vault 7 is 4821." in row["summary"]


@pytest.mark.postgres
async def test_the_same_range_twice_does_nothing_new(engine, agents, settings):
    run_id, _ = await make_run(agents, engine, settings, tool_heavy())
    acts = activities_for(engine, settings)
    first = await acts.compact(CompactRunInput(run_id, settings.tenant))
    again = await acts.compact(CompactRunInput(run_id, settings.tenant))
    assert first.created and not again.created and again.error is None
    # The same row written twice (a retried attempt whose first one committed): ON CONFLICT DO NOTHING.
    async with engine.begin() as conn:
        row = await latest_compaction(conn, run_id)
        fields = {k: v for k, v in row.items() if k not in ("id", "created_at")}
        assert await write_compaction(conn, fields, None) == (row["id"], False)
    async with engine.connect() as conn:
        assert (
            await conn.scalar(select(func.count()).select_from(compactions).where(compactions.c.run_id == run_id)) == 1
        )


@pytest.mark.postgres
async def test_a_crash_mid_write_leaves_no_row(engine, agents, settings, database_url):
    run_id, _ = await make_run(agents, engine, settings, tool_heavy())
    acts = activities_for(engine, settings)
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is None
    # Kill the writing backend between the insert and the commit, as a crash would.
    async with engine.connect() as killer, engine.connect() as writer:
        await writer.begin()
        pid = await writer.scalar(text("SELECT pg_backend_pid()"))
        row = {
            "run_id": run_id,
            "tenant_id": settings.tenant,
            "first_seq": 2,
            "last_seq": 5,
            "first_step": 1,
            "last_step": 2,
            "tokens_before": 10,
            "tokens_after": 1,
            "summary": "s",
            "structured": {},
            "pinned": [],
            "pruned": [],
            "method": "extractive",
            "model": None,
            "fallback_reason": None,
        }
        await write_compaction(writer, row, None)
        await killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DBAPIError):
            await writer.commit()
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is None
    assert (await acts.compact(CompactRunInput(run_id, settings.tenant))).created


@pytest.mark.postgres
async def test_a_turn_that_lands_during_compaction_stays_outside(engine, agents, settings, fake_openai: FakeOpenAI):
    run_id, store = await make_run(agents, engine, settings, tool_heavy(), model="openai:fake-model")
    answer = {"summary": "ok", "decisions": [], "open_threads": [], "key_facts": []}
    fake_openai.answer(Reply(status=200, delay=1.5, body=_completion(json.dumps(answer))))
    acts = activities_for(engine, settings)
    task = asyncio.create_task(acts.compact(CompactRunInput(run_id, settings.tenant)))
    while not fake_openai.seen:  # the compaction has read its range and waits for the model
        await asyncio.sleep(0.02)
    late = await store.record_step(
        StepRecord(run_id, settings.tenant, 9, *step(9, [("search", {"q": "late"}, "LATE TURN")])[:2])
    )
    result = await task
    assert result.created and result.last_seq < late
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
        rows = await conn.execute(
            select(events.c.seq, events.c.kind, events.c.payload)
            .where(events.c.run_id == run_id)
            .order_by(events.c.seq)
        )
        pairs = [(r.seq, m) for r in rows for m in event_messages(r.kind, r.payload)]
    view = logic.compacted_view(pairs, row)
    assert view[-1]["content"] == "LATE TURN"
    # Nothing in the range arrived after the compaction read it: its size is still what it counted.
    in_range = [m for seq, m in pairs if row["first_seq"] <= seq <= row["last_seq"]]
    assert logic.messages_tokens(in_range) == row["tokens_before"]


def _completion(content: str) -> dict:
    from waypoint.fake_openai import completion

    return completion(Turn(content=content), "fake-model", 1)


@pytest.mark.postgres
async def test_compacting_a_live_run_loses_no_turn(client, engine, settings, worker):
    """A real run (the looper agent, 50 steps) compacted again and again while it runs."""
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("loop", agent="looper")
    acts = activities_for(engine, settings, compaction_keep_steps=1)
    results = []
    while True:
        try:
            status = (await wp.run(run_id))["status"]
        except NotFound:  # its row is not written yet
            await asyncio.sleep(0.02)
            continue
        if status != "running":
            break
        results.append(await acts.compact(CompactRunInput(run_id, settings.tenant)))
        await asyncio.sleep(0.05)
    results.append(await acts.compact(CompactRunInput(run_id, settings.tenant)))
    created = [r for r in results if r.created]
    assert len(created) >= 2
    assert [r.last_seq for r in created] == sorted(r.last_seq for r in created)
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
        rows = await conn.execute(
            select(events.c.seq, events.c.kind, events.c.payload)
            .where(events.c.run_id == run_id)
            .order_by(events.c.seq)
        )
        pairs = [(r.seq, m) for r in rows for m in event_messages(r.kind, r.payload)]
    in_range = [m for seq, m in pairs if row["first_seq"] <= seq <= row["last_seq"]]
    assert logic.messages_tokens(in_range) == row["tokens_before"]  # every turn of the range was counted
    view = logic.compacted_view(pairs, row)
    assert view[-1] == pairs[-1][1]  # the newest turn is in working memory


@pytest.mark.postgres
async def test_deleting_a_run_removes_its_compactions(engine, agents, settings):
    run_id, store = await make_run(agents, engine, settings, tool_heavy())
    await activities_for(engine, settings).compact(CompactRunInput(run_id, settings.tenant))
    await store.finish_run(FinishRunInput(run_id, settings.tenant, "completed", 8))
    with pytest.raises(Exception, match="append-only"):
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM compactions WHERE run_id = :r"), {"r": run_id})
    await integrity.delete_run(engine, settings.tenant, run_id)
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is None


# --- the workflow --------------------------------------------------------------------------------


def memory_worker(client: Client, settings: Settings, saved: list) -> Worker:
    @activity.defn(name=SAVE_EPISODES)
    async def save_episodes(episodes: list[dict]) -> int:
        saved.extend(episodes)
        return len(episodes)

    return Worker(client, task_queue=memory_task_queue(settings.task_queue), activities=[save_episodes])


@pytest.mark.postgres
async def test_a_pass_compacts_big_runs_reports_a_failing_one_and_saves_summaries(
    client, engine, agents, settings, worker
):
    big, _ = await make_run(agents, engine, settings, tool_heavy())
    small, _ = await make_run(agents, engine, settings, tool_heavy()[:1])
    broken, _ = await make_run(agents, engine, settings, tool_heavy())
    async with engine.begin() as conn:  # a model answer the compactor cannot read: its pass fails
        await append_events(conn, broken, [(5, "model_response", {"content": None, "tool_calls": [{"id": "x"}]})])
    saved: list[dict] = []
    async with memory_worker(client, settings, saved):
        report = await compact_now(client, settings.model_copy(update={"compaction_threshold_tokens": 2000}))
    by_run = {r.run_id: r for r in report.results}
    assert report.selected == 2 and set(by_run) == {big, broken}  # the small run is under the threshold
    assert by_run[big].created and by_run[big].error is None
    assert by_run[broken].error and "KeyError" in by_run[broken].error
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


@pytest.mark.postgres
async def test_a_missing_memory_worker_is_reported_not_fatal(client, engine, agents, settings, worker):
    run_id, _ = await make_run(agents, engine, settings, tool_heavy())
    workflow_id = f"compaction-{uuid.uuid4().hex[:8]}"
    report = await client.execute_workflow(
        CompactionWorkflow.run,
        CompactionInput(tenant_id=settings.tenant, run_id=run_id, memory_timeout_seconds=1),
        id=workflow_id,
        task_queue=settings.task_queue,
        result_type=CompactionReport,
    )
    assert report.results[0].created and report.episodes_saved == 0
    assert (
        "summary episodes not saved" in report.memory_error
        and memory_task_queue(settings.task_queue) in report.memory_error
    )
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    await Replayer(workflows=[CompactionWorkflow]).replay_workflow(history)
    if RECORD:  # WAYPOINT_RECORD_HISTORIES=1 pytest tests/test_compaction.py -k missing_memory
        HISTORIES.mkdir(exist_ok=True)
        (HISTORIES / "compaction_pass.json").write_text(history.to_json())


async def test_recorded_compaction_history_replays():
    path = HISTORIES / "compaction_pass.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    result = await Replayer(workflows=[CompactionWorkflow]).replay_workflow(history)
    assert result.replay_failure is None


# --- the Schedule --------------------------------------------------------------------------------


@pytest.mark.postgres
async def test_schedule_apply_is_idempotent_and_a_scheduled_pass_runs(client, engine, agents, settings, worker):
    cfg = settings.model_copy(
        update={
            "compaction_schedule_id": f"compaction-{uuid.uuid4().hex[:8]}",
            "compaction_interval_seconds": 2,
            "compaction_threshold_tokens": 2000,
        }
    )
    run_id, _ = await make_run(agents, engine, settings, tool_heavy())
    handle = client.get_schedule_handle(cfg.compaction_schedule_id)
    try:
        assert await apply_schedule(client, cfg) == "created"
        first = await handle.describe()
        assert await apply_schedule(client, cfg) == "unchanged"
        second = await handle.describe()
        assert second.schedule == first.schedule and second.info.last_updated_at == first.info.last_updated_at
        assert first.schedule.policy.overlap == ScheduleOverlapPolicy.SKIP
        assert [i.every.total_seconds() for i in first.schedule.spec.intervals] == [2.0]
        for _ in range(200):  # a pass fires within ~2 s; allow for a busy machine
            async with engine.connect() as conn:
                if await latest_compaction(conn, run_id) is not None:
                    break
            await asyncio.sleep(0.1)
        async with engine.connect() as conn:
            assert (await latest_compaction(conn, run_id))["method"] == "extractive"
        shown = await describe_schedule(client, cfg)
        assert shown["overlap"] == "SKIP" and shown["actions_taken"] >= 1
        changed = cfg.model_copy(update={"compaction_interval_seconds": 60})
        assert await apply_schedule(client, changed) == "updated"
        assert [i.every.total_seconds() for i in (await handle.describe()).schedule.spec.intervals] == [60.0]
    finally:
        await handle.delete()


# --- the CLI -------------------------------------------------------------------------------------


@pytest.mark.postgres
async def test_cli_schedule_and_compact(engine, agents, settings, worker):
    from tests.test_cli import waypoint

    cfg = settings.model_copy(
        update={"compaction_schedule_id": f"cli-{uuid.uuid4().hex[:8]}", "compaction_interval_seconds": 3600}
    )
    missing = await waypoint(cfg, "schedule", "show")
    assert missing.code == 1 and missing.err.strip().count("\n") == 0
    assert "waypoint schedule apply" in missing.err and "Traceback" not in missing.err
    try:
        applied = [await waypoint(cfg, "schedule", "apply", "--json") for _ in range(2)]
        assert [json.loads(d.out)["outcome"] for d in applied] == ["created", "unchanged"]
        shown = await waypoint(cfg, "schedule", "show")
        assert shown.code == 0 and "overlap SKIP" in shown.out and "3600 s" in shown.out, shown.err
    finally:
        client = await Client.connect(settings.temporal_address)
        await client.get_schedule_handle(cfg.compaction_schedule_id).delete()

    run_id, _ = await make_run(agents, engine, settings, tool_heavy())
    done = await waypoint(cfg, "compact", run_id)
    assert done.code == 0, done.err
    assert run_id in done.out and "compacted" in done.out and "extractive" in done.out
    again = await waypoint(cfg, "compact", run_id, "--json")
    assert json.loads(again.out)["results"][0]["created"] is False
    unknown = await waypoint(cfg, "compact", "run-nope")
    assert unknown.code == 1 and unknown.err.startswith("error: no run 'run-nope'")


def test_waypoint_dev_applies_the_schedule(tmp_path: Path):
    from tests.test_dev_stack import cli, env_for, stack_pids, start_dev, stop_dev

    state = tmp_path / "state"
    env = env_for(state, free_port(), free_port())
    proc = start_dev(env, state)
    try:
        shown = cli(env, "schedule", "show", "--json")
        assert shown.returncode == 0, shown.stderr
        found = json.loads(shown.stdout)
        assert (found["id"], found["overlap"], found["every_seconds"]) == ("waypoint-compaction", "SKIP", [900.0])
    finally:
        out = stop_dev(proc, stack_pids(proc, state))
    assert "compaction schedule waypoint-compaction created" in out
