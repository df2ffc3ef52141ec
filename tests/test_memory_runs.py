"""Episodic memory inside runs: memory tools, recall across runs, tenant scoping, forget, idempotent episodes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.testing import ActivityEnvironment

from waypoint.activities.memory import MemoryActivities
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.memory import RecallScope
from waypoint.memory.steps import recall_search
from waypoint.names import child_run_id
from waypoint.store import RunStore
from waypoint.store.schema import checkpoints
from waypoint.store.working import WorkingReads
from waypoint.types import MemoryStepInput

pytestmark = pytest.mark.postgres


async def test_memory_tools_in_a_scripted_run(memory_worker, engine: AsyncEngine):
    wp, store = memory_worker
    run_id = await wp.start_run("remember things", agent="rememberer")
    result = await wp.result(run_id)
    assert result.status == "completed", result.error
    answer = json.loads(result.output)
    assert answer["pinned"] is True  # the pinned decision was in the context of step 4
    assert "4412" in answer["found"]  # memory_search found what memory_save stored
    async with engine.connect() as conn:
        state = await conn.scalar(
            select(checkpoints.c.state).where(checkpoints.c.run_id == run_id, checkpoints.c.step == 4)
        )
    assert [pin[2] for pin in state["pinned"]] == [2]
    kinds = sorted(e.kind for e in await store.list_run(wp.settings.tenant, run_id))
    assert kinds.count("fact") == 1 and kinds.count("decision") == 1 and kinds.count("step") >= 2


async def test_a_new_run_recalls_what_an_earlier_run_learned(memory_worker, settings: Settings):
    wp, store = memory_worker
    first = await wp.result(await wp.start_run("What is the launch code?", agent="scout"))
    assert (first.status, first.output, first.steps) == ("completed", "looked it up", 2)

    second = await wp.result(await wp.start_run("What is the launch code?", agent="scout"))
    assert (second.output, second.steps) == ("I remember: ZEBRA-7", 1)

    # another tenant shares the workers and the store, and recalls nothing of it
    other_id = await wp.start_run("What is the launch code?", agent="scout", tenant_id="tenant-b")
    other = await wp.result(other_id, tenant_id="tenant-b")
    assert (other.output, other.steps) == ("looked it up", 2)
    assert not await wp.memory_search("launch code ZEBRA", tenant_id="tenant-c")


async def test_memory_show_and_forget_are_tenant_scoped(memory_worker):
    wp, store = memory_worker
    run_id = await wp.start_run("What is the launch code?", agent="scout")
    await wp.result(run_id)
    shown = await wp.memory_show(run_id)
    assert any("ZEBRA-7" in m.text for m in shown)
    hits = await wp.memory_search("launch code", run_id=run_id)
    assert hits and hits[0].run_id == run_id

    with pytest.raises(NotFound):
        await wp.memory_forget(run_id, tenant_id="someone-else")
    assert await wp.memory_forget(run_id) == len(shown)
    assert await wp.memory_show(run_id) == []
    assert await store.count(wp.settings.tenant) == 0


async def test_a_retried_memory_step_stores_each_episode_once(memory_worker, engine: AsyncEngine):
    wp, store = memory_worker
    run_id = await wp.start_run("What is the launch code?", agent="scout")
    await wp.result(run_id)
    tenant = wp.settings.tenant
    before = await store.count(tenant)
    acts = MemoryActivities(RunStore(engine), store)
    inp = MemoryStepInput(run_id=run_id, tenant_id=tenant, agent="scout", remember_step=1)
    for _ in range(2):  # two attempts of the same activity
        await ActivityEnvironment().run(acts.memory_step, inp)
    assert await store.count(tenant) == before


async def test_show_gives_back_exactly_what_the_model_received(memory_worker, fake_openai):
    """The recalled memories injected into a call are recorded (their sources, their text's hash and
    the message they became), so `show` rebuilds the request byte for byte, and `diff` covers it."""
    from tests.agents import remote_scout  # noqa: F401 - registered in the workers' registry
    from waypoint.testing.fake_openai import Turn

    wp, _ = memory_worker
    fake_openai.answer(Turn(tool_calls=[("lookup", {"topic": "launch"})]), Turn(content="looked it up"))
    first = await wp.start_run("What is the launch code?", agent="remote-scout")
    assert (await wp.result(first)).status == "completed"
    fake_openai.answer(Turn(content="I remember: ZEBRA-7"))
    second = await wp.start_run("What is the launch code?", agent="remote-scout")
    assert (await wp.result(second)).status == "completed"
    sent = fake_openai.seen[-1].body["messages"]
    assert any("Recalled from long-term memory" in (m.get("content") or "") for m in sent)

    state = await wp.state(second, 0)
    assert state.messages == sent  # byte for byte: what the model call of step 1 received
    assert state.request is not None and state.request["matches"]
    assert [(r["run_id"], r["step"]) for r in state.request["recalled"]][0] == (first, 1)
    assert state.request["recalled_text"] == next(m["content"] for m in sent if "Recalled" in (m["content"] or ""))
    change = await wp.diff(second, 0, 1)
    assert any("Recalled from long-term memory" in (m.get("content") or "") for m in change.dropped)

    # The recalled message stays out of Temporal's history: the model activity's result names it
    # by hash, and Postgres keeps the text once.
    history = await wp.client.get_workflow_handle(second).fetch_history()
    results = [
        e.activity_task_completed_event_attributes.result.payloads[0].data.decode()
        for e in history.events
        if e.HasField("activity_task_completed_event_attributes")
    ]
    assert results and not any("Recalled from long-term memory" in r for r in results)
    assert any(state.request["recalled_sha256"] in r for r in results)


async def test_a_rerun_recalls_memory_as_the_original_had_it(memory_worker):
    """A rerun's first model call recalls neither its original's episodes (its final answer among them)
    nor what other runs stored since the original started; `now` adds the latter, `all` both."""
    wp, _ = memory_worker
    original = await wp.start_run("What is the launch code?", agent="scout")
    assert (await wp.result(original)).steps == 2  # looked the code up: nothing to recall yet
    later = await wp.start_run("What is the launch code?", agent="scout")
    assert (await wp.result(later)).output == "I remember: ZEBRA-7"  # recalled the original's lookup

    async def rerun(**options: str) -> tuple[str | None, set[str]]:
        new_id = await wp.rerun(original, **options)
        result = await wp.result(new_id)
        request = (await wp.state(new_id, 0)).request  # what its first model call received
        assert request is not None
        return result.output, {r["run_id"] for r in request["recalled"]}

    # memory as it was when the original started: empty, so the rerun looks the code up again
    assert await rerun() == ("looked it up", set())
    output, recalled = await rerun(memory="now")  # the later run's episodes (and the rerun's above)
    assert output == "I remember: ZEBRA-7" and later in recalled and original not in recalled
    output, recalled = await rerun(memory="all")
    assert output == "I remember: ZEBRA-7" and original in recalled


async def test_a_tree_of_runs_recalls_across_its_runs(memory_worker):
    """A child recalls what its parent saved, and the parent, at its next step, what the child saved:
    runs of other agents, seen because they are of one tree."""
    wp, store = memory_worker
    lead = await wp.start_run("Ask tree_child for the river code.", agent="tree_lead")
    result = await wp.result(lead)
    assert (result.status, result.output) == ("completed", "the river code is OTTER-9"), result.error
    child = child_run_id(lead, 2, 0)
    assert (await wp.result(child)).output == "the lead's word is PELICAN-42"

    def recalled(request: dict[str, Any] | None) -> list[tuple[str, int, str]]:
        assert request is not None
        return [(r["run_id"], r["step"], r["kind"]) for r in request["recalled"]]

    # the child's first model call recalled the parent's fact; the parent's third call the child's
    assert (lead, 1, "fact") in recalled((await wp.state(child, 0)).request)
    assert (child, 1, "fact") in recalled((await wp.state(lead, 2)).request)
    tenant = wp.settings.tenant
    assert {e.root_run_id for e in await store.list_run(tenant, child)} == {lead}
    # another tree's run of the lead's agent recalls the lead's episodes (its agent's), not the child's
    hits = await recall_search(store, tenant, "the river code", 20, "tree_lead", RecallScope(tree="another-lead"))
    assert {h.episode.run_id for h in hits} == {lead}


def test_what_a_run_of_a_lineage_recalls():
    from waypoint.memory.steps import recall_scope
    from waypoint.store.working import ForkLink

    root = ForkLink("root", None, None, None)
    assert recall_scope([root]) == RecallScope(own_past=(("root", None),))
    # a run of a tree of sub-agent runs recalls its tree too, whatever its lineage
    child = ForkLink("root.2.0", None, None, None, root_run_id="root")
    assert recall_scope([child]) == RecallScope(own_past=(("root.2.0", None),), tree="root")
    assert recall_scope([ForkLink("rerun", 3, "then", 103.0, "rerun"), child]).tree == "rerun"  # its own tree
    # a rerun from step 3: memory as of the original's checkpoint 3, nothing of the original after it
    rerun = ForkLink("rerun", 3, "then", 103.0)
    assert recall_scope([rerun, root]) == RecallScope(
        own_past=(("rerun", None), ("root", 3)), as_of=103.0, exclude_runs=("root",)
    )
    # its own rerun from step 5 recalls as of the same time; one from step 2 (a step the first rerun
    # inherited) keeps the root's past up to step 2 only
    again = ForkLink("again", 5, "then", 205.0)
    assert recall_scope([again, rerun, root]).as_of == 103.0
    early = recall_scope([ForkLink("early", 2, "then", 102.0), rerun, root])
    assert early.own_past == (("early", None), ("rerun", 2), ("root", 2)) and early.as_of == 103.0
    # `now`: memory as it is, still without the lineage's other episodes; `all`: everything
    now = recall_scope([ForkLink("now", 5, "now", 205.0), rerun, root])
    assert (now.as_of, now.exclude_runs) == (None, ("rerun", "root"))
    assert recall_scope([ForkLink("all", 5, "all", 205.0), rerun, root]).exclude_runs == ()
    # a thread's turns (`now`) and runs from before the setting (None) pass no time on to a rerun
    turn = ForkLink("turn-2", 4, "now", 104.0)
    assert recall_scope([ForkLink("r", 6, "then", 306.0), turn, root]).as_of == 306.0
    assert recall_scope([ForkLink("r", 6, None, 306.0), ForkLink("old", 4, None, 104.0), root]).as_of == 306.0


async def test_a_held_recall_is_kept_in_postgres_once(memory_worker, monkeypatch: pytest.MonkeyPatch):
    """The calls that hold the previous call's recalled episodes write nothing: the message's row is
    there already (the call read its text from it), and their records still name it."""
    kept: list[str] = []
    keep = WorkingReads.keep_recalled_text

    async def counting(self: WorkingReads, tenant_id: str, run_id: str, text: str) -> str:
        kept.append(run_id)
        return await keep(self, tenant_id, run_id, text)

    monkeypatch.setattr(WorkingReads, "keep_recalled_text", counting)
    wp, _ = memory_worker
    first = await wp.start_run("add things", agent="calculator")
    assert (await wp.result(first)).status == "completed"
    second = await wp.start_run("add things", agent="calculator")
    assert (await wp.result(second)).steps == 3
    requests = [(await wp.state(second, step)).request for step in range(3)]
    assert all(r is not None and r["recalled"] and r["matches"] for r in requests)  # every call got them
    recalls = [r["recalled_step"] for r in requests if r is not None]
    held = [step for step, recalled in enumerate(recalls, start=1) if recalled < step]
    assert held, recalls  # some call held an earlier call's episodes
    assert kept.count(second) == len(set(recalls))  # each recalled message written once, by its recall
