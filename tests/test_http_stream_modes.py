"""Every Agent Protocol stream mode and thread streams, read by langgraph-sdk from a real `waypoint
serve`, a real worker and a model that streams its tokens (the fake OpenAI server over a socket).
One server, worker and model for the module: each test starts runs of its own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import TEST_AGENTS
from tests.conftest import ApiServer
from tests.helpers import eventually, human
from waypoint.agents import AgentRegistry
from waypoint.app.embedded import StackInfo
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.testing.fake_openai import FakeOpenAI, Turn

pytestmark = pytest.mark.postgres

ANSWER = "Two and three make five, said word by word."


@pytest.fixture(scope="module")
def model() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
async def served(
    tmp_path_factory: pytest.TempPathFactory,
    stack: StackInfo,
    database_url: str,
    client: Client,
    engine: AsyncEngine,
    model: FakeOpenAI,
) -> AsyncIterator[ApiServer]:
    """`waypoint serve` and a worker of the test agents, shared by the module's tests."""
    from waypoint.app.http.server import api_server, start_api, stop_api, url_of

    root: Path = tmp_path_factory.mktemp("modes")
    settings = Settings(
        state_dir=root / "state",
        temporal_address=stack.temporal_address,
        database_url=database_url,
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        tenant=f"tenant-{uuid.uuid4().hex[:8]}",
        workspace=root / "workspace",
        qdrant_path=root / "qdrant",
        openai_api_key="test-key",
        openai_base_url=model.base_url,
        model_timeout_seconds=10,
    )
    wp = Waypoint(client, engine, settings)
    server = api_server(settings, host="127.0.0.1", port=0, waypoint=wp)
    task = await start_api(server)
    key, _ = await wp.keys.create(settings.tenant, "test")
    url = url_of(server)
    async with build_worker(client, engine, settings, AgentRegistry(TEST_AGENTS)):
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            yield ApiServer(url, key, http, settings)
    await stop_api(server, task)


def add_then_answer(model: FakeOpenAI) -> None:
    """The next run of `remote`: it calls add(2, 3), then answers ANSWER, both streamed token by token."""
    model.answer(Turn(tool_calls=[("add", {"a": 2, "b": 3})], chunk_delay=0.01), Turn(content=ANSWER, chunk_delay=0.01))


def of(parts: list[dict[str, Any]], kind: str) -> list[Any]:
    return [p["data"] for p in parts if p["type"] == kind and not p["ns"]]


async def test_every_graph_mode_of_one_run(served: ApiServer, model: FakeOpenAI):
    add_then_answer(model)
    lg = get_client(url=served.url, api_key=served.key)
    thread = await lg.threads.create()
    modes = ["messages", "events", "debug", "tasks", "checkpoints", "values"]
    parts = [
        p
        async for p in lg.runs.stream(
            thread["thread_id"], "remote", input=human("add 2 and 3"), stream_mode=modes, version="v2"
        )
    ]
    run_id = of(parts, "metadata")[0]["run_id"]
    final = of(parts, "values")[-1]["messages"]
    assert [m["type"] for m in final] == ["human", "ai", "tool", "ai"] and final[-1]["content"] == ANSWER

    # messages: metadata once per message, then the answer growing token by token, then each message whole
    kinds = [p["type"] for p in parts if p["type"].startswith("messages/")]
    complete = of(parts, "messages/complete")
    assert [m[0]["type"] for m in complete] == ["ai", "tool", "ai"]
    assert complete[0][0]["tool_calls"][0]["name"] == "add" and complete[1][0]["content"] == "5"
    assert complete[2][0] == final[-1]
    answer_id = final[-1]["id"]
    partial = [d[0] for d in of(parts, "messages/partial") if d[0]["id"] == answer_id]
    assert len(partial) >= 2 and partial[-1]["content"] == ANSWER  # deltas come in batches
    assert all(a["content"] == b["content"][: len(a["content"])] for a, b in zip(partial, partial[1:], strict=False))
    metadata = of(parts, "messages/metadata")
    announced = [next(iter(m)) for m in metadata]
    assert announced == [final[1]["id"], final[2]["id"], answer_id]  # each message's metadata once, first
    assert metadata[2][answer_id]["metadata"]["langgraph_node"] == "model"
    assert metadata[1][final[2]["id"]]["metadata"]["langgraph_node"] == "tools"
    assert kinds.index("messages/metadata") < kinds.index("messages/partial")
    tool_call_partials = [d[0] for d in of(parts, "messages/partial") if d[0]["id"] == final[1]["id"]]
    assert tool_call_partials[-1]["tool_calls"] == [{**final[1]["tool_calls"][0]}]  # its arguments, pieced

    # events: the graph, each node, the chat model (start, tokens, end) and the tool
    events = of(parts, "events")
    names = [(e["event"], e["name"]) for e in events]
    assert names[0] == ("on_chain_start", "LangGraph") and names[-1] == ("on_chain_end", "LangGraph")
    assert events[-1]["data"]["output"]["messages"] == final
    wanted = [
        ("on_chain_start", "model"),
        ("on_chat_model_start", "chat_model"),
        ("on_chat_model_stream", "chat_model"),
        ("on_chat_model_end", "chat_model"),
        ("on_chain_end", "model"),
        ("on_chain_start", "tools"),
        ("on_tool_start", "add"),
        ("on_tool_end", "add"),
        ("on_chain_end", "tools"),
        ("on_chain_start", "model"),
    ]
    deduped = [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]
    assert deduped[1 : 1 + len(wanted)] == wanted
    streamed = [e for e in events if e["event"] == "on_chat_model_stream" and e["run_id"] == answer_id]
    assert "".join(e["data"]["chunk"]["content"] for e in streamed) == ANSWER
    tool_start = next(e for e in events if e["event"] == "on_tool_start")
    assert tool_start["data"]["input"] == {"a": 2, "b": 3} and tool_start["metadata"]["langgraph_node"] == "tools"
    assert next(e for e in events if e["event"] == "on_tool_end")["data"]["output"]["content"] == "5"

    # debug: a checkpoint per step (the input's first), a task and its result per node run
    debug = of(parts, "debug")
    assert [(d["type"], d["step"]) for d in debug] == [
        ("checkpoint", 0),
        ("task", 1),
        ("task_result", 1),
        ("task", 1),
        ("task_result", 1),
        ("checkpoint", 1),
        ("task", 2),
        ("task_result", 2),
        ("checkpoint", 2),
    ]
    checkpoints = [d["payload"] for d in debug if d["type"] == "checkpoint"]
    ids = [c["config"]["configurable"]["checkpoint_id"] for c in checkpoints]
    assert ids == [f"{run_id}:0", f"{run_id}:1", f"{run_id}:2"]
    assert [c["parent_config"] and c["parent_config"]["configurable"]["checkpoint_id"] for c in checkpoints] == [
        None,
        *ids[:2],
    ]
    assert [c["next"] for c in checkpoints] == [["model"], ["model"], []]
    assert checkpoints[0]["values"]["messages"] == final[:1] and checkpoints[-1]["values"]["messages"] == final
    history = await lg.threads.get_history(thread["thread_id"], limit=10)
    assert {h["checkpoint"]["checkpoint_id"] for h in history} >= set(ids)  # the same ids the thread lists
    results = [d["payload"] for d in debug if d["type"] == "task_result"]
    assert [(r["name"], r["result"]["messages"]) for r in results] == [
        ("model", [final[1]]),
        ("tools", [final[2]]),
        ("model", [final[3]]),
    ]
    # tasks and checkpoints: the same payloads, without debug's envelope
    assert of(parts, "tasks") == [d["payload"] for d in debug if d["type"] != "checkpoint"]
    assert of(parts, "checkpoints") == checkpoints

    # joined again after step 1's checkpoint (its SSE id, the log seq behind it): only step 2's parts
    joined = [p async for p in lg.runs.join_stream(thread["thread_id"], run_id, stream_mode="debug")]

    def untimed(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in d.items() if k != "timestamp"} for d in parts]  # live: when it was sent

    assert untimed([p.data for p in joined if p.event == "debug"]) == untimed(debug)
    after = next(p.id for p in joined if p.event == "debug" and p.data["type"] == "checkpoint" and p.data["step"] == 1)
    rest = [
        p.data async for p in lg.runs.join_stream(thread["thread_id"], run_id, stream_mode="debug", last_event_id=after)
    ]
    assert untimed(rest) == untimed(debug[-3:])


async def test_tools_mode_and_the_metadata_of_messages_tuple(served: ApiServer, model: FakeOpenAI):
    """`tools`: each call's start and end in LangGraph's payloads (an unknown tool's call ends in
    `tool-error`); `messages-tuple` metadata names the thread, the node's checkpoint namespace and,
    for the model node, the model (`ls_model_name` of the spec `openai:fake-model`)."""
    model.answer(
        Turn(tool_calls=[("add", {"a": 2, "b": 3}), ("subtract", {"a": 5})], chunk_delay=0.01),
        Turn(content=ANSWER, chunk_delay=0.01),
    )
    lg = get_client(url=served.url, api_key=served.key)
    tid = (await lg.threads.create())["thread_id"]
    modes = ["tools", "messages-tuple", "values"]
    parts = [p async for p in lg.runs.stream(tid, "remote", input=human("add 2 and 3"), stream_mode=modes)]
    run_id = next(p.data["run_id"] for p in parts if p.event == "metadata")
    calls = next(p.data for p in parts if p.event == "values" and len(p.data["messages"]) > 1)["messages"][1]
    add_id, subtract_id = (c["id"] for c in calls["tool_calls"])
    tools = [p.data for p in parts if p.event == "tools"]
    assert tools[:2] == [
        {"event": "tool-started", "tool_call_id": add_id, "tool_name": "add", "input": {"a": 2, "b": 3}},
        {"event": "tool-started", "tool_call_id": subtract_id, "tool_name": "subtract", "input": {"a": 5}},
    ]
    ends = {t["tool_call_id"]: t for t in tools[2:]}
    assert len(tools) == 4 and ends[add_id] == {"event": "tool-finished", "tool_call_id": add_id, "output": "5"}
    assert ends[subtract_id]["event"] == "tool-error" and "subtract" in ends[subtract_id]["message"]

    metadata = [p.data[1] for p in parts if p.event == "messages"]
    by_node = {m["langgraph_node"]: m for m in metadata}
    chat = by_node["model"]
    assert (chat["thread_id"], chat["run_id"], chat["ls_provider"], chat["ls_model_name"]) == (
        tid,
        run_id,
        "openai",
        "fake-model",
    )
    step = chat["langgraph_step"]
    assert chat["langgraph_checkpoint_ns"] == f"model:{run_id}:{step}:model" == chat["checkpoint_ns"]
    tool = by_node["tools"]
    assert tool["thread_id"] == tid and tool["langgraph_checkpoint_ns"].startswith("tools:")
    assert "ls_model_name" not in tool  # a tool result came from no model


async def test_the_new_modes_stream_sub_agent_runs_too(served: ApiServer):
    lg = get_client(url=served.url, api_key=served.key)
    parts = [
        p
        async for p in lg.runs.stream(
            None,
            "delegator",
            input=human("add twice"),
            stream_mode=["messages", "debug"],
            stream_subgraphs=True,
            version="v2",
        )
    ]
    run_id = of(parts, "metadata")[0]["run_id"]
    children = {p["ns"][0] for p in parts if p["ns"]}
    assert len(children) == 3 and all(ns.startswith(("calculator:", "broken:")) for ns in children)
    calc = sorted(ns for ns in children if ns.startswith("calculator:"))[0]
    child_run = calc.split(":", 1)[1]
    assert child_run.startswith(f"{run_id}.")
    mine = [p for p in parts if p["ns"] == [calc]]
    checkpoints = [p["data"]["payload"] for p in mine if p["type"] == "debug" and p["data"]["type"] == "checkpoint"]
    assert [c["config"]["configurable"]["checkpoint_id"] for c in checkpoints] == [f"{child_run}:{s}" for s in range(4)]
    complete = [p["data"][0] for p in mine if p["type"] == "messages/complete"]
    assert [m["type"] for m in complete] == ["ai", "tool", "tool", "ai", "tool", "ai"]
    assert complete[-1]["content"] == "The answer is 15."
    # the top run's own parts: its answer reports what its sub-agents said
    top = of(parts, "messages/complete")
    assert top[-1][0]["type"] == "ai" and "The answer is 15." in top[-1][0]["content"]


async def read_thread(lg, thread_id: str, into: list, **kwargs) -> None:
    async for part in await lg.threads.join_stream(thread_id, **kwargs):  # an async def answering the stream
        into.append(part)


async def test_a_thread_stream_follows_its_runs_and_resumes_across_them(
    served: ApiServer, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    from waypoint.app.http.protocol.follow import ThreadFollower

    # The server runs in this event loop: a stream has joined once its follower knows where it starts.
    placed: list[tuple[tuple[str, int] | None, int]] = []
    place = ThreadFollower.start

    async def start(self: ThreadFollower, resume: tuple[str, int | None] | None) -> tuple[tuple[str, int] | None, int]:
        where = await place(self, resume)
        placed.append(where)
        return where

    async def joined_streams(n: int) -> bool:
        return len(placed) >= n

    monkeypatch.setattr(ThreadFollower, "start", start)
    lg = get_client(url=served.url, api_key=served.key)
    tid = (await lg.threads.create())["thread_id"]
    joined: list = []
    reader = asyncio.create_task(read_thread(lg, tid, joined))
    try:
        await eventually(lambda: joined_streams(1), timeout=60, what="the stream joining")
        assert placed[0][0] is None  # joined while the thread is idle: it waits for the next run
        add_then_answer(model)
        first = (await lg.runs.create(tid, "remote", input=human("add 2 and 3")))["run_id"]

        async def done(run_id: str) -> bool:
            return any(p.event == "run_done" and p.data["run_id"] == run_id for p in joined)

        await eventually(lambda: done(first), timeout=60, what="the first run's run_done")
    finally:
        reader.cancel()
    events = [p.event for p in joined]
    assert events[0] == "metadata" and joined[0].data["run_id"] == first
    assert {"values", "updates", "messages"} <= set(events)  # run_modes: values, updates, messages-tuple
    assert joined[-1].data == {"run_id": first, "status": "success"} and joined[-1].id == f"{first}:done"
    ids = list(dict.fromkeys(p.id for p in joined if p.id))  # a part without an id keeps the one before (SSE)
    assert all(i.startswith(f"{first}:") for i in ids) and ids[-1] == f"{first}:done"
    seqs = [int(i.rpartition(":")[2]) for i in ids[:-1]]
    assert seqs == sorted(seqs) and len(seqs) >= 4
    assert [p.data for p in joined if p.event == "values"][-1]["messages"][-1]["content"] == ANSWER

    # a second run; then a client that saw the first run up to the middle resumes: the rest of it, then the second
    model.answer(Turn(content="Again: five.", chunk_delay=0.01))
    second = (await lg.runs.create(tid, "remote", input=human("again")))["run_id"]
    resumed: list = []
    middle = ids[len(ids) // 2]
    reader = asyncio.create_task(read_thread(lg, tid, resumed, last_event_id=middle, stream_mode="values"))
    try:

        async def second_done() -> bool:
            return any(p.event == "run_done" and p.data["run_id"] == second for p in resumed)

        await eventually(second_done, timeout=60, what="the second run's run_done")
    finally:
        reader.cancel()
    first_rest = [p for p in resumed if p.id and p.id.startswith(f"{first}:") and p.id != f"{first}:done"]
    assert all(int(p.id.rpartition(":")[2]) > int(middle.rpartition(":")[2]) for p in first_rest)
    assert [p.event for p in resumed].count("run_done") == 2
    assert {p.event for p in resumed} == {"values", "run_done", "metadata"}
    opened = [p.data["run_id"] for p in resumed if p.event == "metadata"]
    assert opened == [second]  # the resumed run does not open again
    assert [p.data for p in resumed if p.event == "values"][-1]["messages"][-1]["content"] == "Again: five."

    # after the last run's done, a resumed stream waits for the next run: nothing more of these, which
    # would come before the next run's parts
    later: list = []
    reader = asyncio.create_task(read_thread(lg, tid, later, last_event_id=f"{second}:done", stream_mode="lifecycle"))
    try:
        await eventually(lambda: joined_streams(3), timeout=60, what="the resumed stream joining")
        model.answer(Turn(content="Third."))
        third = (await lg.runs.create(tid, "remote", input=human("once more")))["run_id"]

        async def third_done() -> bool:
            return any(p.event == "run_done" for p in later)

        await eventually(third_done, timeout=60, what="the third run's run_done")
    finally:
        reader.cancel()
    assert [(p.event, p.data["run_id"]) for p in later] == [("metadata", third), ("run_done", third)]


async def test_unknown_stream_modes_and_positions_are_refused(served: ApiServer):
    http = served.http
    tid = (await http.post("/threads", json={})).json()["thread_id"]
    r = await http.post(
        f"/threads/{tid}/runs/stream",
        json={"assistant_id": "calculator", "input": human("x"), "stream_mode": ["values", "telepathy"]},
    )
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "telepathy" in message
    assert all(m in message for m in ("messages", "messages-tuple", "events", "debug", "tasks", "checkpoints"))
    assert "tools" in message
    r = await http.get(f"/threads/{tid}/stream", params={"stream_mode": "telepathy"})
    assert r.status_code == 400 and "run_modes" in r.json()["error"]["message"]
    r = await http.get(f"/threads/{tid}/stream", headers={"Last-Event-ID": "12"})
    assert r.status_code == 400 and "<run_id>:<seq>" in r.json()["error"]["message"]
    r = await http.get(f"/threads/{tid}/stream", headers={"Last-Event-ID": "no-such-run:3"})
    assert r.status_code == 400 and "not on thread" in r.json()["error"]["message"]
    assert (await http.get("/threads/no-such-thread/stream")).status_code == 404
