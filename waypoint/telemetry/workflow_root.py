"""One trace for a workflow that no traced client started (a Schedule's compaction pass, `temporal workflow start`).

With `always_create_workflow_spans=True`, temporalio's TracingInterceptor does
create workflow spans without a client span, but every one of them is a root:
RunWorkflow, each StartActivity (with its RunActivity) and CompleteWorkflow
each land in a trace of their own, because the RunWorkflow span's context is
never kept for the spans after it (it could not be: a replay creates no span,
so a worker that picks the workflow up after a cache eviction would not have it).

Here the workflow's root span gets ids derived from its workflow id and run id,
so every worker computes the same ones at any time, replay or not: the
RunWorkflow span is created with exactly those ids, and each later parentless
workflow span is made its child. All of it runs in the interceptor's extern
function, outside the workflow sandbox; workflow code is untouched.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.worker import WorkflowInterceptorClassInput

from waypoint.telemetry.agent_calls import AgentCallTracing

Carrier = dict[str, list[str] | str]  # a propagator's text map, as the SDK types it

# (trace id, span id) that the next span must take; set only around the RunWorkflow span's creation.
_forced_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("waypoint_ids", default=None)


class WorkflowIdGenerator(RandomIdGenerator):
    """Random ids, except for a parentless workflow's RunWorkflow span (see the module doc)."""

    def generate_trace_id(self) -> int:
        forced = _forced_ids.get()
        return forced[0] if forced else super().generate_trace_id()

    def generate_span_id(self) -> int:
        forced = _forced_ids.get()
        return forced[1] if forced else super().generate_span_id()


def workflow_root_ids(workflow_id: str, run_id: str) -> tuple[int, int]:
    """The trace id and root span id of a workflow run that carries no trace context."""
    digest = hashlib.sha256(f"waypoint-trace\0{workflow_id}\0{run_id}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return trace_id, span_id


class WaypointTracingInterceptor(TracingInterceptor):
    """temporalio's TracingInterceptor (always creating workflow spans), with one trace per
    parentless workflow run. Runs started by a traced client are traced exactly as by the SDK.
    A sub-agent call has a span of its own, above its child run's (see agent_calls.py)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        super().__init__(tracer, always_create_workflow_spans=True)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)  # registers the extern function spans are made through
        return AgentCallTracing

    def _completed_workflow_span(self, params: Any) -> Carrier | None:
        attributes = params.attributes or {}
        workflow_id, run_id = attributes.get("temporalWorkflowID"), attributes.get("temporalRunID")
        # Queries without a context are reads from outside, not part of the run: the SDK's behaviour.
        if not params.parent_missing or not workflow_id or not run_id or params.name.startswith("HandleQuery:"):
            return super()._completed_workflow_span(params)
        trace_id, span_id = workflow_root_ids(str(workflow_id), str(run_id))
        if params.name.startswith("RunWorkflow:"):
            token = _forced_ids.set((trace_id, span_id))
            try:
                return super()._completed_workflow_span(params)
            finally:
                _forced_ids.reset(token)
        root = SpanContext(trace_id, span_id, is_remote=True, trace_flags=self._flags(trace_id))
        carrier: Carrier = {}
        self.text_map_propagator.inject(carrier, trace.set_span_in_context(NonRecordingSpan(root)))
        return super()._completed_workflow_span(dataclasses.replace(params, context=carrier, parent_missing=False))

    def _flags(self, trace_id: int) -> TraceFlags:
        """Sampled as the RunWorkflow span was: the root sampler's answer for this trace id."""
        sampler = getattr(self.tracer, "sampler", None)
        if sampler is None:
            return TraceFlags(TraceFlags.SAMPLED)
        decision = sampler.should_sample(None, trace_id, "RunWorkflow")
        return TraceFlags(TraceFlags.SAMPLED if decision.decision.is_sampled() else TraceFlags.DEFAULT)
