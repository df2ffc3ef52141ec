"""Tools from real MCP servers (tests/mcp_server.py, written with the SDK's server API) over stdio
and streamable HTTP, as tool calls of a run: listed and recorded at the start, called through
run_tool and its ledger, errors told to the model, retries, approvals, spans."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.agents import add
from tests.helpers import eventually
from tests.mcp_agents import alive, http_server, lines, serving_http, stdio_server
from waypoint import Agent, ScriptedModel, ScriptedTurn, telemetry
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.mcp import MCPServer
from waypoint.store import RunStore
from waypoint.store.schema import tool_effects
from waypoint.telemetry.spanfile import span_dict
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.working_memory import without_recalled

pytestmark = pytest.mark.postgres

SECRET = "sk-test-MCPHEADER123456789"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "mcp"


@pytest.fixture
def web(folder: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with serving_http(folder) as served:
        yield served


async def ledger(engine: AsyncEngine, run_id: str) -> list[Any]:
    async with engine.connect() as conn:
        query = select(tool_effects).where(tool_effects.c.run_id == run_id).order_by(tool_effects.c.call_index)
        return list((await conn.execute(query)).all())


async def _has_effect(engine: AsyncEngine, run_id: str, tool: str) -> bool:
    return any(e.tool == tool for e in await ledger(engine, run_id))


def tool_messages(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_run_uses_tools_of_stdio_and_http_servers(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    fake_openai: FakeOpenAI,
    folder: Path,
    web: tuple[str, subprocess.Popen[bytes]],
):
    url, web_process = web
    spans = InMemorySpanExporter()
    telemetry.setup(settings, exporter=spans)
    agent = Agent(
        name="mcp_user",
        instructions="Use the tools.",
        model="openai:fake-model",
        tools=(add,),
        mcp=[
            stdio_server(folder, namespace="local"),
            http_server(url, namespace="web", tools=["multiply", "add"], headers={"Authorization": f"Bearer {SECRET}"}),
        ],
    )
    fake_openai.answer(
        Turn(
            tool_calls=[
                ("local_multiply", {"a": 6, "b": 7}),
                ("web_multiply", {"a": 2, "b": 5}),
                ("local_refuse", {"reason": "not today"}),
                ("local_multiply", {"a": "six", "b": 7}),
                ("local_record", {"text": "hello", "seconds": 2}),
            ]
        ),
        Turn(tool_calls=[("local_multiply", {"a": 1, "b": 1})]),
        Turn(content="all done"),
    )
    async with build_worker(client, engine, settings, AgentRegistry([agent])):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("use the tools", agent="mcp_user")
        # Step 1 is still busy recording: stop the HTTP server. The run recorded its tools at the
        # start, so the next model call still knows them, and nothing asks the server again.
        await eventually(lambda: _has_effect(engine, run_id, "web_multiply"), what="the HTTP tool's answer")
        await eventually(lambda: asyncio.to_thread((folder / "record-running-hello").exists), what="record started")
        web_process.terminate()
        await asyncio.to_thread(web_process.wait, 10)
        result = await wp.result(run_id)
        started_pids = [line["pid"] for line in lines(folder, "started") if not line["argv"]]
    assert (result.status, result.output) == ("completed", "all done"), result.error

    first, second = fake_openai.seen[0].body, fake_openai.seen[1].body
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == ["add", "local_multiply", "local_add", "local_record", "local_refuse", "local_flaky"] + [
        "local_dawdle",
        "local_report",
        "web_multiply",
        "web_add",
    ]
    multiply = next(t["function"] for t in first["tools"] if t["function"]["name"] == "local_multiply")
    assert multiply["description"] == "Multiply two integers."
    assert multiply["parameters"]["properties"]["a"]["type"] == "integer"
    assert second["tools"] == first["tools"]  # the recorded schemas, with the HTTP server gone

    assert tool_messages(second) == [
        "42",
        "10",
        "error: Error executing tool refuse: refused: not today",
        "error: invalid arguments for local_multiply: a: 'six' is not of type 'integer'",
        "recorded hello",
    ]
    effects = await ledger(engine, run_id)
    assert [(e.step, e.tool, e.outcome) for e in effects if e.step == 1] == [
        (1, "local_multiply", "ok"),
        (1, "web_multiply", "ok"),
        (1, "local_refuse", "tool_error"),
        (1, "local_multiply", "bad_call"),
        (1, "local_record", "ok"),
    ]
    # The idempotency key reached the server in the request's _meta.
    calls = lines(folder, "calls")
    assert {(c["tool"], c["key"]) for c in calls} >= {("multiply", f"{run_id}:1:0"), ("record", f"{run_id}:1:4")}
    assert [e["key"] for e in lines(folder, "effects")] == [f"{run_id}:1:4"]

    started = await RunStore(engine).run_started(settings.tenant, run_id)
    assert started is not None
    recorded = {t["name"]: t for t in started["mcp_tools"]}
    assert recorded["web_multiply"]["server"] == "web" and recorded["web_multiply"]["remote"] == "multiply"
    assert {s["name"] for s in started["plan"]["tools"]} == {"add", *recorded}
    # No configuration is recorded: not in Postgres, not in Temporal history.
    history = (await client.get_workflow_handle(run_id).fetch_history()).to_json()
    export = "".join([line async for line in wp.export(run_id)])
    for text in (str(started), history, export):
        assert SECRET not in text and "MCP_TEST_DIR" not in text and "inputSchema" not in history

    telemetry.current().force_flush()
    tool_spans = [span_dict(s) for s in spans.get_finished_spans() if s.name == "execute_tool web_multiply"]
    assert tool_spans and tool_spans[0]["attributes"]["waypoint.mcp_server"] == "web"
    # The worker stopped the stdio server it started.
    assert started_pids and not any(alive(pid) for pid in started_pids)


async def test_a_name_clash_fails_the_start_and_names_the_fix(
    client: Client, engine: AsyncEngine, settings: Settings, folder: Path
):
    clash = Agent(
        name="clash",
        instructions="-",
        model=ScriptedModel([ScriptedTurn(content="never")]),
        tools=(add,),
        mcp=[stdio_server(folder)],
    )
    async with build_worker(client, engine, settings, AgentRegistry([clash])):
        wp = Waypoint(client, engine, settings)
        result = await wp.result(await wp.start_run("go", agent="clash"))
    assert result.status == "failed"
    assert "the tool name 'add' is in its own tools and in MCP server 'local'" in (result.error or "")
    assert "namespace" in (result.error or "")


async def test_a_server_that_does_not_answer_fails_the_start_with_its_command_or_url(
    client: Client, engine: AsyncEngine, settings: Settings
):
    script = "import sys; print('cannot open tools.toml', file=sys.stderr); sys.exit(2)"
    broken = MCPServer.stdio(sys.executable, ["-c", script], name="broken")
    nowhere = MCPServer.http(f"http://127.0.0.1:{_closed_port()}/mcp", name="nowhere", connect_timeout=5)
    model = ScriptedModel([ScriptedTurn(content="never")])
    agents = AgentRegistry(
        [
            Agent(name="with_broken", instructions="-", model=model, mcp=[broken]),
            Agent(name="with_nowhere", instructions="-", model=model, mcp=[nowhere]),
        ]
    )
    async with build_worker(client, engine, settings, agents):
        wp = Waypoint(client, engine, settings)
        stdio = await wp.result(await wp.start_run("go", agent="with_broken"))
        http = await wp.result(await wp.start_run("go", agent="with_nowhere"))
    assert stdio.status == "failed" and "could not start" in (stdio.error or "")
    assert "it closed the connection before answering initialize" in (stdio.error or "")
    assert f"command {sys.executable} -c" in (stdio.error or "")
    assert "its stderr ends with: cannot open tools.toml" in (stdio.error or "")
    assert http.status == "failed" and f"URL {nowhere.url}" in (http.error or "")


def _closed_port() -> int:
    from tests.ports import reserve_port

    return reserve_port()  # nothing listens there


async def test_a_crashed_stdio_server_is_started_again_and_the_call_retried(
    client: Client, engine: AsyncEngine, settings: Settings, folder: Path
):
    agent = Agent(
        name="flaky_user",
        instructions="-",
        model=ScriptedModel(
            [
                ScriptedTurn(tool_calls=[("flaky", {"text": "it"})]),
                lambda messages: ScriptedTurn(content=without_recalled(messages)[-1]["content"]),
            ]
        ),
        mcp=[stdio_server(folder)],
    )
    async with build_worker(client, engine, settings, AgentRegistry([agent])):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("go", agent="flaky_user")
        result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "flaky did it")
    starts = lines(folder, "started")
    assert len(starts) == 2 and starts[0]["pid"] != starts[1]["pid"]  # the crashed server, then a fresh one
    [effect] = await ledger(engine, run_id)
    assert (effect.outcome, effect.attempt) == ("ok", 2)
    assert not any(alive(s["pid"]) for s in starts)


async def test_a_timeout_is_retried_per_the_tools_retry_spec_then_told_to_the_model(
    client: Client, engine: AsyncEngine, settings: Settings, folder: Path
):
    agent = Agent(
        name="impatient",
        instructions="-",
        model=ScriptedModel(
            [
                ScriptedTurn(tool_calls=[("dawdle", {"seconds": 30})]),
                lambda messages: ScriptedTurn(content=without_recalled(messages)[-1]["content"]),
            ]
        ),
        mcp=[stdio_server(folder, timeouts={"dawdle": 2.5}, max_attempts=2)],
    )
    async with build_worker(client, engine, settings, AgentRegistry([agent])):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("go", agent="impatient")
        result = await wp.result(run_id)
    assert result.status == "completed"
    assert "tool dawdle failed after 2 attempt(s)" in (result.output or "")
    assert "tools/call dawdle timed out" in (result.output or "")
    assert len([c for c in lines(folder, "calls") if c["tool"] == "dawdle"]) == 2
    assert await ledger(engine, run_id) == []  # no answer: nothing in the ledger, the workflow told the model


async def test_an_mcp_tool_can_require_approval(client: Client, engine: AsyncEngine, settings: Settings, folder: Path):
    agent = Agent(
        name="careful_mcp",
        instructions="-",
        model=ScriptedModel(
            [
                ScriptedTurn(tool_calls=[("record", {"text": "approved"}), ("multiply", {"a": 3, "b": 3})]),
                lambda messages: ScriptedTurn(
                    content=" / ".join(m["content"] for m in without_recalled(messages)[-2:])
                ),
            ]
        ),
        mcp=[stdio_server(folder, requires_approval=["record"])],
    )
    async with build_worker(client, engine, settings, AgentRegistry([agent])):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("go", agent="careful_mcp")
        progress = await eventually(
            lambda: _waiting(wp, run_id), timeout=30, what="the run waiting for approval of `record`"
        )
        assert [p.tool for p in progress.pending_approvals] == ["record"]
        assert lines(folder, "effects") == []  # nothing ran before the decision
        await wp.approve(run_id)
        result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "recorded approved / 9")
    assert [e["key"] for e in lines(folder, "effects")] == [f"{run_id}:1:0"]


async def _waiting(wp: Waypoint, run_id: str) -> Any:
    progress = await wp.progress(run_id)
    return progress if progress.pending_approvals else None
