"""The `run_tool` activity: run one tool call of one step.

A bad call (unknown tool, invalid arguments, a `ToolError` raised by the tool)
is not a failure of the run: it comes back as an error result the model can
read and correct. Any other exception fails the attempt, and Temporal retries it.
"""

from __future__ import annotations

import time

from temporalio import activity

from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.errors import ToolError, UnknownTool
from waypoint.tools import ToolContext
from waypoint.types import RUN_TOOL, RunToolInput, ToolResult


class ToolActivities:
    def __init__(self, agents: AgentRegistry, settings: Settings):
        self.agents = agents
        self.settings = settings

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, inp: RunToolInput) -> ToolResult:
        started = time.monotonic()
        call = inp.call
        ctx = ToolContext(
            run_id=inp.run_id,
            tenant_id=inp.tenant_id,
            step=inp.step,
            call_index=inp.call_index,
            workspace=self.settings.resolved_workspace,
        )
        try:
            output = await self.agents.get(inp.agent).tool(call.name).invoke(call.arguments, ctx)
            is_error = False
        except (ToolError, UnknownTool) as exc:
            output, is_error = f"error: {exc}", True
        return ToolResult(
            call_id=call.id,
            name=call.name,
            output=output,
            is_error=is_error,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
