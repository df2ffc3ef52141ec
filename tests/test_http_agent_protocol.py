"""The Agent Protocol, spoken to by a client nobody here wrote: LangGraph's `langgraph-sdk`
against a real `waypoint serve` (uvicorn), a real worker and Postgres."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError
from langgraph_sdk.stream.transport.http import ProtocolSseTransport

from tests.conftest import ApiServer
from tests.helpers import eventually, human

pytestmark = pytest.mark.postgres


async def test_a_thread_with_langgraph_sdk(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    assistants = await lg.assistants.search()
    assert "calculator" in {a["assistant_id"] for a in assistants}
    calculator = await lg.assistants.get("calculator")
    assert calculator["graph_id"] == "calculator" and "add" in calculator["metadata"]["tools"]
    schemas = await lg.assistants.get_schemas("calculator")
    assert schemas["input_schema"]["required"] == ["messages"]
    assert schemas["tools"][0]["parameters"]["required"] == ["a", "b"]

    thread = await lg.threads.create(metadata={"user": "ada"})
    parts = [
        part
        async for part in lg.runs.stream(
            thread["thread_id"],
            "calculator",
            input=human("add 2 and 3"),
            stream_mode=["values", "updates", "messages-tuple"],
        )
    ]
    events = [p.event for p in parts]
    assert events[0] == "metadata" and "values" in events and "updates" in events and "messages" in events
    final = [p.data for p in parts if p.event == "values"][-1]["messages"]
    assert [m["type"] for m in final] == ["human", "ai", "tool", "tool", "ai", "tool", "ai"]
    assert final[0]["content"] == "add 2 and 3" and final[-1]["content"] == "The answer is 15."
    updates = [p.data for p in parts if p.event == "updates"]
    assert list(updates[0]) == ["model"] and list(updates[1]) == ["tools"]
    chunk, meta = [p.data for p in parts if p.event == "messages"][0]
    assert chunk["type"] == "AIMessageChunk" and meta["langgraph_node"] == "model"

    state = await lg.threads.get_state(thread["thread_id"])
    assert state["values"]["messages"] == final and state["next"] == []
    got = await lg.threads.get(thread["thread_id"])
    assert (got["status"], got["metadata"]) == ("idle", {"user": "ada"})

    # a second run continues the conversation: it forks the first at its last step
    second = await lg.runs.wait(thread["thread_id"], "calculator", input=human("and again"))
    messages = second["messages"]
    assert messages[: len(final)] == final and messages[len(final)]["content"] == "and again"
    runs = await lg.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["success", "success"]
    newest = await lg.runs.get(thread["thread_id"], runs[0]["run_id"])
    assert newest["run_id"] == runs[0]["run_id"]
    # it recalls long-term memory as it is now (see README, Memory: what a run recalls)
    started = await api.http.get(
        f"/v1/runs/{newest['run_id']}/events", params={"kind": "run_started"}, headers=api.headers()
    )
    assert started.json()["events"][0]["payload"]["fork"]["memory"] == "now"

    history = await lg.threads.get_history(thread["thread_id"], limit=100)
    ids = [h["checkpoint"]["checkpoint_id"] for h in history]
    assert ids[0] == f"{runs[0]['run_id']}:4" and ids[-1] == f"{runs[1]['run_id']}:0"
    assert history[0]["values"] == {"messages": messages}
    assert history[-1]["values"]["messages"] == [final[0]]  # the first checkpoint: only the task
    assert history[0]["parent_checkpoint"]["checkpoint_id"] == ids[1]
    at = await lg.threads.get_state(thread["thread_id"], checkpoint_id=ids[-1])
    assert at["values"] == history[-1]["values"]

    copy = await lg.threads.copy(thread["thread_id"])
    assert copy["values"] == {"messages": messages} and copy["thread_id"] != thread["thread_id"]
    assert (await lg.threads.search(metadata={"user": "ada"}))[0]["thread_id"] in {
        copy["thread_id"],
        thread["thread_id"],
    }

    # a streamed third run starts from all that: its first values are the conversation plus its message
    third = [p async for p in lg.runs.stream(thread["thread_id"], "calculator", input=human("once more"))]
    first_values = next(p.data for p in third if p.event == "values")["messages"]
    assert first_values == [*messages, {**first_values[-1], "type": "human", "content": "once more"}]
    assert len(await lg.runs.list(thread["thread_id"])) == 3

    stateless = await lg.runs.wait(None, "calculator", input=human("alone"))
    assert stateless["messages"][-1]["content"] == "The answer is 15."
    with pytest.raises(NotFoundError):
        await lg.threads.get("no-such-thread")


async def test_cancel_and_join_a_running_stream(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    thread = await lg.threads.create()
    tid = thread["thread_id"]
    run = await lg.runs.create(tid, "listener", input=human("count"), stream_mode=["values", "custom"])
    with pytest.raises(ConflictError):  # one run at a time on a thread
        await lg.runs.create(tid, "listener", input=human("count again"))

    joined: list = []

    async def join() -> None:
        async for part in lg.runs.join_stream(tid, run["run_id"], stream_mode=["values", "custom"]):
            joined.append(part)

    reader = asyncio.create_task(join())

    async def two_steps() -> bool:
        return sum(1 for p in joined if p.event == "custom" and p.data["event"]["kind"] == "model_response") >= 2

    await eventually(two_steps, timeout=60)
    cancelled = await lg.runs.cancel(tid, run["run_id"], wait=True)
    assert cancelled["status"] == "interrupted"
    await asyncio.wait_for(reader, 30)  # the joined stream ends with the run
    kinds = [p.data["event"]["kind"] for p in joined if p.event == "custom" and "event" in p.data]
    assert kinds[-1] == "run_finished" and joined[-1].id is not None
    assert [p.data["event"]["seq"] for p in joined if p.event == "custom"] == list(range(1, len(kinds) + 1))

    # rejoin after the last event seen: nothing is sent twice
    last_id = [p.id for p in joined if p.id][-3]
    rest = [p async for p in lg.runs.join_stream(tid, run["run_id"], stream_mode="custom", last_event_id=last_id)]
    assert [p.data["event"]["seq"] for p in rest] == [int(last_id) + 1, int(last_id) + 2]
    assert (await lg.threads.get(tid))["status"] == "idle"


async def test_join_stream_without_a_stream_mode_streams_values(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    thread = await lg.threads.create()
    run = await lg.runs.create(thread["thread_id"], "calculator", input=human("add"))
    parts = [p async for p in lg.runs.join_stream(thread["thread_id"], run["run_id"])]  # no stream_mode
    values = [p.data for p in parts if p.event == "values"]
    assert values and values[-1]["messages"][-1]["content"] == "The answer is 15."
    assert {p.event for p in parts} <= {"metadata", "values"}  # LangGraph's default mode


async def test_what_is_not_supported_says_so(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    thread = await lg.threads.create()
    r = await api.http.post(
        f"/threads/{thread['thread_id']}/runs",
        json={"assistant_id": "calculator", "input": human("x"), "command": {"resume": 1}},
    )
    assert r.status_code == 409 and "is idle, not interrupted" in r.json()["error"]["message"]  # nothing waits
    r = await api.http.post(
        f"/threads/{thread['thread_id']}/runs/stream",
        json={"assistant_id": "calculator", "input": human("x"), "stream_mode": ["telepathy"]},
    )
    assert r.status_code == 400 and "messages-tuple" in r.json()["error"]["message"]
    r = await api.http.post(f"/threads/{thread['thread_id']}/runs", json={"assistant_id": "calculator", "input": {}})
    assert r.status_code == 400 and "user message" in r.json()["error"]["message"]
    assert (await api.http.post("/assistants", json={})).status_code == 422  # no graph_id
    assert (await api.http.put("/store/items", json={})).status_code == 501

    # what the store cannot hold is refused, and the thread stays free
    huge = {"configurable": {"max_steps": 3_000_000_000}}
    r = await api.http.post(
        f"/threads/{thread['thread_id']}/runs", json={"assistant_id": "calculator", "input": human("x"), "config": huge}
    )
    assert r.status_code == 400 and "at most 2147483647" in r.json()["error"]["message"]
    assert (await lg.threads.get(thread["thread_id"]))["status"] == "idle"
    r = await api.http.post("/threads", json={"metadata": {"user": "a\x00"}})
    assert r.status_code == 400 and "NUL" in r.json()["error"]["message"]


async def test_every_unsupported_route_of_the_protocol_answers_501(api: ApiServer, worker):
    """Each method and path of LangGraph Server's API that Waypoint does not serve: 501 `not_supported`
    with what to do instead, never a bare 404 or 405."""
    tid = (await api.http.post("/threads", json={})).json()["thread_id"]
    routes = [
        ("PATCH", f"/threads/{tid}/state"),
        ("POST", "/threads/prune"),
        ("POST", "/runs/batch"),
        ("POST", "/runs/cancel"),
    ]
    for method, path in routes:
        r = await api.http.request(method, path, json={})
        assert (r.status_code, r.json()["error"]["code"]) == (501, "not_supported"), (method, path, r.text)
    for path in ("/runs/r1/wait", "/runs/r1/stream"):  # they resume a run: without a command, say so
        r = await api.http.post(path, json={})
        assert r.status_code == 400 and "command" in r.json()["error"]["message"], (path, r.text)
    assert (await api.http.get(f"/threads/{tid}/history", params={"limit": 5})).json() == []
    assert (await api.http.get("/assistants/calculator/subgraphs")).json() == {}


async def test_the_rest_of_the_protocol_endpoints(api: ApiServer, worker):
    http = api.http
    assert (await http.post("/assistants/count", json={})).json() >= 1
    graph = (await http.get("/assistants/calculator/graph")).json()
    assert {"source": "tools", "target": "model"} in graph["edges"]
    assert (await http.get("/assistants/nobody")).json()["error"]["code"] == "unknown_agent"

    thread = (await http.post("/threads", json={"thread_id": "t-rest", "metadata": {"a": 1}})).json()
    assert thread["status"] == "idle" and thread["values"] == {}
    assert (await http.post("/threads", json={"thread_id": "t-rest"})).status_code == 409
    same = await http.post("/threads", json={"thread_id": "t-rest", "if_exists": "do_nothing"})
    assert same.json()["thread_id"] == "t-rest"
    patched = (await http.patch("/threads/t-rest", json={"metadata": {"b": 2}})).json()
    assert patched["metadata"] == {"a": 1, "b": 2}
    assert (await http.post("/threads/count", json={"metadata": {"b": 2}})).json() == 1
    assert (await http.get("/threads/t-rest/state")).json()["checkpoint"]["checkpoint_id"] is None

    created = await http.post("/threads/t-rest/runs", json={"assistant_id": "calculator", "input": human("add")})
    run_id = created.json()["run_id"]
    assert created.headers["content-location"] == f"/threads/t-rest/runs/{run_id}"
    assert (await http.get(f"/threads/t-rest/runs/{run_id}/join")).json()["messages"][-1][
        "content"
    ] == "The answer is 15."
    at = await http.post("/threads/t-rest/state/checkpoint", json={"checkpoint": {"checkpoint_id": f"{run_id}:1"}})
    assert [m["type"] for m in at.json()["values"]["messages"]] == ["human", "ai", "tool", "tool"]
    empty = await http.post("/threads/t-rest/state", json={"values": {}})  # update_state needs a user message
    assert empty.status_code == 400 and "user message" in empty.json()["error"]["message"]
    # a run from an earlier checkpoint forks there
    rerun = await http.post(
        "/threads/t-rest/runs/wait",
        json={"assistant_id": "calculator", "input": human("redo"), "checkpoint_id": f"{run_id}:1"},
    )
    redo = rerun.json()["messages"]
    assert [m["type"] for m in redo[:5]] == ["human", "ai", "tool", "tool", "human"] and redo[4]["content"] == "redo"
    newest = (await http.get("/threads/t-rest/runs")).json()[0]["run_id"]
    assert (await http.delete(f"/threads/t-rest/runs/{newest}")).status_code == 204
    assert [r["run_id"] for r in (await http.get("/threads/t-rest/runs")).json()] == [run_id]
    assert (await http.delete("/threads/t-rest")).status_code == 204
    assert (await http.get("/threads/t-rest")).status_code == 404
    assert (await http.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"  # the run stays in the log

    background = (await http.post("/runs", json={"assistant_id": "calculator", "input": human("add")})).json()
    async with http.stream("GET", f"/runs/{background['run_id']}/stream", params={"stream_mode": "updates"}) as r:
        lines = [line async for line in r.aiter_lines()]
    assert "event: updates" in lines
    assert (await http.get(f"/runs/{background['run_id']}")).json()["status"] == "success"


async def test_a_thread_session_of_langgraph_sdk(api: ApiServer, worker):
    """langgraph-sdk's `client.threads.stream` (its v3 thread session): `run.start` starts the run;
    the session's event stream (`/threads/{id}/stream/events`, SSE or WebSocket) is not served and
    says so as every unserved route does: 501 `not_supported` naming the streams that are."""
    lg = get_client(url=api.url, api_key=api.key)
    tid = (await lg.threads.create())["thread_id"]
    async with lg.threads.stream(tid, assistant_id="calculator") as session:  # (its watcher is refused meanwhile)
        started = await session.run.start(input=human("add 2 and 3"))
    final = await lg.runs.join(tid, started["run_id"])
    assert final["messages"][-1]["content"] == "The answer is 15."

    # the session's event stream, opened as the SDK opens it
    transport = ProtocolSseTransport(client=lg.http.client, thread_id=tid)
    handle = transport.open_event_stream({"channels": ["lifecycle", "values"]})
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await handle.ready
    assert refused.value.response.status_code == 501
    await transport.close()
    for method in ("POST", "GET"):
        r = await api.http.request(method, f"/threads/{tid}/stream/events", json={"channels": ["values"]})
        assert (r.status_code, r.json()["error"]["code"]) == (501, "not_supported"), (method, r.text)
        assert "GET /threads/{thread_id}/runs/{run_id}/stream" in r.json()["error"]["message"]
    nowhere = await api.http.post("/threads/no-such-thread/stream/events", json={})
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "not_found"


async def test_a_run_answers_as_created_before_its_worker_writes_it(api: ApiServer, store, agents):
    """No worker polls (the agents are registered as a worker would): the runs' rows are never
    written, so every read below is of a run Temporal has and Postgres has not. It answers as its
    create did: its assistant, the strategy it was created with, and Waypoint's status (`queued`
    behind a busy run, `scheduled` when delayed), everywhere."""
    infos = [a.info(callable_providers=["scripted"], worker="t") for a in agents]
    await store.catalog.register_agents(api.settings.task_queue, infos)
    http = api.http
    created = (await http.post("/runs", json={"assistant_id": "calculator", "input": human("add")})).json()
    got = (await http.get(f"/runs/{created['run_id']}")).json()
    assert created["assistant_id"] == got["assistant_id"] == "calculator"
    assert created["metadata"]["waypoint_status"] == got["metadata"]["waypoint_status"] == "starting"

    tid = (await http.post("/threads", json={})).json()["thread_id"]
    first = (await http.post(f"/threads/{tid}/runs", json={"assistant_id": "calculator", "input": human("a")})).json()
    second_body = {"assistant_id": "calculator", "input": human("b"), "multitask_strategy": "enqueue"}
    second = (await http.post(f"/threads/{tid}/runs", json=second_body)).json()
    listed = (await http.get(f"/threads/{tid}/runs")).json()
    for answer in (second, (await http.get(f"/threads/{tid}/runs/{second['run_id']}")).json(), listed[0]):
        assert answer["run_id"] == second["run_id"]
        assert (answer["assistant_id"], answer["multitask_strategy"]) == ("calculator", "enqueue"), answer
        assert (answer["status"], answer["metadata"]["waypoint_status"]) == ("pending", "queued"), answer
    assert (listed[1]["run_id"], listed[1]["multitask_strategy"]) == (first["run_id"], "reject")
    own = (await http.get(f"/v1/runs/{second['run_id']}")).json()  # Waypoint's own API says the same
    assert (own["status"], own["after_run_id"], own["assistant_id"]) == ("queued", first["run_id"], "calculator")

    delayed_body = {"assistant_id": "calculator", "input": human("later"), "after_seconds": 3600}
    delayed = (await http.post("/runs", json=delayed_body)).json()
    assert delayed["metadata"]["waypoint_status"] == "scheduled"
    assert (await http.get(f"/runs/{delayed['run_id']}")).json()["metadata"]["waypoint_status"] == "scheduled"
