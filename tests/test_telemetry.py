"""OpenTelemetry end to end: one trace per run on a real Temporal, Postgres and model server."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.worker import Replayer
from typer.testing import CliRunner

from tests.telemetry_helpers import dump, finished, script, traced_run
from waypoint import telemetry
from waypoint.app.cli import app
from waypoint.app.embedded import StackInfo
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.testing.fake_openai import FakeOpenAI
from waypoint.workflows.agent_run import AgentRunWorkflow

pytestmark = pytest.mark.postgres

SECRET = "sk-test-PLANTED123456789"


@pytest.fixture
def exporter(settings: Settings) -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    telemetry.setup(settings, exporter=spans)
    yield spans


async def test_one_run_is_one_trace(
    stack: StackInfo, engine, settings, agents, fake_openai: FakeOpenAI, exporter: InMemorySpanExporter
):
    script(fake_openai)
    run_id, trace_id = await traced_run(stack, engine, settings, agents, "Add 2 and 3.")
    spans = finished(exporter)
    assert {s["trace_id"] for s in spans} == {trace_id}
    # The run's start carries the agent version it started with, as its row does.
    started = next(s for s in spans if s["name"] == "RunActivity:start_run")
    row = await Waypoint(None, engine, settings).run(run_id)  # type: ignore[arg-type]
    assert started["attributes"]["waypoint.agent.fingerprint"] == row.agent_fingerprint is not None
    tree = dump(spans)
    # Workflow-side spans are zero-length (replay-safe); the SDK parents them on the start span.
    expected = """start_run
  StartWorkflow:AgentRunWorkflow
    RunWorkflow:AgentRunWorkflow
    StartActivity:start_run
      RunActivity:start_run
    StartActivity:call_model
      RunActivity:call_model
        chat fake-model
      RunActivity:call_model
        chat fake-model
    StartActivity:run_tool
      RunActivity:run_tool
        execute_tool add
    StartActivity:run_tool
      RunActivity:run_tool
        execute_tool note
    StartActivity:record_step
      RunActivity:record_step
    StartActivity:call_model
      RunActivity:call_model
        chat fake-model
    StartActivity:record_step
      RunActivity:record_step
    StartActivity:finish_run
      RunActivity:finish_run
    CompleteWorkflow:AgentRunWorkflow"""
    assert tree == expected, tree

    chats = [s for s in spans if s["name"] == "chat fake-model"]
    failed, ok = chats[0], chats[1]
    assert failed["status"] == "ERROR" and failed["attributes"]["http.response.status_code"] == 503
    assert failed["attributes"]["waypoint.attempt"] == 1 and ok["attributes"]["waypoint.attempt"] == 2
    assert ok["status"] == "UNSET"
    assert {k: ok["attributes"][k] for k in ("gen_ai.operation.name", "gen_ai.request.model")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "fake-model",
    }
    assert (ok["attributes"]["gen_ai.usage.input_tokens"], ok["attributes"]["gen_ai.usage.output_tokens"]) == (40, 9)
    assert list(ok["attributes"]["gen_ai.response.finish_reasons"]) == ["tool_calls"]
    assert ok["attributes"]["waypoint.run_id"] == run_id
    tools = {s["attributes"]["gen_ai.tool.name"]: s for s in spans if s["name"].startswith("execute_tool")}
    assert tools["add"]["attributes"]["gen_ai.tool.call.id"] and tools["note"]["attributes"]["waypoint.step"] == 1

    # Postgres statements are children of the record_step attempt that ran them.
    by_id = {s["span_id"]: s for s in spans}
    record = [s for s in spans if s["name"] == "RunActivity:record_step"]
    db_under_record = [s for s in spans if s["parent_id"] in {r["span_id"] for r in record}]
    assert db_under_record and all(
        "db.system" in s["attributes"] or "db.system.name" in s["attributes"] for s in db_under_record
    )
    assert any("INSERT" in s["name"] or "INSERT" in str(s["attributes"]) for s in db_under_record)
    assert all(by_id.get(s["parent_id"]) for s in spans if s["name"] != "start_run")

    # The run row has the trace id.
    row = await Waypoint(None, engine, settings).run(run_id)
    assert row.trace_id == trace_id


async def test_replay_adds_no_spans(
    stack: StackInfo, engine, settings, agents, fake_openai: FakeOpenAI, exporter: InMemorySpanExporter
):
    script(fake_openai)
    run_id, _ = await traced_run(stack, engine, settings, agents, "Add 2 and 3.")
    before = len(finished(exporter))
    client = await Client.connect(stack.temporal_address)
    history = await client.get_workflow_handle(run_id).fetch_history()
    interceptor = telemetry.current().tracing_interceptor()
    assert interceptor is not None
    await Replayer(workflows=[AgentRunWorkflow], interceptors=[interceptor]).replay_workflow(history)
    assert len(finished(exporter)) == before


@pytest.mark.parametrize("content", [False, True])
async def test_secrets_never_reach_a_span(
    stack: StackInfo, engine, agents, settings: Settings, fake_openai: FakeOpenAI, content: bool
):
    settings = settings.model_copy(update={"trace_content": content})
    spans = InMemorySpanExporter()
    telemetry.setup(settings, exporter=spans)
    script(fake_openai)
    await traced_run(stack, engine, settings, agents, f"Add 2 and 3. My key is {SECRET}, token=hunter2secret")
    found = finished(spans)
    assert SECRET in json.dumps(fake_openai.seen[0].body)  # the model did get it
    text = json.dumps(found, default=str)
    assert SECRET not in text and "hunter2secret" not in text
    captured = [s for s in found if "gen_ai.input.messages" in s["attributes"]]
    assert bool(captured) is content
    if content:
        assert "[REDACTED]" in captured[0]["attributes"]["gen_ai.input.messages"]


class _Collector(BaseHTTPRequestHandler):
    requests: list[ExportTraceServiceRequest] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            type(self).requests.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    _Collector.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.requests
    server.shutdown()
    server.server_close()


async def test_spans_reach_an_otlp_http_receiver(
    stack: StackInfo, engine, agents, settings: Settings, fake_openai: FakeOpenAI, collector
):
    url, received = collector
    settings = settings.model_copy(update={"otlp_endpoint": url, "otlp_protocol": "http/protobuf"})
    telemetry.setup(settings)
    script(fake_openai)
    _, trace_id = await traced_run(stack, engine, settings, agents, "Add 2 and 3.")
    telemetry.current().force_flush()
    names = {
        span.name
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
        if span.trace_id.hex() == trace_id
    }
    assert {"start_run", "RunWorkflow:AgentRunWorkflow", "chat fake-model", "execute_tool note"} <= names
    telemetry.reset()  # while the receiver still listens: the last metrics export goes there too


@pytest.fixture
async def file_traced(settings: Settings) -> AsyncIterator[Settings]:
    telemetry.setup(settings)  # no endpoint: the span file in the state folder
    yield settings


async def test_trace_command_prints_the_tree(
    stack: StackInfo, engine, agents, file_traced: Settings, fake_openai: FakeOpenAI
):
    settings = file_traced
    script(fake_openai)
    run_id, trace_id = await traced_run(stack, engine, settings, agents, "Add 2 and 3.")
    telemetry.current().force_flush()
    env = settings.child_environment()
    # The CLI runs its own event loop: give it a thread.
    result = await asyncio.to_thread(CliRunner().invoke, app, ["trace", run_id], env=env, terminal_width=200)
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"trace {trace_id}" in out
    for name in ("start_run", "RunActivity:call_model", "chat fake-model", "execute_tool add", "ERROR"):
        assert name in out, out
    assert out.index("RunWorkflow:AgentRunWorkflow") < out.index("execute_tool note")
    missing = await asyncio.to_thread(CliRunner().invoke, app, ["trace", "run-nope"], env=env)
    assert missing.exit_code == 1 and "no run" in missing.output
