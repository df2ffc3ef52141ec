"""`threads.update_state` through langgraph-sdk against a real `waypoint serve`, worker and Postgres:
an update is a fork that ends before its first step (a new checkpoint, the old ones kept), `completed`."""

from __future__ import annotations

import json
import re

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import APIStatusError, ConflictError, NotFoundError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.conftest import ApiServer
from tests.helpers import human, waypoint
from waypoint.app.http.ui import session
from waypoint.client import Waypoint

pytestmark = pytest.mark.postgres


async def test_update_state_adds_a_checkpoint_the_next_run_goes_on_from(
    api: ApiServer, worker, client: Client, engine: AsyncEngine
):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    first = await lg.runs.wait(tid, "calculator", input=human("add 2 and 3"))
    before = await lg.threads.get_history(tid, limit=100)
    old_ids = [h["checkpoint"]["checkpoint_id"] for h in before]

    updated = await lg.threads.update_state(tid, {"messages": [{"type": "human", "content": "use a pencil"}]})
    new_id = updated["checkpoint"]["checkpoint_id"]
    assert updated["checkpoint"]["thread_id"] == tid and new_id not in old_ids
    state = await lg.threads.get_state(tid)
    assert state["checkpoint"]["checkpoint_id"] == new_id and state["next"] == []
    messages = state["values"]["messages"]
    assert messages[:-1] == first["messages"]
    assert (messages[-1]["type"], messages[-1]["content"]) == ("human", "use a pencil")
    history = await lg.threads.get_history(tid, limit=100)
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == [new_id, *old_ids]  # one more, the old kept
    assert history[0]["parent_checkpoint"]["checkpoint_id"] == old_ids[0]
    assert (await lg.threads.get_state(tid, checkpoint_id=new_id))["values"] == state["values"]
    assert (await lg.threads.get(tid))["status"] == "idle"
    wp = Waypoint(client, engine, api.settings)
    await the_update_completed(api, wp, lg, tid, new_id.rsplit(":", 1)[0])

    # the next run goes on from the updated state: its conversation holds the added message
    after = await lg.runs.wait(tid, "calculator", input=human("and again"))
    assert after["messages"][: len(messages)] == messages
    assert after["messages"][len(messages)]["content"] == "and again" and after["messages"][-1]["type"] == "ai"

    # an older checkpoint branches from there; the thread's newest checkpoint is the branch
    branch = await lg.threads.update_state(tid, human("start over"), checkpoint_id=old_ids[-3])
    at = await lg.threads.get_state(tid)
    assert at["checkpoint"] == branch["checkpoint"] | {"checkpoint_map": None}
    one_step = (await lg.threads.get_state(tid, checkpoint_id=old_ids[-3]))["values"]["messages"]
    assert at["values"]["messages"][:-1] == one_step and at["values"]["messages"][-1]["content"] == "start over"
    # a run from the new checkpoint (checkpoint_id) starts there too
    from_it = await lg.runs.wait(
        tid, "calculator", input=human("go"), checkpoint_id=branch["checkpoint"]["checkpoint_id"]
    )
    assert from_it["messages"][: len(one_step) + 2] == [
        *at["values"]["messages"],
        from_it["messages"][len(one_step) + 1],
    ]
    assert from_it["messages"][len(one_step) + 1]["content"] == "go"
    assert from_it["messages"][-1]["content"] == "The answer is go."  # the calculator's last turn, at step 3


async def test_update_state_refuses_what_it_cannot_map(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    with pytest.raises(NotFoundError):  # nothing to update yet
        await lg.threads.update_state(tid, human("hi"))
    await lg.runs.wait(tid, "calculator", input=human("add 2 and 3"))
    first_id = (await lg.threads.get_history(tid, limit=100))[-1]["checkpoint"]["checkpoint_id"]
    for values, as_node in [
        ({"messages": [{"type": "ai", "content": "I did it"}]}, None),
        ({"messages": [{"role": "user", "content": "hi"}], "plan": "x"}, None),
        (human("hi"), "tools"),
    ]:
        with pytest.raises(APIStatusError) as bad:
            await lg.threads.update_state(tid, values, as_node=as_node)
        assert bad.value.response.status_code == 400 and "user message" in bad.value.response.text
    with pytest.raises(NotFoundError):
        await lg.threads.update_state(tid, human("hi"), checkpoint_id="run-nope:3")
    with pytest.raises(APIStatusError) as input_step:  # a run's step 0 is its input: no fork ends there
        await lg.threads.update_state(tid, human("hi"), checkpoint_id=first_id)
    assert input_step.value.response.status_code == 400
    # checkpoint metadata has nowhere to live (the SDK has no patch_state: the HTTP call it would make)
    patch = await api.http.patch(f"/threads/{tid}/state", json={"metadata": {"tag": "x"}}, headers=api.headers())
    assert patch.status_code == 501 and "PATCH /threads/" in patch.json()["error"]["message"]

    tid = (await lg.threads.create())["thread_id"]
    busy = await lg.runs.create(tid, "listener", input=human("count"))
    try:
        with pytest.raises(ConflictError) as conflict:
            await lg.threads.update_state(tid, human("hi"))
        assert busy["run_id"] in conflict.value.response.text
    finally:
        await lg.runs.cancel(tid, busy["run_id"])


async def the_update_completed(api: ApiServer, wp: Waypoint, lg: LangGraphClient, thread_id: str, run_id: str) -> None:
    """The update's run did what it was asked (issue 41): `completed` with no step of its own, on every
    surface; the runs page shows its row with a completed badge, not a red max-steps one."""
    assert (await lg.runs.get(thread_id, run_id))["status"] == "success"
    row = (await api.http.get(f"/v1/runs/{run_id}")).json()
    assert (row["status"], row["error"], row["steps"]) == ("completed", None, row["fork_step"])  # no step of its own
    shown = await waypoint(api.settings, "status", run_id, "--json")
    assert shown.code == 0 and json.loads(shown.out)["status"] == "completed", shown.out + shown.err
    key = await wp.keys.valid(api.key)
    assert key is not None
    api.http.cookies.set(session.COOKIE, session.issue(session.secret_of(api.settings.ui_secret), key.id))
    page = (await api.http.get("/ui", params={"text": row["task"]})).text  # its page of the runs list
    api.http.cookies.clear()
    (line,) = re.findall(rf'<tr data-run="{re.escape(run_id)}".*?</tr>', page, re.S)
    assert 'class="status status-completed"' in line and "max_steps" not in line and "max steps" not in line
