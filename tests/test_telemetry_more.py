"""Telemetry beyond the single trace: metrics, Qdrant spans, Schedule-started passes, the CLI's trace id.

Real Temporal, Postgres, fake model server and (edge) Qdrant store, as in tests/test_telemetry.py.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.helpers import make_run, research_run, tool_heavy, waypoint
from tests.telemetry_helpers import by, dump, finished, points, script, traced_run
from waypoint import telemetry
from waypoint.app.embedded import StackInfo
from waypoint.app.worker import build_memory_worker, build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.gateway.schedule import apply_schedule
from waypoint.memory import open_store
from waypoint.names import child_run_id
from waypoint.store import RunStore
from waypoint.store.compactions import latest_compaction
from waypoint.store.db import create_engine
from waypoint.testing.fake_openai import FakeOpenAI
from waypoint.workflows.agent_run import AgentRunWorkflow

pytestmark = pytest.mark.postgres


@pytest.fixture
def observed(settings: Settings) -> Iterator[tuple[InMemorySpanExporter, InMemoryMetricReader]]:
    """Spans and metrics in memory. Request it before any worker fixture: workers take their
    tracer from the telemetry set up when they are built."""
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    telemetry.setup(settings, exporter=spans, metric_reader=reader)
    yield spans, reader
    telemetry.reset()


@pytest.fixture
async def memory_traced(observed, memory_worker):
    """The memory_worker fixture's workers, built on the in-memory telemetry."""
    return observed, memory_worker


async def test_a_run_records_its_metrics(
    stack: StackInfo, engine: AsyncEngine, settings: Settings, agents, fake_openai: FakeOpenAI, memory_traced
):
    (_, reader), _ = memory_traced
    script(fake_openai)  # a 503, then two tool calls (40 in / 9 out), then the answer (11 in / 7 out)
    await traced_run(stack, engine, settings, agents, "Add 2 and 3.", memory=True)
    found = points(reader)

    assert sum(p.value for p in found["waypoint.steps"]) == 2
    assert by(found["waypoint.tokens"], "direction", "gen_ai.request.model") == {
        ("input", "fake-model"): 40 + 11,
        ("output", "fake-model"): 9 + 7,
    }
    assert by(found["waypoint.model.attempts"], "outcome") == {("http_503",): 1, ("ok",): 2}
    assert sum(p.value for p in found["waypoint.activity.retries"]) >= 1
    assert by(found["waypoint.activity.retries"], "activity")[("call_model",)] == 1
    assert sum(p.count for p in found["waypoint.checkpoint.write.duration"]) == 2
    assert sum(p.count for p in found["waypoint.step.duration"]) == 2
    assert by(found["waypoint.runs"], "status") == {("completed",): 1}
    recall = found["waypoint.memory.recall.duration"]
    assert sum(p.count for p in recall) >= 1 and all(p.sum > 0 for p in recall)
    assert {p.attributes["waypoint.tenant"] for p in recall} == {settings.tenant}


async def test_qdrant_spans_sit_under_the_memory_activities(
    stack: StackInfo, engine: AsyncEngine, settings: Settings, agents, fake_openai: FakeOpenAI, memory_traced
):
    (spans, _), _ = memory_traced
    script(fake_openai)
    run_id, trace_id = await traced_run(stack, engine, settings, agents, "Add 2 and 3.", memory=True)
    found = [s for s in finished(spans) if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in found}
    qdrant = [s for s in found if s["name"].startswith("qdrant ")]
    assert {s["name"] for s in qdrant} == {"qdrant search", "qdrant upsert"}, dump(found)
    parents = {(s["name"], by_id[s["parent_id"]]["name"]) for s in qdrant}
    # Recall (and storing the steps before it) runs inside the model call, on the memory queue's
    # worker; the run's last step is stored by memory_step once it has ended.
    assert ("qdrant search", "RunActivity:call_model") in parents, dump(found)
    assert ("qdrant upsert", "RunActivity:memory_step") in parents, dump(found)
    assert {p for _, p in parents} <= {"RunActivity:call_model", "RunActivity:memory_step"}, dump(found)
    for s in qdrant:
        assert s["attributes"]["db.system"] == "qdrant" and s["attributes"]["waypoint.run_id"] == run_id
        assert s["status"] == "UNSET"
    # The memory queue's worker still joins the run's one trace.
    assert "StartActivity:memory_step" in dump(found)


@pytest.mark.timeout(120)
async def test_a_schedule_started_pass_is_one_trace(
    client: Client, settings: Settings, agents, observed, fresh_database
):
    (spans, _) = observed
    # A database of its own: a scheduled pass compacts every tenant's runs, largest first.
    cfg = settings.model_copy(
        update={
            "database_url": fresh_database,
            "compaction_schedule_id": f"traced-{uuid.uuid4().hex[:8]}",
            "compaction_interval_seconds": 2,
            "compaction_threshold_tokens": 2000,
        }
    )
    engine = create_engine(fresh_database)
    run_id = await make_run(RunStore(engine), cfg, tool_heavy())
    handle = client.get_schedule_handle(cfg.compaction_schedule_id)
    trace: list[dict[str, Any]] = []
    memory = open_store(cfg)
    try:
        async with (
            build_worker(client, engine, cfg, agents, memory=True),
            build_memory_worker(client, engine, cfg, agents, memory),
        ):
            assert await apply_schedule(client, cfg) == "created"
            for _ in range(600):  # a pass fires within ~2 s and takes a few; allow for a busy machine
                await asyncio.sleep(0.1)
                now = finished(spans)
                done = {s["trace_id"] for s in now if s["name"] == "CompleteWorkflow:CompactionWorkflow"}
                ids = done & {s["trace_id"] for s in now if s["name"] == "RunActivity:compact_run"}
                if ids:  # the first pass compacts; later ones may find nothing to do
                    trace = [s for s in now if s["trace_id"] in ids]
                    break
    finally:
        await handle.delete()
        await memory.close()
    assert trace, "no traced compaction pass: " + dump(finished(spans))
    assert len({s["trace_id"] for s in trace}) == 1
    tree = dump(trace)
    # No client started it: the workflow span is the root, and every activity (the memory
    # worker's save_episodes too) is in its trace.
    assert tree.splitlines()[0] == "RunWorkflow:CompactionWorkflow", tree
    for name in (
        "StartActivity:select_runs",
        "RunActivity:select_runs",
        "StartActivity:compact_run",
        "RunActivity:compact_run",
        "RunActivity:save_episodes",
        "CompleteWorkflow:CompactionWorkflow",
    ):
        assert name in tree, tree
    by_id = {s["span_id"]: s for s in trace}
    upserts = [s for s in trace if s["name"] == "qdrant upsert"]  # `dump` leaves database spans out
    assert upserts and all(by_id[s["parent_id"]]["name"] == "RunActivity:save_episodes" for s in upserts)
    roots = [s for s in trace if s["parent_id"] is None]
    assert [s["name"] for s in roots] == ["RunWorkflow:CompactionWorkflow"]
    # The Schedule names its workflows `<action id>-<timestamp>`.
    assert roots[0]["attributes"]["temporalWorkflowID"].startswith(f"{cfg.compaction_schedule_id}-pass-"), roots[0]
    async with engine.connect() as conn:
        assert await latest_compaction(conn, run_id) is not None  # the traced pass did compact our run
    await engine.dispose()


@pytest.fixture
def file_traced(settings: Settings) -> Iterator[Settings]:
    telemetry.setup(settings)  # no endpoint: the span file in the state folder, shared with the CLI
    yield settings
    telemetry.reset()


async def test_run_prints_the_trace_id_and_trace_shows_its_tree(
    engine: AsyncEngine, file_traced: Settings, worker, fake_openai: FakeOpenAI
):
    settings = file_traced
    script(fake_openai)
    done = await waypoint(settings, "run", "Add 2 and 3.", "--agent", "traced", "--follow")
    assert done.code == 0, done.err
    started = done.out.split("started ", 1)[1].split()
    run_id, printed = started[0], started[2]
    assert started[1] == "trace" and len(printed) == 32
    row = await Waypoint(None, engine, settings).run(run_id)
    assert row.trace_id == printed  # the CLI's root span and the worker's spans are one trace

    telemetry.current().force_flush()  # the worker's spans; the CLI flushed its own on exit
    shown = await waypoint(settings, "trace", run_id)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[0].startswith(f"run {run_id}") and f"trace {printed}" in lines[0], shown.out
    assert "start_run" in lines[1], shown.out  # the first branch is the CLI's root span
    assert sum(1 for line in lines if line.lstrip("│ ").startswith(("├── ", "└── "))) > 1
    as_json = json.loads((await waypoint(settings, "trace", run_id, "--json")).out)
    assert {s["trace_id"] for s in as_json} == {printed}
    roots = [s["name"] for s in as_json if s["parent_id"] is None]
    assert roots == ["start_run"], roots
    names = dump(as_json)
    assert names.splitlines()[:3] == [
        "start_run",
        "  StartWorkflow:AgentRunWorkflow",
        "    RunWorkflow:AgentRunWorkflow",
    ], names
    assert "chat fake-model" in names and "execute_tool note" in names


async def test_a_tree_of_runs_is_one_trace(stack: StackInfo, engine: AsyncEngine, settings: Settings, observed):
    """The research demo's lead run and its four sub-agent runs: one trace, each child run's spans under
    its call's span in the lead run (`execute_tool <agent>`, naming the call and the child), and that
    under the lead run's own spans, up to its start."""
    exporter, _ = observed
    client = await Client.connect(stack.temporal_address, interceptors=telemetry.client_interceptors(settings))
    wp, lead = await research_run(client, engine, settings)
    spans = finished(exporter)
    trace_id = await wp.trace_id(lead)
    assert trace_id and {s["trace_id"] for s in spans} == {trace_id}
    calls = [(1, 0, "note_reader"), (1, 1, "note_reader"), (1, 2, "note_reader"), (2, 0, "report_writer")]
    by_id = {s["span_id"]: s for s in spans}
    tool_spans = [s for s in spans if s["name"].startswith("execute_tool")]

    def ancestors(span: dict[str, Any]) -> list[dict[str, Any]]:
        found = []
        while span["parent_id"] in by_id:
            span = by_id[span["parent_id"]]
            found.append(span)
        return found

    for step, index, agent in calls:
        child = child_run_id(lead, step, index)
        assert (await wp.run(child)).trace_id == trace_id  # `waypoint trace <child>` shows the whole tree
        [started] = [
            s
            for s in spans
            if s["name"] == "RunWorkflow:AgentRunWorkflow" and s["attributes"]["temporalWorkflowID"] == child
        ]
        call, *above = ancestors(started)
        assert call["name"] == f"execute_tool {agent}"
        assert {k: call["attributes"][k] for k in ("waypoint.run_id", "waypoint.step", "waypoint.call_index")} == {
            "waypoint.run_id": lead,
            "waypoint.step": step,
            "waypoint.call_index": index,
        }
        assert call["attributes"]["waypoint.child_run_id"] == child and call["attributes"]["gen_ai.tool.name"] == agent
        assert [(s["name"], s["attributes"].get("temporalWorkflowID")) for s in above[:2]] == [
            ("StartChildWorkflow:AgentRunWorkflow", lead),
            ("StartWorkflow:AgentRunWorkflow", lead),
        ]
        assert above[-1]["name"] == "start_run" and above[-1]["attributes"]["waypoint.run_id"] == lead
        # the child's own work hangs under the call too
        tools = [s for s in tool_spans if s["attributes"].get("waypoint.run_id") == child]
        assert tools and all(call in ancestors(s) for s in tools)
    assert len([s for s in tool_spans if "waypoint.child_run_id" in s["attributes"]]) == 4  # a span per call
    # a replay of the lead run (its sub-agent calls included) adds no span
    interceptor = telemetry.current().tracing_interceptor()
    assert interceptor is not None
    history = await client.get_workflow_handle(lead).fetch_history()
    await Replayer(workflows=[AgentRunWorkflow], interceptors=[interceptor]).replay_workflow(history)
    assert len(finished(exporter)) == len(spans)
