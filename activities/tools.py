"""The `run_tool` activity: run one tool call of one step, exactly once.

Every outcome is written to the `tool_effects` ledger under the call's
idempotency key (`run_id:step:call_index`). A retried attempt whose key is in
the ledger (the worker died after the tool ran but before Temporal heard of it)
returns the recorded result instead of running the tool again. Long outputs
stay in the ledger; the activity returns a preview (claim check), so Temporal
history stays small.

A bad call (unknown tool, invalid arguments) or a `ToolError` raised by the
tool is not a failure: it comes back as an error result the model can read.
Any other exception fails the attempt, and Temporal retries it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity

from activities.heartbeat import heartbeating
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.errors import ToolError, UnknownTool
from waypoint.store.schema import tool_effects
from waypoint.telemetry import tool_span
from waypoint.tools import ToolContext
from waypoint.types import RUN_TOOL, RunToolInput, ToolResult

# Outputs longer than this stay in the ledger; history gets the first INLINE_OUTPUT_CHARS.
INLINE_OUTPUT_CHARS = 1_000


def preview(output: str) -> tuple[str, bool]:
    if len(output) <= INLINE_OUTPUT_CHARS:
        return output, False
    return output[:INLINE_OUTPUT_CHARS] + f"... [{len(output)} characters in the ledger]", True


# The ledger is what makes a tool run once; a database outage must not spend the tool's own
# attempts (the model would be told the tool failed). Ledger reads and writes wait this long.
LEDGER_PATIENCE_SECONDS = 60.0

T = TypeVar("T")


def _transient(exc: BaseException) -> bool:
    """A dropped or refused database connection, as opposed to a bug or a constraint."""
    if isinstance(exc, OSError | OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


async def ledger_io(op: Callable[[], Awaitable[T]]) -> T:
    """Run a ledger read or write, riding out a database outage of up to LEDGER_PATIENCE_SECONDS.
    The caller heartbeats meanwhile, so Temporal knows the attempt is alive."""
    deadline = time.monotonic() + LEDGER_PATIENCE_SECONDS
    delay = 0.2
    while True:
        try:
            return await op()
        except Exception as exc:
            if not _transient(exc) or time.monotonic() > deadline:
                raise
            activity.logger.warning("tool ledger unavailable (%s): retrying in %.1f s", type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


class ToolActivities:
    def __init__(self, engine: AsyncEngine, agents: AgentRegistry, settings: Settings, *, memory: Any = None):
        self.engine = engine
        self.agents = agents
        self.settings = settings
        self.memory = memory  # the episodic store, on the memory worker (for memory tools)

    async def recorded(self, key: str, call_id: str) -> ToolResult | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(tool_effects).where(tool_effects.c.idempotency_key == key))).first()
        if row is None:
            return None
        output, stored = preview(row.output)
        return ToolResult(
            call_id=call_id,
            name=row.tool,
            output=output,
            is_error=row.outcome != "ok",
            duration_ms=row.duration_ms,
            stored=stored,
            outcome=row.outcome,
            from_ledger=True,
        )

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, inp: RunToolInput) -> ToolResult:
        key = inp.idempotency_key
        call = inp.call
        async with heartbeating(key):
            done = await ledger_io(lambda: self.recorded(key, call.id))
        if done is not None:
            activity.logger.info("tool call %s already in the ledger: not running it again", key)
            return done

        started = time.monotonic()
        ctx = ToolContext(
            run_id=inp.run_id,
            tenant_id=inp.tenant_id,
            step=inp.step,
            call_index=inp.call_index,
            workspace=self.settings.resolved_workspace,
            attempt=activity.info().attempt,
            agent=inp.agent,
            memory=self.memory,
        )
        try:
            tool = self.agents.get(inp.agent).tool(call.name)
            kwargs = tool.parse_arguments(call.arguments)
        except (ToolError, UnknownTool) as exc:
            output, outcome = f"error: {exc}", "bad_call"
        else:
            try:
                async with heartbeating(key):
                    with tool_span(
                        call.name, call.id, run_id=inp.run_id, step=inp.step, tenant=inp.tenant_id, attempt=ctx.attempt
                    ):
                        output, outcome = await tool.call(kwargs, ctx), "ok"
            except ToolError as exc:
                output, outcome = f"error: {exc}", "tool_error"
        duration_ms = int((time.monotonic() - started) * 1000)

        async def write() -> None:
            async with self.engine.begin() as conn:
                await conn.execute(
                    insert(tool_effects)
                    .values(
                        idempotency_key=key,
                        run_id=inp.run_id,
                        step=inp.step,
                        call_index=inp.call_index,
                        tool=call.name,
                        arguments=call.arguments,
                        output=output,
                        outcome=outcome,
                        duration_ms=duration_ms,
                        attempt=activity.info().attempt,
                    )
                    .on_conflict_do_nothing(index_elements=["idempotency_key"])
                )

        async with heartbeating(key):
            await ledger_io(write)
        text, stored = preview(output)
        return ToolResult(
            call_id=call.id,
            name=call.name,
            output=text,
            is_error=outcome != "ok",
            duration_ms=duration_ms,
            stored=stored,
            outcome=outcome,
        )
