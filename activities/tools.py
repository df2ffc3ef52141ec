"""The `run_tool` activity: run one tool call of one step, exactly once.

Every outcome is written to the `tool_effects` ledger under the call's idempotency key
(`run_id:step:call_index`). A retried attempt whose key is in the ledger (the worker died
after the tool ran but before Temporal heard of it) returns the recorded result instead of
running the tool again. Long outputs stay in the ledger; the activity returns a preview
(claim check), so Temporal history stays small.

A bad call (unknown tool, invalid arguments) or a `ToolError` raised by the tool is not a
failure: it comes back as an error result the model can read. Any other exception fails the
attempt, and Temporal retries it.
"""

from __future__ import annotations

import time
from typing import Any

from temporalio import activity

from activities.boundary import boundary, heartbeating
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.errors import ToolError, UnknownTool
from waypoint.names import Activity, ToolOutcome
from waypoint.retry import LEDGER_PATIENCE_SECONDS
from waypoint.store import RunStore
from waypoint.store.ledger import Effect, patiently
from waypoint.telemetry import tool_span
from waypoint.tools import ToolContext
from waypoint.types import RunToolInput, ToolResult

# Outputs longer than this stay in the ledger (every output is there); history gets a preview of
# the first INLINE_OUTPUT_CHARS, enough to read a run in the Temporal UI.
INLINE_OUTPUT_CHARS = 256


def preview(output: str) -> tuple[str, bool]:
    if len(output) <= INLINE_OUTPUT_CHARS:
        return output, False
    return output[:INLINE_OUTPUT_CHARS] + f"... [{len(output)} characters in the ledger]", True


def result_of(effect: Effect, call_id: str, *, from_ledger: bool) -> ToolResult:
    text, stored = preview(effect.output)
    return ToolResult(
        call_id=call_id,
        name=effect.tool,
        output=text,
        is_error=effect.outcome != ToolOutcome.OK,
        duration_ms=effect.duration_ms,
        stored=stored,
        outcome=effect.outcome,
        from_ledger=from_ledger,
    )


class ToolActivities:
    def __init__(self, store: RunStore, agents: AgentRegistry, settings: Settings, *, memory: Any = None):
        self.store = store
        self.agents = agents
        self.settings = settings
        self.memory = memory  # the episodic store, on the memory worker (for memory tools)

    async def _ledger(self, key: str, op: Any) -> Any:
        async with heartbeating(key):
            return await patiently(op, patience_seconds=LEDGER_PATIENCE_SECONDS)

    @activity.defn(name=Activity.RUN_TOOL)
    @boundary
    async def run_tool(self, inp: RunToolInput) -> ToolResult:
        key = inp.idempotency_key
        call = inp.call
        done = await self._ledger(key, lambda: self.store.recorded_effect(inp.tenant_id, key))
        if done is not None:
            activity.logger.info("tool call %s already in the ledger: not running it again", key)
            return result_of(done, call.id, from_ledger=True)

        started = time.monotonic()
        attempt = activity.info().attempt
        ctx = ToolContext(
            run_id=inp.run_id,
            tenant_id=inp.tenant_id,
            step=inp.step,
            call_index=inp.call_index,
            workspace=self.settings.resolved_workspace,
            attempt=attempt,
            agent=inp.agent,
            memory=self.memory,
        )
        try:
            tool = self.agents.get(inp.agent).tool(call.name)
            kwargs = tool.parse_arguments(call.arguments)
        except (ToolError, UnknownTool) as exc:
            output, outcome = f"error: {exc}", ToolOutcome.BAD_CALL
        else:
            try:
                async with heartbeating(key):
                    with tool_span(
                        call.name, call.id, run_id=inp.run_id, step=inp.step, tenant=inp.tenant_id, attempt=attempt
                    ):
                        output, outcome = await tool.call(kwargs, ctx), ToolOutcome.OK
            except ToolError as exc:
                output, outcome = f"error: {exc}", ToolOutcome.TOOL_ERROR
        effect = Effect(
            idempotency_key=key,
            run_id=inp.run_id,
            step=inp.step,
            call_index=inp.call_index,
            tool=call.name,
            arguments=call.arguments,
            output=output,
            outcome=outcome,
            duration_ms=int((time.monotonic() - started) * 1000),
            attempt=attempt,
        )
        await self._ledger(key, lambda: self.store.record_effect(inp.tenant_id, effect))
        return result_of(effect, call.id, from_ledger=False)
