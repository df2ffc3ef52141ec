"""`anthropic:` runs on the real stack, through the official `anthropic` SDK, against the fake Messages
API server (waypoint.testing.fake_anthropic) on a real port: tool calls, live deltas, the retry rules
(529 with retry-after, 400, a garbage 200, a cut stream), thinking blocks sent back verbatim, cache
breakpoints and cache usage, the key of an agent's provider_key_env, a missing key refused at start."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select
from temporalio.client import Client

from tests.agents import TEST_AGENTS, add
from tests.conftest import ApiServer
from tests.helpers import one_line_error, sse_events, waypoint
from waypoint import Agent
from waypoint.agents import AgentRegistry
from waypoint.client import Waypoint
from waypoint.demo import demo as demo_agent
from waypoint.demo import seed_workspace
from waypoint.errors import ConfigError
from waypoint.models.anthropic import anthropic_messages
from waypoint.store.schema import events
from waypoint.testing.fake_anthropic import ClaudeTurn, FakeAnthropic, Reply, sent_key, signature_of
from waypoint.transcript import chat_messages
from waypoint.types import RetrySpec

pytestmark = pytest.mark.postgres

DEFAULT_KEY = "sk-ant-default-0123456789"
TEAM_KEY = "sk-ant-team-9876543210"

claude = Agent(
    name="claude",
    instructions="You add numbers with the add tool.",
    model="anthropic:claude-sonnet-4-6",
    tools=(add,),
    model_retry=RetrySpec(initial_interval_seconds=0.1),  # backoff stays short; a retry-after is honoured
)
claude_team = Agent(
    name="claude_team",
    instructions="You add numbers for the team.",
    model="anthropic:claude-haiku-4-5",
    tools=(add,),
    provider_key_env="CLAUDE_TEAM_KEY",
)
claude_nokey = Agent(
    name="claude_nokey",
    instructions="Its key variable is never set.",
    model="anthropic:claude-haiku-4-5",
    provider_key_env="CLAUDE_KEY_NOBODY_SET",
)


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([demo_agent, *TEST_AGENTS, claude, claude_team, claude_nokey])


@pytest.fixture
def fake_anthropic(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """The fake server, with the worker's environment pointing at it (ask for it before `worker`:
    the worker reads the keys when it registers which providers it can call)."""
    server = FakeAnthropic(min_cached_tokens=0).start()  # these prompts are under Sonnet's 1,024-token minimum
    for name in ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CUSTOM_HEADERS", "CLAUDE_KEY_NOBODY_SET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", DEFAULT_KEY)
    monkeypatch.setenv("CLAUDE_TEAM_KEY", TEAM_KEY)
    yield server
    server.stop()


async def run_events(engine, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.kind, events.c.payload).where(events.c.run_id == run_id).order_by(events.c.seq)
        )
        return [(kind, payload) for kind, payload in rows]


overloaded = Reply(529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


async def test_demo_run_with_tool_calls(fake_anthropic, client: Client, engine, settings, worker):
    seed_workspace(settings.resolved_workspace)
    fake_anthropic.answer(
        ClaudeTurn(content="Let me look.", tool_calls=[("list_files", {"folder": "notes"})]),
        ClaudeTurn(tool_calls=[("read_file", {"path": "notes/memory.txt"}), ("word_stats", {"text": "a b c"})]),
        ClaudeTurn(content="Memory lives in Qdrant.", completion_tokens=9),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("what is in the notes?", agent="demo", model="anthropic:claude-haiku-4-5")
    result = await wp.result(run_id)

    assert (result.status, result.steps, result.output) == ("completed", 3, "Memory lives in Qdrant.")
    first, second, third = (s.body for s in fake_anthropic.seen)
    assert first["model"] == "claude-haiku-4-5" and first["stream"] is True
    assert first["system"][0]["text"] == demo_agent.instructions
    task = {"type": "text", "text": "what is in the notes?", "cache_control": {"type": "ephemeral"}}
    assert first["messages"] == [{"role": "user", "content": [task]}]
    assert {t["name"] for t in first["tools"]} == {"list_files", "read_file", "word_stats", "write_file"}
    assert "ctx" not in json.dumps(first["tools"])  # the ToolContext parameter stays hidden
    assert all("input_schema" in t for t in first["tools"])
    # the tool call went back as tool_use, its result as a tool_result of the next user turn
    assistant, results = second["messages"][1:]
    assert assistant["content"][0] == {"type": "text", "text": "Let me look."}
    assert assistant["content"][1]["type"] == "tool_use" and assistant["content"][1]["input"] == {"folder": "notes"}
    (result_block,) = results["content"]
    assert result_block["tool_use_id"] == "toolu_1_0" and "memory.txt" in result_block["content"]
    # two parallel calls: both results in one user turn, in order
    last = third["messages"][-1]
    assert [b["tool_use_id"] for b in last["content"]] == ["toolu_2_0", "toolu_2_1"]
    assert "Qdrant" in last["content"][0]["content"]
    kinds = [k for k, _ in await run_events(engine, run_id)]
    assert kinds.count("model_response") == 3 and kinds.count("tool_result") == 3
    assert (await wp.run(run_id)).model == "anthropic:claude-haiku-4-5"


async def test_529_with_retry_after_is_retried_after_the_wait(fake_anthropic, client, engine, settings, worker):
    fake_anthropic.answer(
        Reply(529, overloaded.body, {"retry-after": "1"}), Reply(529, overloaded.body, {"retry-after": "1"})
    )
    fake_anthropic.answer(ClaudeTurn(content="fine"))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="claude")
    result = await wp.result(run_id)

    assert (result.status, result.output) == ("completed", "fine")
    seen = fake_anthropic.seen
    assert len(seen) == 3
    assert seen[1].at - seen[0].at >= 0.9 and seen[2].at - seen[1].at >= 0.9  # the retry-after was honoured
    failures = [p for k, p in await run_events(engine, run_id) if k == "model_attempt_failed"]
    assert [(p["attempt"], p["status"], p["retry_in_seconds"]) for p in failures] == [(1, 529, 1.0), (2, 529, 1.0)]
    assert all("Overloaded" in p["error"] and p["retryable"] for p in failures)


async def test_400_fails_the_run_at_once_with_the_providers_message(fake_anthropic, client, engine, settings, worker):
    fake_anthropic.answer(
        Reply(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}})
    )
    wp = Waypoint(client, engine, settings)
    result = await wp.result(await wp.start_run("hi", agent="claude"))
    assert result.status == "failed"
    assert "HTTP 400" in result.error and "prompt is too long" in result.error
    assert len(fake_anthropic.seen) == 1  # never retried


async def test_a_garbage_200_a_cut_stream_and_an_error_event_are_retried(
    fake_anthropic, client, engine, settings, worker
):
    fake_anthropic.answer(
        Reply(200, "<html>upstream proxy error</html>"),
        ClaudeTurn(content="a partial answer that never ends", cut_after=5),
        ClaudeTurn(stream_error="overloaded_error"),  # a 200 stream that says overloaded
        ClaudeTurn(content="whole"),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="claude")
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "whole")
    failures = [p for k, p in await run_events(engine, run_id) if k == "model_attempt_failed"]
    assert [(p["type"], p["status"]) for p in failures] == [
        ("MalformedAnswer", 200),
        ("ModelUnavailable", None),
        ("ModelUnavailable", 529),
    ]
    assert "upstream proxy error" in failures[0]["error"] and "message_stop" in failures[1]["error"]


async def test_thinking_blocks_go_back_verbatim_with_cache_breakpoints_and_cache_usage(
    fake_anthropic, client, engine, settings, worker
):
    thought = "The user wants 2 + 3.\nI will call add — then answer. ✓"
    fake_anthropic.answer(
        ClaudeTurn(thinking=thought, redacted_thinking="EncryptedBlob==", tool_calls=[("add", {"a": 2, "b": 3})]),
        ClaudeTurn(tool_calls=[("add", {"a": 5, "b": 1})]),
        ClaudeTurn(content="6"),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add 2 and 3, then 1", agent="claude")
    assert (await wp.result(run_id)).output == "6"

    first, second, third = (s.body for s in fake_anthropic.seen)
    sent_back = second["messages"][1]
    assert sent_back["role"] == "assistant"
    # the fake refuses an altered signature with a 400: the run completing says as much; the blocks are the same
    assert sent_back["content"][0] == {"type": "thinking", "thinking": thought, "signature": signature_of(thought)}
    assert sent_back["content"][1] == {"type": "redacted_thinking", "data": "EncryptedBlob=="}
    assert sent_back["content"][2]["type"] == "tool_use" and sent_back["content"][2]["id"] == "toolu_1_0"
    assert third["messages"][1]["content"][:2] == sent_back["content"][:2]  # and in every later call

    # breakpoints: the system prompt (which caches the tools before it), the last block, and the last
    # block before the newest assistant turn (where the previous request ended)
    def marked(body: dict) -> list[tuple[int, int]]:
        return [
            (n, i) for n, m in enumerate(body["messages"]) for i, b in enumerate(m["content"]) if "cache_control" in b
        ]

    for body in (first, second, third):
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert "cache_control" not in body["tools"][-1]
    assert marked(first) == [(0, 0)]  # the task
    assert marked(second) == [(0, 0), (2, 0)]  # the task, the tool result
    assert marked(third) == [(2, 0), (4, 0)]  # the first tool result, the newest one
    assert "cache_control" not in sent_back["content"][0]  # thinking blocks stay as they came

    usage = [p["usage"] for k, p in await run_events(engine, run_id) if k == "model_response"]
    assert usage[0]["cache_read_tokens"] == 0 and usage[0]["cache_write_tokens"] > 0
    assert usage[1]["cache_read_tokens"] == usage[0]["cache_write_tokens"]  # tools and system, read back
    assert usage[2]["cache_read_tokens"] > usage[1]["cache_read_tokens"]  # plus the turn marked in call 2
    stats = fake_anthropic.stats()
    for u, s in zip(usage, stats, strict=True):
        assert u["input_tokens"] == s["tokens"]  # all input, cached included
        assert (u["cache_read_tokens"], u["cache_write_tokens"]) == (s["cache_read_tokens"], s["cache_write_tokens"])
    assert stats[0]["repeated_share"] == 0 and 0 < stats[1]["repeated_share"] < 1


async def test_the_agents_key_variable_is_used_and_never_recorded(
    fake_anthropic, client, engine, settings, worker, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    fake_anthropic.api_key = TEAM_KEY  # any other key gets the API's 401
    fake_anthropic.answer(ClaudeTurn(tool_calls=[("add", {"a": 1, "b": 2})]), ClaudeTurn(content="3"))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("1 + 2", agent="claude_team")
    assert (await wp.result(run_id)).output == "3"
    assert [sent_key(s.headers) for s in fake_anthropic.seen] == [TEAM_KEY, TEAM_KEY]
    # The SDK in use carries the key as a bearer token, as the adapter's docstring says.
    assert fake_anthropic.seen[0].headers["authorization"] == f"Bearer {TEAM_KEY}"
    assert "x-api-key" not in fake_anthropic.seen[0].headers

    fake_anthropic.answer(ClaudeTurn(content="never"))
    refused = await wp.result(await wp.start_run("hi", agent="claude"))  # ANTHROPIC_API_KEY: the wrong key
    assert refused.status == "failed" and "HTTP 401" in refused.error
    everything = json.dumps(await run_events(engine, run_id)) + caplog.text + refused.error
    assert TEAM_KEY not in everything and DEFAULT_KEY not in everything


async def test_deltas_reach_the_live_stream(fake_anthropic, api: ApiServer, worker):
    answer = "Streamed from Claude, word by word."
    fake_anthropic.answer(
        ClaudeTurn(content="Adding.", tool_calls=[("add", {"a": 40, "b": 2})], chunk_delay=0.01),
        ClaudeTurn(content=answer, chunk_delay=0.01),
    )
    r = await api.http.post("/v1/runs", json={"task": "40 + 2", "agent": "claude"})
    assert r.status_code == 201, r.text
    async with api.http.stream("GET", f"/v1/runs/{r.json()['run_id']}/stream") as response:
        streamed = [e async for e in sse_events(response)]
    said: dict[int, str] = {}
    for e in streamed:
        if e.event == "model_delta":
            step = e.data["step"]
            said[step] = e.data["text"] if e.data["snapshot"] else said.get(step, "") + e.data["text"]
    assert said == {1: "Adding.", 2: answer}
    final = [e for e in streamed if e.event == "model_response"]
    assert [e.data["payload"]["content"] for e in final] == ["Adding.", answer]
    assert final[0].data["payload"]["tool_calls"][0]["arguments"] == '{"a": 40, "b": 2}'


async def test_a_missing_key_is_refused_at_start_in_one_line(fake_anthropic, client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    with pytest.raises(ConfigError, match="CLAUDE_KEY_NOBODY_SET|ANTHROPIC_API_KEY"):
        await wp.start_run("hi", agent="claude_nokey")
    line = one_line_error(await waypoint(settings, "run", "hi", "--agent", "claude_nokey", "--model", "anthropic:x"))
    assert "anthropic" in line and "export it where the worker runs" in line
    assert fake_anthropic.seen == []


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def test_chat_messages_become_anthropic_turns():
    blocks = [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "tool_use", "id": "c1", "name": "add"}]
    bad_call = {"id": "c2", "function": {"name": "x", "arguments": "not json"}}
    messages = [
        {"role": "system", "content": "instructions"},
        {"role": "user", "content": "task"},
        {"role": "system", "content": "Decisions pinned earlier"},  # after the task: stays in place, as user text
        {"role": "assistant", "content": None, "tool_calls": [], "provider_blocks": {"anthropic": blocks}},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "user", "content": "and now?"},  # sent since the last step: joins the tool results' turn
        {"role": "assistant", "content": ""},  # an empty answer says nothing, and the API refuses it
        {"role": "assistant", "content": "ok", "tool_calls": [bad_call]},
    ]
    system, converted = anthropic_messages(messages)
    assert system == [text("instructions")]
    assert converted == [
        {"role": "user", "content": [text("task"), text("Decisions pinned earlier")]},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "3"}, text("and now?")]},
        {"role": "assistant", "content": [text("ok"), {"type": "tool_use", "id": "c2", "name": "x", "input": {}}]},
    ]
    converted[1]["content"][1]["cache_control"] = {"type": "ephemeral"}
    assert "cache_control" not in blocks[1]  # the stored blocks are copied, never marked
    # other providers never see the blocks
    assert "provider_blocks" not in chat_messages(messages)[3] and "provider_blocks" in messages[3]
