"""Telemetry's Temporal side: the tracing interceptors of clients and workers, step metrics and the
run context of log records (run id, step, trace id) for `workflow.logger` and `activity.logger`."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from waypoint.config import Settings
from waypoint.names import Activity
from waypoint.telemetry.core import _attributes, _otlp_url, metrics, setup, trace_id

# --- Temporal -----------------------------------------------------------------------------------


def client_interceptors(settings: Settings) -> list[Any]:
    _install_log_filter()
    interceptor = setup(settings).tracing_interceptor()
    return [interceptor] if interceptor else []


def worker_interceptors(client: Client, settings: Settings) -> list[Interceptor]:
    """Tracing (unless the client carries it already: it would trace twice), then step metrics and log context."""
    telemetry = setup(settings)
    _install_log_filter()
    chain: list[Interceptor] = []
    interceptor = telemetry.tracing_interceptor()
    if interceptor is not None and not any(
        isinstance(i, TracingInterceptor) for i in client.config().get("interceptors", [])
    ):
        chain.append(interceptor)
    chain.append(StepInterceptor())
    return chain


_runtime: Any = None


def temporal_runtime(settings: Settings) -> Any:
    """A Temporal runtime that exports the SDK's own metrics over OTLP (WAYPOINT_TEMPORAL_METRICS), else None."""
    global _runtime
    if not (settings.temporal_metrics and settings.otlp_endpoint):
        return None
    if _runtime is None:
        from temporalio.runtime import OpenTelemetryConfig, Runtime, TelemetryConfig

        http = settings.otlp_protocol != "grpc"
        url = _otlp_url(settings.otlp_endpoint, "metrics") if http else settings.otlp_endpoint
        _runtime = Runtime(telemetry=TelemetryConfig(metrics=OpenTelemetryConfig(url=url, http=http)))
    return _runtime


@dataclass(frozen=True)
class _LogContext:
    run_id: str
    step: int | None


_log_context: contextvars.ContextVar[_LogContext | None] = contextvars.ContextVar("waypoint_log", default=None)


class StepInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StepActivityInterceptor(next)


class _StepActivityInterceptor(ActivityInboundInterceptor):
    """Puts `waypoint.*` on each attempt's RunActivity span, the run and step into log records,
    and records step, checkpoint, retry and run metrics."""

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        arg: Any = input.args[0] if input.args else None
        step = getattr(arg, "step", None)
        attempt_span = trace.get_current_span()
        if attempt_span.is_recording():
            attempt_span.set_attributes(
                _attributes(
                    None,
                    {"run_id": info.workflow_id, "step": step, "attempt": info.attempt, "tenant": _tenant(arg)},
                )
            )
        found = metrics()
        if info.attempt > 1:
            found.retries.add(1, {"activity": info.activity_type})
        token = _log_context.set(_LogContext(info.workflow_id or "", step))
        started = time.perf_counter()
        try:
            result = await super().execute_activity(input)
        finally:
            _log_context.reset(token)
        elapsed = time.perf_counter() - started
        if info.activity_type == Activity.RECORD_STEP and arg is not None:
            tools_ms = sum(r.duration_ms for r in getattr(arg, "tool_results", []))
            attrs = {"waypoint.tenant": _tenant(arg) or ""}
            found.steps.add(1, attrs)
            found.checkpoint_write.record(elapsed, attrs)
            found.step_duration.record(elapsed + (arg.turn.latency_ms + tools_ms) / 1000, attrs)
        elif info.activity_type == Activity.FINISH_RUN and arg is not None:
            found.runs.add(1, {"status": getattr(arg, "status", "unknown")})
        return result


def _tenant(arg: Any) -> str | None:
    return getattr(arg, "tenant_id", None)


# --- logs ---------------------------------------------------------------------------------------


class RunContextFilter(logging.Filter):
    """Adds the run id, step and trace id to `workflow.logger` and `activity.logger` records:
    as attributes (`waypoint_run_id`, `waypoint_step`, `trace_id`) and at the end of the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        run_id: str | None = None
        step: int | None = None
        if activity.in_activity():
            found = _log_context.get()
            run_id = found.run_id if found else activity.info().workflow_id
            step = found.step if found else None
        elif workflow.in_workflow():
            run_id = workflow.info().workflow_id
            with contextlib.suppress(Exception):  # the run's live step, as the `progress` query answers it
                step = workflow.instance().progress().step
        if run_id is None or getattr(record, "waypoint_run_id", None):
            return True
        trace = trace_id()
        record.waypoint_run_id, record.waypoint_step, record.trace_id = run_id, step, trace
        suffix = f" [run_id={run_id} step={step} trace_id={trace}]"
        record.msg = f"{record.msg}{suffix.replace('%', '%%') if record.args else suffix}"
        return True


class OneTracebackFilter(logging.Filter):
    """A failure that repeats (an activity retried, a workflow task failing again) keeps its
    traceback the first time, per run and error; after that it is one line each time, the error
    at its end. A run failing in a loop costs a line per attempt, not a traceback per attempt."""

    KEEP = 10_000  # failures remembered (the oldest is forgotten first)

    def __init__(self) -> None:
        super().__init__()
        self._seen: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        where = getattr(record, "temporal_activity", None) or getattr(record, "temporal_workflow", None) or {}
        run_id = getattr(record, "waypoint_run_id", None) or where.get("workflow_id", "")
        reason = next(iter(str(exc).splitlines()), "")[:300]
        key = (record.name, run_id, type(exc).__name__, reason)
        if key not in self._seen:
            self._seen[key] = None
            if len(self._seen) > self.KEEP:
                self._seen.popitem(last=False)
            return True
        self._seen.move_to_end(key)
        again = f" (again: {type(exc).__name__}: {reason})"
        record.msg = f"{record.msg}{again.replace('%', '%%') if record.args else again}"
        record.exc_info, record.exc_text = None, None
        return True


_filter = RunContextFilter()
_once = OneTracebackFilter()
# The workflow worker logs a failed workflow task on its own logger, outside the workflow.
_WORKFLOW_TASK_LOGGER = "temporalio.worker._workflow_instance"


def _install_log_filter() -> None:
    for name, filters in (
        ("temporalio.activity", (_filter, _once)),
        ("temporalio.workflow", (_filter, _once)),
        (_WORKFLOW_TASK_LOGGER, (_once,)),
    ):
        logger = logging.getLogger(name)
        for found in filters:
            if found not in logger.filters:
                logger.addFilter(found)
