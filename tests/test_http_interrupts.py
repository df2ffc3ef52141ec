"""Interrupts and `Command(resume=...)` through langgraph-sdk against the real stack: a run that waits
for approval is an interrupted thread, and a resume answers the same durable approval the CLI,
the viewer and /v1 answer (one mechanism)."""

from __future__ import annotations

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError, ConflictError
from langgraph_sdk.schema import Command

from tests.conftest import ApiServer
from tests.helpers import eventually, human

pytestmark = pytest.mark.postgres


async def _interrupted(lg, tid: str) -> bool:
    return (await lg.threads.get(tid))["status"] == "interrupted"


async def test_an_approval_is_an_interrupt_answered_by_resume(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    parts = [p async for p in lg.runs.stream(tid, "payer", input=human("pay ada"), stream_mode=["values", "updates"])]
    (update,) = [p.data for p in parts if p.event == "updates" and "__interrupt__" in p.data]
    (found,) = update["__interrupt__"]
    run_id = found["id"].rpartition(":")[0]
    assert found["value"] == {
        "type": "approval",
        "call_id": found["value"]["call_id"],
        "tool": "pay",
        "input": {"amount": 900, "to": "ada"},
        "question": 'approve pay({"amount": 900, "to": "ada"})?',
    }
    assert parts[-1].event == "values" and parts[-1].data["__interrupt__"] == [found]  # the stream ends there

    thread = await lg.threads.get(tid)
    assert thread["status"] == "interrupted" and list(thread["interrupts"].values()) == [[found]]
    state = await lg.threads.get_state(tid)
    assert state["interrupts"] == [found] and state["next"] == ["tools"]
    assert state["tasks"][0]["name"] == "tools" and state["tasks"][0]["interrupts"] == [found]

    # a value that does not fit: 422 naming what the interrupt expects; an unknown id too
    with pytest.raises(APIStatusError) as bad:
        await lg.runs.create(tid, "payer", command=Command(resume={"answer": "blue"}))
    assert bad.value.response.status_code == 422 and "{'action': 'edit'" in bad.value.response.text
    with pytest.raises(APIStatusError) as wrong:
        await lg.runs.create(tid, "payer", command=Command(resume={f"{run_id}:nope": True}))
    assert wrong.value.response.status_code == 422 and found["id"] in wrong.value.response.text
    with pytest.raises(APIStatusError) as schema:
        edit = {"action": "edit", "input": {"amount": "lots", "to": "ada"}}
        await lg.runs.create(tid, "payer", command=Command(resume=edit))
    assert schema.value.response.status_code == 422 and "does not fit its arguments" in schema.value.response.text
    with pytest.raises(APIStatusError) as goto:
        await lg.runs.create(tid, "payer", command=Command(goto="tools"))
    assert goto.value.response.status_code == 501 and "resume" in goto.value.response.text

    # an edited input: the same run goes on, the tool runs with the human's arguments
    resumed = [
        p
        async for p in lg.runs.stream(
            tid, "payer", command=Command(resume={"action": "edit", "input": {"amount": 90, "to": "ada"}})
        )
    ]
    assert resumed[0].data["run_id"] == run_id
    assert resumed[-1].data["messages"][-1]["content"] == "last tool answer: paid 90 to ada"
    assert (await lg.threads.get(tid))["status"] == "idle"
    with pytest.raises(ConflictError) as idle:  # nothing waits now: 409 naming the status
        await lg.runs.create(tid, "payer", command=Command(resume=True))
    assert "thread " + tid + " is idle" in idle.value.response.text
    decisions = await api.http.get(f"/v1/runs/{run_id}/events", params={"kind": "decision"})
    assert decisions.json()["events"][0]["payload"]["edited_input"] == {"amount": 90, "to": "ada"}


async def test_deny_with_a_reason_through_runs_create_and_join(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    first = await lg.runs.wait(tid, "payer", input=human("pay ada"))
    (found,) = first["__interrupt__"]
    run = await lg.runs.create(tid, "payer", command=Command(resume={"action": "deny", "reason": "too much"}))
    assert run["run_id"] == found["id"].rpartition(":")[0]
    final = await lg.runs.join(tid, run["run_id"])
    assert final["messages"][-1]["content"] == "last tool answer: error: a human denied this call: too much"


async def test_ask_human_is_answered_by_resume(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    first = await lg.runs.wait(tid, "asker", input=human("pick a colour"))
    (found,) = first["__interrupt__"]
    assert (found["value"]["type"], found["value"]["question"]) == ("ask_human", "which colour?")
    with pytest.raises(httpx.HTTPStatusError) as yes:  # a question wants an answer, not a yes
        await lg.runs.wait(tid, "asker", command=Command(resume=True))
    assert yes.value.response.status_code == 422 and "asks a question" in yes.value.response.text
    final = await lg.runs.wait(tid, "asker", command=Command(resume="blue"))
    assert final["messages"][-1]["content"] == "last tool answer: blue" and "__interrupt__" not in final


async def test_the_same_wait_answered_through_v1_is_no_interrupt(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    run = await lg.runs.create(tid, "payer", input=human("pay ada"))
    await eventually(lambda: _interrupted(lg, tid))
    approved = await api.http.post(f"/v1/runs/{run['run_id']}/approve", json={"reason": "fine"})
    assert approved.status_code == 200, approved.text
    assert (await lg.threads.get(tid))["status"] != "interrupted"  # at once: the wait is the same one
    final = await lg.runs.join(tid, run["run_id"])
    assert final["messages"][-1]["content"] == "last tool answer: paid 900 to ada"
    assert (await lg.threads.get_state(tid))["interrupts"] == []
