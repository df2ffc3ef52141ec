"""One run's compaction against real Postgres and a real HTTP model: the row, pins, pruning, the
summary (model and fallback), idempotency, a crash mid-write, turns that land meanwhile, and the
working memory the next model call reads afterwards (the store's view, the one production uses)."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.helpers import BIG, make_run, next_call_view, range_messages, step, tool_heavy
from waypoint.activities.compaction import CompactionActivities
from waypoint.compaction_types import CompactRunInput
from waypoint.config import Settings
from waypoint.names import DecisionKind, RunStatus
from waypoint.store import RunStore
from waypoint.store.compactions import insert_compaction, latest_compaction
from waypoint.store.schema import compactions, events
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn, completion
from waypoint.tokens import messages_tokens
from waypoint.types import StepDecision, StepRecord

pytestmark = pytest.mark.postgres


async def event_digest(engine: AsyncEngine, run_id: str) -> list[tuple]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.seq, events.c.hash).where(events.c.run_id == run_id).order_by(events.c.seq)
        )
        return [tuple(r) for r in rows]


def compactor(store: RunStore, settings: Settings, **overrides) -> CompactionActivities:
    return CompactionActivities(store, settings.model_copy(update=overrides))


async def newest(engine: AsyncEngine, run_id: str) -> dict:
    async with engine.connect() as conn:
        row = await latest_compaction(conn, run_id)
    assert row is not None
    return row


async def test_fallback_compaction_pins_prunes_and_leaves_the_log_alone(engine, store: RunStore, settings):
    run_id = await make_run(store, settings, tool_heavy())
    before = await event_digest(engine, run_id)
    result = await compactor(store, settings, compaction_oversize_tokens=1000).compact(
        CompactRunInput(run_id, settings.tenant)
    )
    assert result.created and result.error is None and result.method == "extractive"
    assert result.tokens_after < result.tokens_before * 0.3
    row = await newest(engine, run_id)
    assert row["id"] == result.compaction_id
    assert row["fallback_reason"] == "the run's model 'scripted' is not an OpenAI-compatible model"
    # The newest two steps (7, 8) stay outside the range, verbatim.
    assert (row["first_step"], row["last_step"]) == (1, 6)
    assert [p["text"] for p in row["pinned"]] == ["We use vault 7, not vault 9: vault 9 is flooded."]
    reasons = {(p["tool"], p["step"], p["reason"]) for p in row["pruned"]}
    assert reasons == {("fetch", 2, "superseded"), ("search", 4, "duplicate"), ("dump", 5, "oversize")}
    assert "The access code of vault 7 is 4821." in row["summary"]
    # The log is untouched and still gives the whole transcript.
    assert await event_digest(engine, run_id) == before
    assert (await store.integrity.verify(settings.tenant, run_id)).ok
    assert any(BIG in str(m.get("content")) for m in await range_messages(engine, run_id, 1, 10_000))
    # The next model call reads: the head, the pinned decision, the summary, then steps 7 and 8 verbatim.
    view = await next_call_view(store, settings, run_id)
    assert view[0]["role"] == "system" and view[1]["content"] == "Find the vault code"
    assert "Decisions pinned" in view[2]["content"] and view[3]["content"] == row["summary"]
    assert [m["content"] for m in view if m["role"] == "tool"] == ["result 7: nothing new", "result 8: nothing new"]
    assert not any(BIG in str(m.get("content")) for m in view)


async def test_decisions_survive_every_compaction(engine, store: RunStore, settings):
    steps = tool_heavy(6)
    turn, results, _ = steps[1]
    steps[1] = (turn, results, [StepDecision("c2_0", DecisionKind.APPROVED, "read-only")])
    run_id = await make_run(store, settings, steps)
    acts = compactor(store, settings, compaction_keep_steps=0)
    first = await acts.compact(CompactRunInput(run_id, settings.tenant))
    # More steps, a second (cumulative) compaction: the first one's pins are carried over.
    turn, results, _ = step(7, [("pin_decision", {"text": "Budget: 10 EUR."}, "ok")])
    await store.steps.record_step(StepRecord(run_id, settings.tenant, 7, turn, results))
    second = await acts.compact(CompactRunInput(run_id, settings.tenant))
    assert first.created and second.created and second.first_seq == first.first_seq and second.last_seq > first.last_seq
    row = await newest(engine, run_id)
    assert [p["text"] for p in row["pinned"]] == [
        'a human approved fetch({"url": "http://x/list"}): read-only',
        "We use vault 7, not vault 9: vault 9 is flooded.",
        "Budget: 10 EUR.",
    ]
    assert "The access code of vault 7 is 4821." in row["summary"]  # carried over as an earlier fact


async def test_model_summary_with_structured_output(engine, store: RunStore, settings, fake_openai: FakeOpenAI):
    run_id = await make_run(store, settings, tool_heavy(), model="openai:fake-model")
    answer = {
        "summary": "Searched for vault 7 and found its building and code.",
        "decisions": [{"step": 6, "text": "Use vault 7."}],
        "open_threads": ["open vault 7"],
        "key_facts": [{"step": 1, "fact": "Vault 7's code is 4821."}],
    }
    fake_openai.answer(Turn(content=json.dumps(answer)))
    result = await compactor(store, settings).compact(CompactRunInput(run_id, settings.tenant))
    assert result.created and result.method == "model"
    body = fake_openai.seen[0].body
    assert body["model"] == "fake-model" and body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["strict"] is True
    prompt = body["messages"][1]["content"]
    assert "[step 1] search -> Vault 7 is in building B." in prompt
    assert "superseded by the same call at step 3" in prompt and BIG not in prompt
    row = await newest(engine, run_id)
    assert row["model"] == "openai:fake-model" and row["fallback_reason"] is None
    assert "Searched for vault 7" in row["summary"] and "(step 1) Vault 7's code is 4821." in row["summary"]
    assert row["structured"]["open_threads"] == ["open vault 7"]
    assert [p["text"] for p in row["pinned"]] == ["We use vault 7, not vault 9: vault 9 is flooded."]


@pytest.mark.parametrize(
    "reply",
    [
        Turn(content="this is not JSON"),
        Turn(content=json.dumps({"summary": "x"})),
        Reply(status=503, body="{}"),
        Reply(status=200, body="<html>proxy error</html>"),
    ],
    ids=["invalid-json", "schema-mismatch", "http-503", "html-page"],
)
async def test_a_failing_model_falls_back_to_the_extractive_summary(engine, store, settings, fake_openai, reply):
    run_id = await make_run(store, settings, tool_heavy(), model="openai:fake-model")
    fake_openai.answer(reply)
    result = await compactor(store, settings).compact(CompactRunInput(run_id, settings.tenant))
    assert result.created and result.method == "extractive"
    row = await newest(engine, run_id)
    assert row["fallback_reason"].startswith("the model failed")
    assert "The access code of vault 7 is 4821." in row["summary"]


async def test_the_same_range_twice_does_nothing_new(engine, store: RunStore, settings):
    run_id = await make_run(store, settings, tool_heavy())
    acts = compactor(store, settings)
    first = await acts.compact(CompactRunInput(run_id, settings.tenant))
    again = await acts.compact(CompactRunInput(run_id, settings.tenant))
    assert first.created and not again.created and again.error is None
    assert again.compaction_id == first.compaction_id  # the existing compaction, not zeros
    # The same row written twice (a retried attempt whose first one committed): ON CONFLICT DO NOTHING.
    row = await newest(engine, run_id)
    fields = {k: v for k, v in row.items() if k not in ("id", "created_at")}
    assert await store.compaction.write_compaction(fields, None) == (row["id"], False)
    async with engine.connect() as conn:
        count = select(func.count()).select_from(compactions).where(compactions.c.run_id == run_id)
        assert await conn.scalar(count) == 1


async def test_a_crash_mid_write_leaves_no_row(engine, store: RunStore, settings):
    run_id = await make_run(store, settings, tool_heavy())
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
    # Kill the writing backend between the insert and the commit, as a crash would.
    async with engine.connect() as killer, engine.connect() as writer:
        await writer.begin()
        pid = await writer.scalar(text("SELECT pg_backend_pid()"))
        await insert_compaction(writer, row, None)
        await killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DBAPIError):
            await writer.commit()
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is None
    assert (await compactor(store, settings).compact(CompactRunInput(run_id, settings.tenant))).created


async def test_a_turn_that_lands_during_compaction_stays_outside(engine, store, settings, fake_openai: FakeOpenAI):
    run_id = await make_run(store, settings, tool_heavy(), model="openai:fake-model")
    answer = {"summary": "ok", "decisions": [], "open_threads": [], "key_facts": []}
    fake_openai.answer(Reply(status=200, delay=1.5, body=completion(Turn(content=json.dumps(answer)), "m", 1)))
    task = asyncio.create_task(compactor(store, settings).compact(CompactRunInput(run_id, settings.tenant)))
    while not fake_openai.seen:  # the compaction has read its range and waits for the model
        await asyncio.sleep(0.02)
    turn, results, _ = step(9, [("search", {"q": "late"}, "LATE TURN")])
    late = await store.steps.record_step(StepRecord(run_id, settings.tenant, 9, turn, results))
    result = await task
    assert result.created and result.last_seq < late
    row = await newest(engine, run_id)
    assert (await next_call_view(store, settings, run_id))[-1]["content"] == "LATE TURN"
    # Nothing in the range arrived after the compaction read it: its size is still what it counted.
    in_range = await range_messages(engine, run_id, row["first_seq"], row["last_seq"])
    assert messages_tokens(in_range) == row["tokens_before"]


async def test_deleting_a_run_removes_its_compactions(engine, store: RunStore, settings):
    run_id = await make_run(store, settings, tool_heavy())
    await compactor(store, settings).compact(CompactRunInput(run_id, settings.tenant))
    await store.log.finish_run(settings.tenant, run_id, RunStatus.COMPLETED, "done", None)
    with pytest.raises(DBAPIError, match="append-only"):
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM compactions WHERE run_id = :r"), {"r": run_id})
    await store.integrity.delete_run(settings.tenant, run_id)
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is None
