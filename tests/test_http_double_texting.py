"""Double-texting and delayed runs on Agent Protocol threads, spoken to by `langgraph-sdk` against a
real `waypoint serve`, a real worker and Postgres: the four multitask strategies on a thread whose
run is busy (the `listener` agent adds slowly until its newest user message is "stop now"), and
`after_seconds`. The waiting itself (timers, cancels, forks) is covered time-skipping in
tests/test_wait_to_start.py."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError

from tests.conftest import ApiServer
from tests.helpers import eventually, human
from waypoint.app.http.ui import session
from waypoint.client import Waypoint

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


async def row(api: ApiServer, run_id: str) -> dict[str, Any]:
    """The run's row (its worker writes it within a moment of the start, a waiting run's too)."""

    async def written() -> dict[str, Any] | None:
        found: dict[str, Any] = (await api.http.get(f"/v1/runs/{run_id}", headers=api.headers())).json()
        assert "status" in found, found
        return found if found["status"] != "starting" else None

    return await eventually(written, timeout=10, what=f"run {run_id}'s row")


async def busy_thread(api: ApiServer, lg: LangGraphClient) -> tuple[str, str]:
    """A thread whose run (listener, "count") is running and has recorded a step."""
    tid = (await lg.threads.create())["thread_id"]
    first = await lg.runs.create(tid, "listener", input=human("count"))

    async def stepped() -> bool:
        return (await row(api, first["run_id"])).get("steps", 0) >= 1

    await eventually(stepped, timeout=30, what="the first run's first step")
    return tid, first["run_id"]


def humans(values: dict) -> list[str]:
    return [m["content"] for m in values["messages"] if m["type"] == "human"]


async def test_reject_and_enqueue(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid, first = await busy_thread(api, lg)
    for strategy in (None, "reject"):
        with pytest.raises(ConflictError) as refused:
            await lg.runs.create(tid, "listener", input=human("x"), multitask_strategy=strategy)  # type: ignore[arg-type]
        assert first in refused.value.response.text
    r = await api.http.post(
        f"/threads/{tid}/runs", json={"assistant_id": "listener", "input": human("x"), "multitask_strategy": "later"}
    )
    assert r.status_code == 400 and "reject, enqueue, interrupt, rollback" in r.json()["error"]["message"]

    second = await lg.runs.create(tid, "listener", input=human("stop now"), multitask_strategy="enqueue")
    # answered as created, and read so: queued (Waypoint's status, as `waypoint status` says), enqueue
    assert (second["multitask_strategy"], second["metadata"]["waypoint_status"]) == ("enqueue", "queued")
    got = await lg.runs.get(tid, second["run_id"])
    assert (got["status"], got["multitask_strategy"], got["metadata"]["waypoint_status"]) == (
        "pending",
        "enqueue",
        "queued",
    )
    waiting = await row(api, second["run_id"])
    assert (waiting["status"], waiting["steps"], waiting["after_run_id"]) == ("queued", 0, first)
    assert (await lg.threads.get(tid))["status"] == "busy"
    # a third, enqueued too, waits for the second (queued itself)
    third = await lg.runs.create(tid, "listener", input=human("stop now"), multitask_strategy="enqueue")
    assert (await row(api, third["run_id"]))["after_run_id"] == second["run_id"]
    assert (await row(api, first))["status"] == "running"  # enqueueing never touches the busy run

    await lg.runs.cancel(tid, first, wait=True)
    final = await lg.runs.join(tid, second["run_id"])
    assert final["messages"][-1]["content"] == "heard: stop now"
    assert humans(final) == ["count", "stop now"]  # it went on from the first run's last step
    after_first = await row(api, second["run_id"])
    assert after_first["parent_run_id"] == first and after_first["fork_step"] == (await row(api, first))["steps"]
    last = await lg.runs.join(tid, third["run_id"])
    assert humans(last) == ["count", "stop now", "stop now"]
    runs = await lg.runs.list(tid)
    assert [r["run_id"] for r in runs] == [third["run_id"], second["run_id"], first]
    assert [r["status"] for r in runs] == ["success", "success", "interrupted"]


async def test_interrupt_goes_on_from_the_cancelled_runs_checkpoint(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid, first = await busy_thread(api, lg)
    final = await lg.runs.wait(tid, "listener", input=human("stop now"), multitask_strategy="interrupt")
    assert final["messages"][-1]["content"] == "heard: stop now"
    cancelled = await row(api, first)
    assert cancelled["status"] == "cancelled" and cancelled["steps"] >= 1
    assert "multitask_strategy interrupt" in cancelled["error"]
    runs = await lg.runs.list(tid)
    assert [r["status"] for r in runs] == ["success", "interrupted"]
    assert [r["multitask_strategy"] for r in runs] == ["interrupt", "reject"]  # as each was created
    second = await row(api, runs[0]["run_id"])
    assert (second["parent_run_id"], second["fork_step"]) == (first, cancelled["steps"])
    state = await lg.threads.get_state(tid)
    assert humans(state["values"]) == ["count", "stop now"]
    assert sum(1 for m in state["values"]["messages"] if m["type"] == "tool") == cancelled["steps"]


async def test_rollback_takes_the_busy_run_off_the_thread(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid, first = await busy_thread(api, lg)
    await lg.runs.cancel(tid, first, wait=True)  # a finished turn: the thread's state to keep
    kept = await row(api, first)
    second = await lg.runs.create(tid, "listener", input=human("again"))

    async def stepped() -> bool:
        return (await row(api, second["run_id"])).get("steps", 0) > kept["steps"]

    await eventually(stepped, timeout=30, what="the second run's first step")
    final = await lg.runs.wait(tid, "listener", input=human("stop now"), multitask_strategy="rollback")
    assert final["messages"][-1]["content"] == "heard: stop now"
    assert humans(final) == ["count", "stop now"]  # nothing of the rolled-back run
    rolled_back = await row(api, second["run_id"])
    assert rolled_back["status"] == "cancelled"  # kept in the log, cancelled, on no thread
    runs = await lg.runs.list(tid)
    assert second["run_id"] not in {r["run_id"] for r in runs} and len(runs) == 2
    assert [r["multitask_strategy"] for r in runs] == ["rollback", "reject"]
    assert (await lg.runs.get(tid, runs[0]["run_id"]))["multitask_strategy"] == "rollback"
    third = await row(api, runs[0]["run_id"])
    assert (third["parent_run_id"], third["fork_step"]) == (first, kept["steps"])
    history = await lg.threads.get_history(tid, limit=100)
    assert all(not h["checkpoint"]["checkpoint_id"].startswith(second["run_id"]) for h in history)


async def test_a_delayed_run_is_pending_and_can_be_cancelled_before_it_starts(
    api: ApiServer, worker, client, engine, settings
):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    later = await lg.runs.create(tid, "calculator", input=human("add"), after_seconds=3600)
    assert (await lg.runs.get(tid, later["run_id"]))["status"] == "pending"
    waiting = await row(api, later["run_id"])
    assert (waiting["status"], waiting["steps"]) == ("scheduled", 0) and waiting["start_at"]
    assert (await lg.threads.get(tid))["status"] == "busy"
    key = await Waypoint(client, engine, settings).keys.valid(api.key)
    assert key is not None
    api.http.cookies.set(session.COOKIE, session.issue(session.secret_of(settings.ui_secret), key.id))
    page = (await api.http.get(f"/ui/runs/{later['run_id']}")).text
    assert 'id="run-starts">at ' in page and "scheduled" in page
    api.http.cookies.clear()
    cancelled = await lg.runs.cancel(tid, later["run_id"], wait=True)
    assert cancelled["status"] == "interrupted"
    ended = await row(api, later["run_id"])
    assert (ended["status"], ended["steps"], ended["max_steps"]) == ("cancelled", 0, 0)
    events = (await api.http.get(f"/v1/runs/{later['run_id']}/events", headers=api.headers())).json()["events"]
    assert [e["kind"] for e in events] == ["run_finished"]  # it never started

    # the thread is free again; a run after a second starts then, on the stateless route too
    soon = await lg.runs.wait(tid, "calculator", input=human("add"), after_seconds=1)
    assert soon["messages"][-1]["content"] == "The answer is 15."
    alone = await lg.runs.create(None, "calculator", input=human("add"), after_seconds=1)
    assert (await row(api, alone["run_id"]))["status"] == "scheduled"

    async def completed() -> bool:
        return (await row(api, alone["run_id"]))["status"] == "completed"

    await eventually(completed, timeout=30, what="the stateless delayed run's end")
