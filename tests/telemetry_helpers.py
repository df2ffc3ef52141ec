"""What the telemetry tests share: a traced run on a worker of its own, the spans and metric points
it left in memory, and the span tree as text."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from waypoint import telemetry
from waypoint.agents import AgentRegistry
from waypoint.app.embedded import StackInfo
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.telemetry.spanfile import span_dict, span_tree, walk
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn


def dump(spans: list[dict[str, Any]], *, skip_db: bool = True) -> str:
    """The span tree as indented names (Postgres statements left out: their count is not the point)."""
    lines = []
    for depth, node in walk(span_tree(spans)):
        if skip_db and "db.system" in node.span["attributes"] or "db.system.name" in node.span["attributes"]:
            continue
        lines.append("  " * depth + node.span["name"])
    return "\n".join(lines)


async def traced_run(
    stack: StackInfo, engine: AsyncEngine, settings: Settings, agents: AgentRegistry, task: str, *, memory: bool = False
) -> tuple[str, str]:
    """`memory`: a memory worker serves this task queue too (the memory_worker fixture), so this
    worker must plan runs with memory as well, whichever of the two takes the run."""
    client = await Client.connect(stack.temporal_address, interceptors=telemetry.client_interceptors(settings))
    async with build_worker(client, engine, settings, agents, memory=memory):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run(task, agent="traced")
        result = await wp.result(run_id)
    assert result.status == "completed", result.error
    trace_id = await wp.trace_id(run_id)
    assert trace_id
    return run_id, trace_id


def script(fake_openai: FakeOpenAI) -> None:
    fake_openai.answer(
        Reply(status=503, body={"error": {"message": "overloaded"}}),
        Turn(tool_calls=[("add", {"a": 2, "b": 3}), ("note", {"text": "five"})], prompt_tokens=40, completion_tokens=9),
        Turn(content="The answer is 5."),
    )


def finished(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    """The runs' spans: without the audit log's own `waypoint.audit` spans, each the trace of one
    human action made outside any trace (starting a run, approving a call), not part of a run's."""
    telemetry.current().force_flush()
    return [span_dict(s) for s in exporter.get_finished_spans() if s.name != "waypoint.audit"]


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point by metric name (cumulative: one collection holds the whole test's)."""
    telemetry.current().force_flush()
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def by(points: list[Any], *keys: str) -> dict[tuple[Any, ...], Any]:
    return {tuple(p.attributes.get(k) for k in keys): p.value for p in points}
