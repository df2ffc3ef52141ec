"""Runs on `google:` models, driven through the official google-genai SDK against the fake Gemini
server (waypoint.testing.fake_gemini) on a real port, on the real stack."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from temporalio.client import Client

from tests.agents import TEST_AGENTS, add
from tests.helpers import sse_events
from waypoint import Agent
from waypoint.agents import AgentRegistry
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import demo as demo_agent
from waypoint.errors import ConfigError
from waypoint.models.google import SKIP_SIGNATURE, gemini_contents, make_adapter
from waypoint.store.schema import events
from waypoint.testing.fake_gemini import SIGNATURE, FakeGemini, rpc_error
from waypoint.testing.fake_openai import Reply, Turn
from waypoint.types import RetrySpec

pytestmark = pytest.mark.postgres

KEY = "gemini-test-key-0123456789"  # the worker's GEMINI_API_KEY
AGENT_KEY = "agent-own-key-9876543210"  # the keyed agent's provider_key_env
FAST = RetrySpec(initial_interval_seconds=0.1, max_interval_seconds=0.5)

gemini = Agent(
    name="gemini", instructions="You add numbers.", model="google:gemini-2.5-flash", tools=(add,), model_retry=FAST
)
keyed = Agent(
    name="gemini_keyed",
    instructions="You add numbers.",
    model="google:gemini-2.5-flash",
    tools=(add,),
    provider_key_env="GEMINI_TEST_AGENT_KEY",
)
keyless = Agent(
    name="gemini_keyless", instructions="No key.", model="google:gemini-2.5-flash", provider_key_env="GEMINI_TEST_NONE"
)


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([demo_agent, *TEST_AGENTS, gemini, keyed, keyless])


@pytest.fixture(autouse=True)
def fake_gemini(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGemini]:
    """The fake on a real port, and the worker's environment pointing at it (set before the worker starts)."""
    server = FakeGemini(api_key=KEY, min_cached_tokens=0).start()
    for name in ("GOOGLE_API_KEY", "GEMINI_TEST_NONE", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_TEST_AGENT_KEY", AGENT_KEY)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.base_url)
    yield server
    server.stop()


async def run_events(engine, run_id: str) -> list[tuple[str, dict]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.kind, events.c.payload).where(events.c.run_id == run_id).order_by(events.c.seq)
        )
        return [(kind, payload) for kind, payload in rows]


async def test_a_gemini_run_with_tool_calls(client: Client, engine, settings, worker, fake_gemini: FakeGemini):
    fake_gemini.answer(
        Turn(tool_calls=[("add", {"a": 20, "b": 22}), ("add", {"a": 1, "b": 1})]),
        Turn(content="20 + 22 = 42", completion_tokens=8),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("What is 20 + 22?", agent="gemini")
    result = await wp.result(run_id)

    assert (result.status, result.steps, result.output) == ("completed", 2, "20 + 22 = 42")
    first, second = fake_gemini.seen
    assert first.path == "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert first.headers["x-goog-api-key"] == KEY
    declaration = first.body["tools"][0]["functionDeclarations"][0]
    schema = declaration.get("parametersJsonSchema") or declaration["parameters_json_schema"]
    assert (declaration["name"], schema["required"]) == ("add", ["a", "b"])
    assert first.body["systemInstruction"]["parts"][0]["text"].startswith("You add numbers.")
    assert [c["role"] for c in first.body["contents"]] == ["user"]
    # the second call carries the model's calls (the first with the thought signature the model gave it,
    # byte for byte, from the log) and both results
    model_turn, results = second.body["contents"][-2:]
    assert model_turn["role"] == "model" and results["role"] == "user"
    assert [p["functionCall"]["args"] for p in model_turn["parts"]] == [{"a": 20, "b": 22}, {"a": 1, "b": 1}]
    assert model_turn["parts"][0]["thoughtSignature"] == SIGNATURE and "thoughtSignature" not in model_turn["parts"][1]
    assert [(p["functionResponse"]["name"], p["functionResponse"]["response"]) for p in results["parts"]] == [
        ("add", {"result": "42"}),
        ("add", {"result": "2"}),
    ]
    logged = await run_events(engine, run_id)
    assert [kind for kind, _ in logged] == [
        "run_started",
        "model_response",
        "tool_result",
        "tool_result",
        "model_response",
        "run_finished",
    ]
    # ids synthesized per step and position, and results matched to them
    responses = [p for kind, p in logged if kind == "model_response"]
    assert [c["id"] for c in responses[0]["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [p["call_id"] for kind, p in logged if kind == "tool_result"] == ["call_1_0", "call_1_1"]
    # usage as the server reported it, the second call reading the first's prefix from the cache
    stats = fake_gemini.stats()["per_request"]
    assert stats[1]["cached_tokens"] > 0
    assert [r["usage"]["input_tokens"] for r in responses] == [s["prompt_tokens"] for s in stats]
    assert [r["usage"]["cache_read_tokens"] for r in responses] == [s["cached_tokens"] for s in stats]
    assert [r["usage"]["output_tokens"] for r in responses] == [7, 8]
    assert (responses[0]["finish_reason"], responses[1]["finish_reason"]) == ("tool_calls", "stop")
    assert responses[1]["cost_usd"] > 0  # gemini-2.5-flash is in the price table


async def test_the_demo_agent_on_a_google_model(client: Client, engine, settings, worker, fake_gemini: FakeGemini):
    fake_gemini.answer(Turn(content="nothing to do"))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("look around", agent="demo", model="google:gemini-2.5-pro")
    assert (await wp.result(run_id)).status == "completed"
    assert "gemini-2.5-pro:" in fake_gemini.seen[0].path
    declarations = fake_gemini.seen[0].body["tools"][0]["functionDeclarations"]
    assert {d["name"] for d in declarations} == {"list_files", "read_file", "word_stats", "write_file"}
    assert "ctx" not in json.dumps(declarations)  # the ToolContext parameter stays hidden from the model
    assert (await wp.run(run_id)).model == "google:gemini-2.5-pro"


async def test_deltas_reach_the_live_stream(api, worker, fake_gemini: FakeGemini):
    answer = "Forty two, streamed word by word from Gemini."
    fake_gemini.answer(Turn(content=answer, chunk_delay=0.02))
    r = await api.http.post("/v1/runs", json={"task": "say it", "agent": "gemini"})
    assert r.status_code == 201, r.text
    async with api.http.stream("GET", f"/v1/runs/{r.json()['run_id']}/stream") as response:
        streamed = [e async for e in sse_events(response)]
    deltas = [e.data["text"] for e in streamed if e.event == "model_delta"]
    assert len(deltas) > 1 and "".join(deltas) == answer
    assert streamed[-1].event == "run_finished" and streamed[-1].data["payload"]["output"] == answer


async def test_a_429_waits_the_retry_delay_it_names(client: Client, engine, settings, worker, fake_gemini):
    fake_gemini.answer(
        rpc_error(429, "Quota exceeded for metric generate_content", retry_delay="1s"), Turn(content="ok")
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="gemini")
    assert (await wp.result(run_id)).output == "ok"
    failed = [p for kind, p in await run_events(engine, run_id) if kind == "model_attempt_failed"]
    assert [(p["status"], p["retryable"], p["retry_in_seconds"]) for p in failed] == [(429, True, 1.0)]
    assert "RESOURCE_EXHAUSTED" in failed[0]["error"] and "Quota exceeded" in failed[0]["error"]
    first, second = fake_gemini.seen
    assert second.at - first.at >= 0.95  # the retry waited what the provider asked, not the agent's 0.1 s backoff


async def test_503_garbage_and_a_cut_stream_are_retried(client: Client, engine, settings, worker, fake_gemini):
    fake_gemini.answer(
        rpc_error(503, "The model is overloaded. Please try again later."),
        Reply(200, "<html><body>502 Bad Gateway</body></html>"),
        Turn(content="a partial answer that never finishes", cut_after=2),
        rpc_error(500),
        Turn(content="complete"),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="gemini")
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "complete")
    failed = [p for kind, p in await run_events(engine, run_id) if kind == "model_attempt_failed"]
    assert [(p["attempt"], p["type"], p["status"]) for p in failed] == [
        (1, "ModelUnavailable", 503),
        (2, "MalformedAnswer", 200),
        (3, "ModelUnavailable", None),
        (4, "ModelUnavailable", 500),
    ]
    assert "UNAVAILABLE" in failed[0]["error"] and "502 Bad Gateway" in failed[1]["error"]
    assert "ended before the model finished" in failed[2]["error"]
    assert len(fake_gemini.seen) == 5


async def test_400_fails_the_run_at_once_with_the_providers_message(
    client: Client, engine, settings, worker, fake_gemini
):
    fake_gemini.answer(rpc_error(400, 'Invalid JSON payload received. Unknown name "bogus": Cannot find field.'))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="gemini")
    result = await wp.result(run_id, tenant_id=settings.tenant)
    assert result.status == "failed"
    assert "HTTP 400" in result.error and "INVALID_ARGUMENT" in result.error and "Unknown name" in result.error
    assert len(fake_gemini.seen) == 1  # never retried


async def test_the_agents_own_key_is_used_and_never_logged(
    client: Client, engine, settings, worker, fake_gemini: FakeGemini, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    fake_gemini.api_key = AGENT_KEY
    fake_gemini.answer(rpc_error(503), Turn(tool_calls=[("add", {"a": 1, "b": 2})]), Turn(content="3"))
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("1 + 2?", agent="gemini_keyed")
    assert (await wp.result(run_id)).output == "3"
    assert {s.headers["x-goog-api-key"] for s in fake_gemini.seen} == {AGENT_KEY}
    assert not fake_gemini.rejected
    logged = json.dumps(await run_events(engine, run_id))
    assert "model_attempt_failed" in logged  # a failure was recorded, and even it holds no key
    for secret in (AGENT_KEY, KEY):
        assert secret not in logged and secret not in caplog.text
        assert all(secret not in s.path and secret not in json.dumps(s.body) for s in fake_gemini.seen)


async def test_a_wrong_key_fails_the_run_with_googles_reason(client: Client, engine, settings, worker, fake_gemini):
    fake_gemini.api_key = "some-other-key"
    wp = Waypoint(client, engine, settings)
    result = await wp.result(await wp.start_run("hi", agent="gemini"), tenant_id=settings.tenant)
    assert result.status == "failed" and "API key not valid" in result.error and KEY not in result.error
    assert len(fake_gemini.rejected) == 1


async def test_a_missing_key_refuses_the_start_in_one_line(client: Client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    with pytest.raises(ConfigError) as refused:
        await wp.start_run("hi", agent="gemini_keyless")
    assert "google" in str(refused.value) and "\n" not in str(refused.value)
    # and a worker asked anyway says which variable to set
    with pytest.raises(ConfigError, match="GEMINI_TEST_NONE is not set") as missing:
        make_adapter(Settings(), "gemini-2.5-flash", "GEMINI_TEST_NONE", {})
    assert "\n" not in str(missing.value)


def test_messages_become_gemini_contents():
    system, contents = gemini_contents(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Add 1 and 2, then 3 and 4."},
            {"role": "system", "content": "Recalled from long-term memory: nothing."},
            {
                "role": "assistant",
                "content": "Adding.",
                "tool_calls": [
                    {"id": "call_1_0", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}},
                    {"id": "call_1_1", "type": "function", "function": {"name": "sub", "arguments": "not json"}},
                ],
            },
            {"role": "tool", "tool_call_id": "call_1_0", "content": "3"},
            {"role": "tool", "tool_call_id": "call_1_1", "content": "oops"},
        ]
    )
    assert system == "Be brief."
    # a later system message joins the user's turn: turns alternate user, model, user
    assert [(c.role, len(c.parts or [])) for c in contents] == [("user", 2), ("model", 3), ("user", 2)]
    model_parts = contents[1].parts or []
    assert model_parts[0].text == "Adding." and model_parts[1].thought_signature == SKIP_SIGNATURE
    assert [p.function_call.args for p in model_parts[1:] if p.function_call] == [{"a": 1, "b": 2}, {}]
    responses = [p.function_response for p in contents[2].parts or [] if p.function_response]
    assert [(r.name, r.response) for r in responses] == [("add", {"result": "3"}), ("sub", {"result": "oops"})]
