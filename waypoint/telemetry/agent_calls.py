"""A span per sub-agent call in the caller's trace: `execute_tool <agent>`, with the child run's spans below it.

temporalio's TracingInterceptor carries the trace into a child workflow already: the caller's
`StartChildWorkflow` span travels in the child's start headers and every span of the child hangs
under it, so a tree of runs is one trace, and each child's `start_run` records the root's trace
id. What that span does not say is which call started the child. So one more span goes between
the two, named like a tool's span (the call is a tool call to the model) and carrying the call:
the caller's run id, step and call index, the child's run id and the agent. It is created the way
the SDK creates its workflow spans: zero-length, through the interceptor's extern function
(outside the sandbox), never on replay; workflow code is untouched.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind
from temporalio.contrib.opentelemetry import TracingWorkflowInboundInterceptor
from temporalio.worker import StartChildWorkflowInput, WorkflowOutboundInterceptor


class AgentCallTracing(TracingWorkflowInboundInterceptor):
    """The SDK's workflow tracing, plus the sub-agent call span."""

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        # The SDK's outbound interceptor wraps this one: its StartChildWorkflow span is made first.
        super().init(_AgentCallOutbound(outbound, self))


class _AgentCallOutbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, root: AgentCallTracing) -> None:
        super().__init__(next)
        self.root = root

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> Any:
        run: Any = input.args[0] if input.args else None
        parent = getattr(run, "parent", None)  # a sub-agent run's RunInput names the call that starts it
        header = input.headers.get(self.root.header_key)  # None on replay: no span was made
        if parent is not None and header is not None:
            carrier = self.root.payload_converter.from_payloads([header])[0]
            token = otel_context.attach(self.root.text_map_propagator.extract(carrier))
            try:
                self.root._completed_span(
                    f"execute_tool {run.agent}",
                    add_to_outbound=input,  # the child's spans go under this one
                    additional_attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": run.agent,
                        "waypoint.run_id": parent.run_id,
                        "waypoint.step": parent.step,
                        "waypoint.call_index": parent.call_index,
                        "waypoint.child_run_id": input.id,
                        "waypoint.tenant": run.tenant_id,
                    },
                    kind=SpanKind.INTERNAL,
                )
            finally:
                otel_context.detach(token)
        return await super().start_child_workflow(input)
