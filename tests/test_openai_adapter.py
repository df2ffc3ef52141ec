"""Runs driven over HTTP by the `openai` adapter against a local fake chat-completions server."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from temporalio.client import Client

from waypoint.client import Waypoint
from waypoint.store.schema import events
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn

pytestmark = pytest.mark.postgres


async def test_openai_run_with_tool_calls(client: Client, engine, settings, worker, fake_openai: FakeOpenAI):
    fake_openai.answer(
        Turn(tool_calls=[("add", {"a": 20, "b": 22}), ("add", {"a": 1, "b": 1})]),
        Turn(content="20 + 22 = 42", prompt_tokens=90, completion_tokens=8),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("What is 20 + 22?", agent="remote")
    result = await wp.result(run_id)

    assert (result.status, result.steps, result.output) == ("completed", 2, "20 + 22 = 42")
    assert (result.input_tokens, result.output_tokens) == (11 + 90, 7 + 8)  # usage as the server reported it
    first, second = fake_openai.seen
    assert first.headers["authorization"] == "Bearer test-key"
    assert first.body["model"] == "fake-model"
    assert first.body["tools"][0]["function"]["name"] == "add"
    assert first.body["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    # the second call carries the assistant's tool calls and both real results
    tool_messages = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("call_1_0", "42"), ("call_1_1", "2")]
    async with engine.connect() as conn:
        kinds = (
            await conn.execute(select(events.c.kind).where(events.c.run_id == run_id).order_by(events.c.seq))
        ).scalars()
        assert list(kinds) == [
            "run_started",
            "model_response",
            "tool_result",
            "tool_result",
            "model_response",
            "run_finished",
        ]


async def test_503_is_retried_and_the_run_completes(client: Client, engine, settings, worker, fake_openai: FakeOpenAI):
    busy = Reply(503, {"error": {"message": "overloaded", "type": "server_error"}}, {"retry-after-ms": "10"})
    fake_openai.answer(busy, busy, Turn(content="fine"))
    wp = Waypoint(client, engine, settings)
    result = await wp.result(await wp.start_run("hi", agent="remote"))
    assert (result.status, result.output) == ("completed", "fine")
    assert len(fake_openai.seen) == 3  # two 503s over the socket, then the answer


async def test_401_fails_the_run_at_once_with_the_reason(client: Client, engine, settings, worker, fake_openai):
    fake_openai.answer(
        Reply(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote")
    result = await wp.result(run_id, tenant_id=settings.tenant)
    assert result.status == "failed"
    assert "HTTP 401" in result.error and "Incorrect API key" in result.error
    assert len(fake_openai.seen) == 1  # never retried


async def test_model_override_sends_the_demo_tools_to_a_real_endpoint(client, engine, settings, worker, fake_openai):
    fake_openai.answer(Turn(content="nothing to do"))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("look around", agent="demo", model="openai:other-model")
    assert (await wp.result(run_id)).status == "completed"
    assert fake_openai.seen[0].body["model"] == "other-model"
    assert {t["function"]["name"] for t in fake_openai.seen[0].body["tools"]} == {
        "list_files",
        "read_file",
        "word_stats",
        "write_file",
    }
    # the ToolContext parameter stays hidden from the model
    assert "ctx" not in str(fake_openai.seen[0].body["tools"])
    assert (await wp.run(run_id)).model == "openai:other-model"
