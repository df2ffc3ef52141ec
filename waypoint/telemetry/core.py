"""One OpenTelemetry setup per process: tracer and meter providers, exporters, Temporal interceptors.

`setup(settings)` is idempotent: the same settings give back the same
`Telemetry`. Tests inject an exporter (`setup(settings, exporter=...)`) and get
a fresh provider, without touching OpenTelemetry's global provider, which can
be set only once per process. Everything Waypoint traces asks `current()` at
call time, so a long-lived engine or module never holds a stale provider.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue
from temporalio.contrib.opentelemetry import TracingInterceptor

from waypoint.config import Settings
from waypoint.telemetry.spanfile import JsonLinesSpanExporter, span_file
from waypoint.telemetry.workflow_root import WaypointTracingInterceptor, WorkflowIdGenerator

SCOPE = "waypoint"
# Our own attributes live under `waypoint.`; these short names map onto them.
WAYPOINT_ATTRIBUTES = {"run_id", "step", "tenant", "attempt", "agent"}


class Metrics:
    """The instruments Waypoint records (all no-ops when metrics are off)."""

    def __init__(self, meter: otel_metrics.Meter):
        self.steps = meter.create_counter("waypoint.steps", unit="{step}", description="Steps recorded.")
        self.step_duration = meter.create_histogram(
            "waypoint.step.duration", unit="s", description="Model time + tool time + checkpoint write of a step."
        )
        self.model_attempts = meter.create_counter(
            "waypoint.model.attempts", unit="{attempt}", description="Model calls by outcome."
        )
        self.retries = meter.create_counter(
            "waypoint.activity.retries", unit="{attempt}", description="Activity attempts after the first."
        )
        self.tokens = meter.create_counter("waypoint.tokens", unit="{token}", description="Tokens by direction.")
        self.cost = meter.create_counter("waypoint.cost", unit="USD", description="Model cost.")
        self.checkpoint_write = meter.create_histogram(
            "waypoint.checkpoint.write.duration", unit="s", description="record_step: events + checkpoint."
        )
        self.memory_recall = meter.create_histogram(
            "waypoint.memory.recall.duration", unit="s", description="Episodic memory recall."
        )
        self.runs = meter.create_counter("waypoint.runs", unit="{run}", description="Finished runs by status.")
        self.stuck = meter.create_gauge(
            "waypoint.run.stuck",
            unit="{run}",
            description="1 while a run's workflow task keeps failing, 0 once it does not (set when a read looks).",
        )
        # Fleet flow control (waypoint/store/limits.py), by model key.
        self.capacity_waits = meter.create_counter(
            "waypoint.model.capacity_waits",
            unit="{call}",
            description="Model calls the shared limiter made wait, by key and reason.",
        )
        self.capacity_waiting = meter.create_gauge(
            "waypoint.model.capacity_waiting",
            unit="{call}",
            description="Model calls waiting in a key's line (set when a call joins it).",
        )
        self.throttled = meter.create_counter(
            "waypoint.model.throttled",
            unit="{call}",
            description="Model calls answered 429 or 529, by key.",
        )
        # Budget pools (waypoint/store/budget.py): calls a tree's pool or a tenant's day did not let go out.
        self.budget_refusals = meter.create_counter(
            "waypoint.budget.refusals",
            unit="{call}",
            description="Model calls a budget kept from going out, by scope (tree, tenant_day), measure and "
            "action (wait, fail).",
        )


@dataclass(eq=False)
class Telemetry:
    key: tuple[Any, ...]
    enabled: bool
    capture_content: bool
    prices: dict[str, tuple[float, ...]]
    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None
    span_path: Path | None
    exporter: SpanExporter | None = None

    def __post_init__(self) -> None:
        provider = self.tracer_provider
        self.tracer: trace.Tracer = provider.get_tracer(SCOPE) if provider else trace.NoOpTracer()
        meter = self.meter_provider.get_meter(SCOPE) if self.meter_provider else otel_metrics.NoOpMeter(SCOPE)
        self.metrics = Metrics(meter)
        self._interceptor: TracingInterceptor | None = None

    def tracing_interceptor(self) -> TracingInterceptor | None:
        """Temporal's interceptor (client start -> workflow -> activities), on this provider's tracer.
        Workflow spans are created even without a client span, so Schedule-started runs are traced,
        each as one trace (see workflow_root.py)."""
        if not self.enabled:
            return None
        if self._interceptor is None:
            self._interceptor = WaypointTracingInterceptor(self.tracer)
        return self._interceptor

    def force_flush(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.force_flush()
        if self.meter_provider is not None:
            self.meter_provider.force_flush()

    def shutdown(self) -> None:
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


_lock = threading.Lock()
_current: Telemetry | None = None
_DISABLED = Telemetry((), False, False, {}, None, None, None)


def _settings_key(settings: Settings) -> tuple[Any, ...]:
    return (
        settings.tracing,
        settings.otlp_endpoint,
        settings.otlp_protocol,
        str(span_file(settings.state_dir).resolve()),
        settings.trace_content,
    )


def _otlp_url(endpoint: str, signal: str) -> str:
    # Like the SDK does for OTEL_EXPORTER_OTLP_ENDPOINT: the base URL plus the signal's path.
    return endpoint if endpoint.rstrip("/").endswith(f"/v1/{signal}") else endpoint.rstrip("/") + f"/v1/{signal}"


# Seconds an OTLP export may take, retries included, unless OTEL_EXPORTER_OTLP_TIMEOUT says otherwise:
# the SDK's 10 s, spent retrying an unreachable collector, would add that to every CLI command.
EXPORT_TIMEOUT_SECONDS = 2.0


class QuietExporter(SpanExporter):
    """Spans to a collector that may be away: the exporter's own retry warnings are silenced, and a
    failed export is one warning (naming the endpoint and the setting), then quiet until the
    collector answers again."""

    def __init__(self, inner: SpanExporter, endpoint: str):
        self.inner = inner
        self.endpoint = endpoint
        self._failing = False
        logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.CRITICAL)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result == SpanExportResult.FAILURE and not self._failing:
            logging.getLogger("waypoint.telemetry").warning(
                "cannot send spans to the OTLP collector at %s: dropping them until it answers "
                "(check OTEL_EXPORTER_OTLP_ENDPOINT)",
                self.endpoint,
            )
        self._failing = result == SpanExportResult.FAILURE
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _otlp_exporters(settings: Settings) -> tuple[SpanExporter, Any]:
    endpoint = settings.otlp_endpoint
    assert endpoint
    timeout = None if os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") else EXPORT_TIMEOUT_SECONDS
    if settings.otlp_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        insecure = endpoint.startswith("http://")
        spans: SpanExporter = GrpcSpans(endpoint=endpoint, insecure=insecure, timeout=timeout)
        return QuietExporter(spans, endpoint), GrpcMetrics(endpoint=endpoint, insecure=insecure, timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

    spans = HttpSpans(endpoint=_otlp_url(endpoint, "traces"), timeout=timeout)
    metrics_exporter = HttpMetrics(endpoint=_otlp_url(endpoint, "metrics"), timeout=timeout)
    return QuietExporter(spans, endpoint), metrics_exporter


def setup(
    settings: Settings, *, exporter: SpanExporter | None = None, metric_reader: MetricReader | None = None
) -> Telemetry:
    """The process's telemetry for these settings, built once.

    Spans go to `exporter` if given (tests), else to OTLP when an endpoint is set,
    else to `<state_dir>/traces/spans.jsonl`. Metrics go to `metric_reader` if
    given, else to OTLP when an endpoint is set, else nowhere. The sampler and
    service name come from the standard OTEL_TRACES_SAMPLER and OTEL_SERVICE_NAME.
    """
    global _current
    key = _settings_key(settings)
    with _lock:
        current = _current
        if current is not None and current.key == key and (exporter is None or exporter is current.exporter):
            if metric_reader is None:
                return current
        if not settings.tracing and exporter is None:
            built = Telemetry(key, False, False, dict(settings.prices), None, None, None)
        else:
            resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "waypoint"})
            # The id generator gives a parentless workflow's root span ids every worker can recompute.
            provider = TracerProvider(resource=resource, shutdown_on_exit=True, id_generator=WorkflowIdGenerator())
            readers: list[MetricReader] = []
            path: Path | None = None
            if exporter is not None:
                provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
            elif settings.otlp_endpoint:
                spans, metric_exporter = _otlp_exporters(settings)
                provider.add_span_processor(BatchSpanProcessor(spans))
                readers.append(PeriodicExportingMetricReader(metric_exporter))
            else:
                path = span_file(settings.state_dir).resolve()
                # A short delay: `waypoint trace` right after a run should find its spans.
                provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(path), schedule_delay_millis=500))
            if metric_reader is not None:
                readers.append(metric_reader)
            meters = MeterProvider(resource=resource, metric_readers=readers) if readers else None
            built = Telemetry(
                key, True, settings.trace_content, dict(settings.prices), provider, meters, path, exporter
            )
        if current is not None:
            current.shutdown()
        _current = built
        return built


def reset() -> None:
    """Flush and drop this process's telemetry (tests, benchmarks); the next `setup` builds anew."""
    global _current
    with _lock:
        if _current is not None:
            _current.shutdown()
        _current = None


def current() -> Telemetry:
    """The telemetry set up in this process (disabled until `setup` runs)."""
    return _current or _DISABLED


def tracer() -> trace.Tracer:
    return current().tracer


def metrics() -> Metrics:
    return current().metrics


def _attributes(attributes: Mapping[str, AttributeValue] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(attributes or {})
    for name, value in extra.items():
        if value is not None:
            out[f"waypoint.{name}"] = value
    return out


@contextlib.contextmanager
def span(
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    **waypoint_attributes: Any,
) -> Iterator[Span]:
    """A span on the current trace: `with span("qdrant search", {"db.system": "qdrant"}, run_id=..., step=...)`.

    `attributes` are set as given (semantic conventions); keyword arguments become
    `waypoint.<name>`. An exception marks the span as an error and goes on.
    """
    with tracer().start_as_current_span(
        name,
        kind=kind,
        attributes=_attributes(attributes, waypoint_attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current_span:
        try:
            yield current_span
        except BaseException as exc:
            mark_error(current_span, exc)
            raise


def annotate(**waypoint_attributes: Any) -> None:
    """Set `waypoint.<name>` attributes on the current span (an activity's attempt span), if recording."""
    current_span = trace.get_current_span()
    if current_span.is_recording():
        current_span.set_attributes(_attributes(None, waypoint_attributes))


def event(name: str, attributes: Mapping[str, AttributeValue]) -> None:
    """An event on the current span if it records, else on a short span of its own named `name`
    (a call made outside any trace still leaves its event)."""
    current_span = trace.get_current_span()
    if current_span.is_recording():
        current_span.add_event(name, attributes)
        return
    with tracer().start_as_current_span(name, attributes=attributes) as own:
        own.add_event(name, attributes)


def mark_error(target: Span, exc: BaseException) -> None:
    from waypoint.telemetry.redact import redact_text

    # The message may quote a request (an API key echoed by a provider): redact it like content.
    message = redact_text(f"{type(exc).__name__}: {exc}")[:2000]
    target.set_status(Status(StatusCode.ERROR, message))
    target.set_attribute("error.type", type(exc).__name__)
    target.add_event("exception", {"exception.type": type(exc).__name__, "exception.message": message})


def trace_id(target: Span | None = None) -> str | None:
    """The hex trace id of `target` (default: the current span), or None outside a trace."""
    ctx = (target or trace.get_current_span()).get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def record_recall_latency(seconds: float, **attributes: Any) -> None:
    """For the memory activities: one episodic-memory recall took `seconds`."""
    metrics().memory_recall.record(seconds, _attributes(None, attributes))


# --- Postgres spans -----------------------------------------------------------------------------


class _CurrentTracer(trace.Tracer):
    """Delegates to the current provider's tracer at call time, and only inside a trace:
    pool pings and startup queries would otherwise each open a trace of their own."""

    def start_span(self, name: str, context: otel_context.Context | None = None, *args: Any, **kwargs: Any) -> Span:
        parent = trace.get_current_span(context)
        if not parent.get_span_context().is_valid:
            return trace.INVALID_SPAN
        return tracer().start_span(name, context, *args, **kwargs)

    @contextlib.contextmanager
    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Iterator[Span]:  # type: ignore[override]
        if not trace.get_current_span().get_span_context().is_valid:
            yield trace.INVALID_SPAN
            return
        with tracer().start_as_current_span(name, *args, **kwargs) as inner:
            yield inner


_instrumented: weakref.WeakSet[Any] = weakref.WeakSet()


def instrument_engine(engine: Any) -> None:
    """Postgres spans for every statement of this AsyncEngine (once per engine), as children of
    the span that runs it (the activity's)."""
    sync_engine = engine.sync_engine
    if sync_engine in _instrumented:
        return
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer

    usage = otel_metrics.NoOpMeter(SCOPE).create_up_down_counter("db.client.connections.usage")
    EngineTracer(_CurrentTracer(), sync_engine, usage)
    _instrumented.add(sync_engine)
