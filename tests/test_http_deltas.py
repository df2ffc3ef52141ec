"""Model token deltas over SSE, from a model that really streams (the fake OpenAI server over a
socket): a failed attempt is marked so clients drop its partial text, the log's final text is
the successful attempt's deltas joined, a client joining mid-step gets the text so far, and the
AG-UI mapping of the same stream validates against AG-UI's own event models."""

from __future__ import annotations

import asyncio

import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from tests.conftest import ApiServer
from tests.helpers import Sse, sse_events
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn

pytestmark = pytest.mark.postgres


async def stream(api: ApiServer, run_id: str, **params) -> list[Sse]:
    async with api.http.stream("GET", f"/v1/runs/{run_id}/stream", params=params) as response:
        return [e async for e in sse_events(response)]


async def start(api: ApiServer, task: str = "say something") -> str:
    r = await api.http.post("/v1/runs", json={"task": task, "agent": "remote"})
    assert r.status_code == 201, r.text
    return r.json()["run_id"]


def attempts(events: list[Sse]) -> dict[tuple[int, int], str]:
    """(step, attempt) -> the text its deltas said, in order."""
    said: dict[tuple[int, int], str] = {}
    for e in events:
        if e.event == "attempt_started":
            said.setdefault((e.data["step"], e.data["attempt"]), "")
        elif e.event == "model_delta":
            key = (e.data["step"], e.data["attempt"])
            said[key] = e.data["text"] if e.data["snapshot"] else said.get(key, "") + e.data["text"]
    return said


async def test_a_503_then_200_shows_the_failed_attempt_and_the_retrys_tokens(api: ApiServer, worker, fake_openai):
    answer = "Hello from the second attempt, word by word."
    fake_openai.answer(
        Reply(503, {"error": {"message": "overloaded"}}, {"retry-after-ms": "300"}, delay=0.3),
        Turn(content=answer, chunk_delay=0.02),
    )
    events = await stream(api, await start(api))
    names = [e.event for e in events]
    failed = names.index("model_attempt_failed")
    assert events[failed].data["payload"]["status"] == 503 and events[failed].data["attempt"] == 1
    retry = next(i for i, e in enumerate(events) if e.event == "attempt_started" and e.data["attempt"] == 2)
    response = names.index("model_response")
    assert failed < retry < response  # the failure, then the retry's start, then its tokens, then the answer
    deltas = [e for e in events[retry:response] if e.event == "model_delta"]
    assert len(deltas) >= 1 and all(e.data["attempt"] == 2 for e in deltas)
    assert attempts(events)[(1, 2)] == answer == events[response].data["payload"]["content"]
    assert events[-1].event == "run_finished" and events[-1].data["payload"]["output"] == answer


async def test_a_stream_cut_mid_answer_is_dropped_and_the_retry_is_what_the_log_says(api, worker, fake_openai):
    final = "The complete answer, streamed again from the start."
    fake_openai.answer(
        Turn(content="A partial answer that never finishes", chunk_delay=0.3, cut_after=4),
        Turn(content=final, chunk_delay=0.02),
    )
    events = await stream(api, await start(api))
    said = attempts(events)
    assert said[(1, 1)] and not final.startswith(said[(1, 1)])  # attempt 1 said something else, then broke off
    assert said[(1, 2)] == final
    failure = next(e for e in events if e.event == "model_attempt_failed")
    assert "broke off" in failure.data["payload"]["error"] or "ended before" in failure.data["payload"]["error"]
    response = next(e for e in events if e.event == "model_response")
    assert (response.data["payload"]["content"], response.data["payload"]["attempt"]) == (final, 2)


async def test_a_client_joining_mid_step_gets_the_text_so_far(api: ApiServer, worker, fake_openai: FakeOpenAI):
    final = "one two three four five six seven eight nine ten"
    fake_openai.answer(Turn(content=final, chunk_delay=0.25))
    run_id = await start(api)
    first: list[Sse] = []
    late: list[Sse] = []

    async def read_first() -> None:
        async with api.http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
            async for e in sse_events(response):
                first.append(e)
                if sum(1 for x in first if x.event == "model_delta") == 3 and not late:
                    joiner.set()

    joiner = asyncio.Event()
    reader = asyncio.create_task(read_first())
    await asyncio.wait_for(joiner.wait(), 30)
    late = await stream(api, run_id)  # joins mid-step
    await reader
    snapshot = next(e for e in late if e.event == "model_delta")
    assert snapshot.data["snapshot"] is True and snapshot.data["text"] and final.startswith(snapshot.data["text"])
    assert len(snapshot.data["text"]) < len(final)  # it really joined mid-answer
    assert attempts(late)[(1, 1)] == final == attempts(first)[(1, 1)]
    assert [e.id for e in late if e.id] == [e.id for e in first if e.id]  # the same log, start to end


agui = TypeAdapter(Event)


async def test_the_agui_mapping_of_a_streamed_and_a_scripted_run(api: ApiServer, worker, fake_openai: FakeOpenAI):
    fake_openai.answer(
        Turn(tool_calls=[("add", {"a": 20, "b": 22})], chunk_delay=0.01),
        Turn(content="20 + 22 is 42.", chunk_delay=0.01),
    )
    run_id = await start(api, "add 20 and 22")
    events = [agui.validate_python(e.data) for e in await stream(api, run_id, format="agui")]
    types = [e.type.value for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert events[-1].result["output"] == "20 + 22 is 42."
    assert types.count("STEP_STARTED") == types.count("STEP_FINISHED") == 2
    for opening, closing in (("TEXT_MESSAGE_START", "TEXT_MESSAGE_END"), ("TOOL_CALL_START", "TOOL_CALL_END")):
        assert types.count(opening) == types.count(closing) >= 1
    args = "".join(e.delta for e in events if e.type.value == "TOOL_CALL_ARGS")
    assert args == '{"a": 20, "b": 22}'
    result = next(e for e in events if e.type.value == "TOOL_CALL_RESULT")
    start_call = next(e for e in events if e.type.value == "TOOL_CALL_START")
    assert (result.content, result.tool_call_id, start_call.tool_call_name) == ("42", start_call.tool_call_id, "add")
    text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert text == "20 + 22 is 42."
    assert any(e.type.value == "STATE_SNAPSHOT" and e.snapshot["status"] == "completed" for e in events)

    scripted = (await api.http.post("/v1/runs", json={"task": "add", "agent": "calculator"})).json()["run_id"]
    events = [agui.validate_python(e.data) for e in await stream(api, scripted, format="agui")]
    types = [e.type.value for e in events]
    assert types.count("TOOL_CALL_RESULT") == 3 and types[-1] == "RUN_FINISHED"
    assert "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT") == "The answer is 15."
