"""OpenTelemetry for Waypoint: one trace per run, GenAI spans, Postgres spans, metrics, log context.

    telemetry.setup(settings)                      # once per process; idempotent
    with telemetry.span("qdrant search", {"db.system": "qdrant"}, run_id=run_id, step=step):
        ...
    telemetry.record_recall_latency(0.004, tenant=tenant)

The worker and client wire the Temporal interceptors (`worker_interceptors`,
`client_interceptors`); `activities/` use `chat_span` and `tool_span`.
"""

from __future__ import annotations

from waypoint.telemetry.core import (
    Metrics,
    Telemetry,
    annotate,
    current,
    event,
    instrument_engine,
    mark_error,
    metrics,
    record_recall_latency,
    reset,
    setup,
    span,
    trace_id,
    tracer,
)
from waypoint.telemetry.genai import chat_span, tool_span
from waypoint.telemetry.redact import redact, redact_text
from waypoint.telemetry.spanfile import read_trace, remove_trace, span_file, span_tree
from waypoint.telemetry.temporal import client_interceptors, temporal_runtime, worker_interceptors

__all__ = [
    "Metrics",
    "Telemetry",
    "annotate",
    "chat_span",
    "client_interceptors",
    "current",
    "event",
    "instrument_engine",
    "mark_error",
    "metrics",
    "read_trace",
    "record_recall_latency",
    "redact",
    "redact_text",
    "remove_trace",
    "reset",
    "setup",
    "span",
    "span_file",
    "span_tree",
    "temporal_runtime",
    "tool_span",
    "trace_id",
    "tracer",
    "worker_interceptors",
]
