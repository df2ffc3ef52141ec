"""The `run_tool` activity: run one tool call of one step, exactly once.

Every outcome is written to the `tool_effects` ledger under the call's idempotency key
(`run_id:step:call_index`). A retried attempt whose key is in the ledger (the worker died
after the tool ran but before Temporal heard of it) returns the recorded result instead of
running the tool again. Long outputs stay in the ledger; the activity returns a preview
(claim check), so Temporal history stays small.

A bad call (unknown tool, invalid arguments) or a `ToolError` raised by the tool is not a
failure: it comes back as an error result the model can read. Any other exception fails the
attempt, and Temporal retries it.

In a rerun with recorded tools (`waypoint rerun`), a call matching the source run's call at the
same step and position (same tool, same canonical arguments) gets the source's recorded outcome
and the tool does not run; a call that matches none runs only if its tool is replay-safe
(`@tool(replay_safe=True)`, `@tool(read_only=True)`, or an MCP tool annotated readOnlyHint), and
otherwise gets a "not recorded" error result (outcome `not_recorded`, counted by `compare`).

A call of a tool the run's agent version offered but a later deploy removed is an error result that
says so and names the fix (it never runs, and nothing retries it).

A tool the agent does not define itself may be one of the MCP tools the run recorded when it
started: it is called through the worker's `MCPHub` with the idempotency key in the request's
`_meta`. An error result (`isError`) is a ToolError; no answer (a dead or unreachable server, a
timeout, a protocol error) is MCPCallFailed, retried like any failure. When the server makes a
task of the call, its id goes into the heartbeat details at once, so the retry after a worker
crash polls the same task instead of starting the work again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from waypoint.activities.boundary import boundary, heartbeating
from waypoint.agents import AgentRegistry
from waypoint.calls import canonical_arguments
from waypoint.config import Settings
from waypoint.errors import ToolError, UnknownTool
from waypoint.mcp import MCPHub, MCPTool
from waypoint.memory import RecallScope
from waypoint.memory.steps import recall_scope
from waypoint.names import Activity, ToolOutcome
from waypoint.retry import LEDGER_PATIENCE_SECONDS
from waypoint.store import RunStore
from waypoint.store.ledger import Effect, patiently
from waypoint.telemetry import tool_span
from waypoint.tools import ToolContext
from waypoint.types import ForkOrigin, RunToolInput, ToolResult
from waypoint.versions import SHORT

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
        outcome=ToolOutcome(effect.outcome),
        from_ledger=from_ledger,
    )


def same_arguments(a: str, b: str) -> bool:
    return canonical_arguments(a) == canonical_arguments(b)


def matches(source: Effect | None, inp: RunToolInput) -> bool:
    """The recorded call is this call: same tool, same canonical arguments (step and position are the lookup's)."""
    return source is not None and source.tool == inp.call.name and same_arguments(source.arguments, inp.call.arguments)


@dataclass(frozen=True)
class Invocation:
    """A resolved call: how to run it, and the MCP server it goes to (None for a Python tool)."""

    run: Callable[[], Awaitable[str]]
    mcp_server: str | None = None


class ToolActivities:
    def __init__(
        self,
        store: RunStore,
        agents: AgentRegistry,
        settings: Settings,
        *,
        memory: Any = None,
        mcp: MCPHub | None = None,
    ):
        self.store = store
        self.agents = agents
        self.settings = settings
        self.memory = memory  # the episodic store, on the memory worker (for memory tools)
        self.mcp = mcp or MCPHub(store)
        self._origins: dict[str, ForkOrigin | None] = {}
        self._scopes: dict[str, RecallScope] = {}

    async def _ledger(self, key: str, op: Any) -> Any:
        async with heartbeating(key):
            return await patiently(op, patience_seconds=LEDGER_PATIENCE_SECONDS)

    @activity.defn(name=Activity.RUN_TOOL)
    @boundary
    async def run_tool(self, inp: RunToolInput) -> ToolResult:
        # Heartbeats start with the attempt and last to its end (ledger reads, a rerun's lookups, the
        # tool, the ledger write), never more than a second apart. Their details: the call's key and,
        # for an MCP task, its id (a retry after a worker crash resumes polling that task).
        progress: dict[str, Any] = {"key": inp.idempotency_key, "mcp_task": previous_task()}
        async with heartbeating(progress):
            return await self._run_tool(inp, progress)

    async def _run_tool(self, inp: RunToolInput, progress: dict[str, Any]) -> ToolResult:
        key = inp.idempotency_key
        call = inp.call
        done = await self._ledger(key, lambda: self.store.ledger.recorded_effect(inp.tenant_id, key))
        if done is not None:
            activity.logger.info("tool call %s already in the ledger: not running it again", key)
            return result_of(done, call.id, from_ledger=True)

        answered = await self._from_record(inp)
        if answered is not None:
            return answered
        started = time.monotonic()
        attempt = activity.info().attempt
        try:
            invocation = await self._resolve(inp, attempt, progress)
        except UnknownTool as exc:
            output, outcome = f"error: {await self._removed(inp) or exc}", ToolOutcome.BAD_CALL
        except ToolError as exc:
            output, outcome = f"error: {exc}", ToolOutcome.BAD_CALL
        else:
            try:
                with tool_span(
                    call.name,
                    call.id,
                    run_id=inp.run_id,
                    step=inp.step,
                    tenant=inp.tenant_id,
                    attempt=attempt,
                    mcp_server=invocation.mcp_server,
                ):
                    output, outcome = await invocation.run(), ToolOutcome.OK
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
        await self._ledger(key, lambda: self.store.ledger.record_effect(inp.tenant_id, effect))
        return result_of(effect, call.id, from_ledger=False)

    async def _removed(self, inp: RunToolInput) -> str | None:
        """Why a tool the run's agent version offered is not here: a deploy since the run started
        removed it (None when the version never had it: a plain unknown tool)."""
        fingerprint = await self.store.versions.run_fingerprint(inp.tenant_id, inp.run_id)
        if fingerprint is None:
            return None
        version = await self.store.versions.agent_version(inp.tenant_id, fingerprint)
        if inp.call.name not in version.tool_names:
            return None
        return (
            f"tool {inp.call.name!r} was removed from agent {inp.agent!r} by a deploy after this run started "
            f"(it started with agent version {fingerprint[:SHORT]}): the call did not run. To finish such runs, "
            "deploy the tool back until they end; or rerun the run on the new version "
            f"(`waypoint rerun {inp.run_id}`)"
        )

    async def _from_record(self, inp: RunToolInput) -> ToolResult | None:
        """In a rerun with recorded tools: the source run's result of the matching call (same step,
        same position, same tool, same canonical arguments), without running the tool; for a call
        that matches none, a "not recorded" error unless the tool is replay-safe (None: run it)."""
        source_run = await self._recorded_source(inp)
        if source_run is None:
            return None
        call = inp.call
        source = await self._source_call(inp, source_run)
        if matches(source, inp):
            assert source is not None
            output, outcome = source.output, source.outcome
            activity.logger.info(
                "rerun %s: %s answered from %s", inp.run_id, inp.idempotency_key, source.idempotency_key
            )
        elif await self._replay_safe(inp):
            return None
        else:
            recorded = f"{source.tool}({source.arguments})" if source is not None else "no call"
            output = (
                f"error: not recorded: this is a rerun with recorded tool results, and {source_run} made "
                f"{recorded} at step {inp.step} position {inp.call_index}, not {call.name}({call.arguments}); "
                f"{call.name} is neither replay_safe nor read-only, so it did not run"
            )
            outcome = ToolOutcome.NOT_RECORDED
        effect = Effect(
            idempotency_key=inp.idempotency_key,
            run_id=inp.run_id,
            step=inp.step,
            call_index=inp.call_index,
            tool=call.name,
            arguments=call.arguments,
            output=output,
            outcome=outcome,
            duration_ms=0,
            attempt=activity.info().attempt,
        )
        await self._ledger(inp.idempotency_key, lambda: self.store.ledger.record_effect(inp.tenant_id, effect))
        return result_of(effect, call.id, from_ledger=False)

    @activity.defn(name=Activity.RECORDED_CALLS)
    @boundary
    async def recorded_calls(self, calls: list[RunToolInput]) -> list[str]:
        """The ids of those calls (of one step of a rerun with recorded tools) that match a recorded
        call of the source run: `run_tool` answers them from the record, so the workflow does not
        wait for a human to approve them (the tool does not run)."""
        found = []
        for inp in calls:
            source_run = await self._recorded_source(inp)
            if source_run is not None and matches(await self._source_call(inp, source_run), inp):
                found.append(inp.call.id)
        return found

    async def _recorded_source(self, inp: RunToolInput) -> str | None:
        """The source run when this run is a rerun with recorded tools, else None: from the input, or
        (inputs from before it carried it) from the run's origin in Postgres."""
        if inp.origin_known:
            return inp.recorded_from
        origin = await self._ledger(inp.idempotency_key, lambda: self._origin(inp.tenant_id, inp.run_id))
        if origin is None or not origin.answers_from_record:
            return None
        return origin.run_id

    async def _source_call(self, inp: RunToolInput, source_run: str) -> Effect | None:
        """The source run's ledger row of the call at the same step and position, if any."""
        result: Effect | None = await self._ledger(
            inp.idempotency_key,
            lambda: self.store.ledger.recorded_call(inp.tenant_id, source_run, inp.step, inp.call_index),
        )
        return result

    async def _origin(self, tenant_id: str, run_id: str) -> ForkOrigin | None:
        """Where the run came from (cached: it never changes), None for a run without a parent."""
        if run_id not in self._origins:
            payload = await self.store.run_started(tenant_id, run_id)
            fork = (payload or {}).get("fork")
            if len(self._origins) > 1024:
                self._origins.clear()
            self._origins[run_id] = ForkOrigin(**fork) if fork else None
        return self._origins[run_id]

    async def _recall_scope(self, inp: RunToolInput) -> RecallScope:
        """What the run may recall (cached: a run's lineage never changes), for its memory tools."""
        if inp.run_id not in self._scopes:
            chain = await self._ledger(
                inp.idempotency_key, lambda: self.store.working.fork_chain(inp.tenant_id, inp.run_id)
            )
            if len(self._scopes) > 1024:
                self._scopes.clear()
            self._scopes[inp.run_id] = recall_scope(chain)
        return self._scopes[inp.run_id]

    async def _replay_safe(self, inp: RunToolInput) -> bool:
        """The agent's tool is `replay_safe` or `read_only`, or the MCP tool the run recorded under
        that name is read-only by its server's annotations (readOnlyHint)."""
        agent = self.agents.get(inp.agent)
        if agent.has_tool(inp.call.name):
            return agent.tool(inp.call.name).replay_safe
        if not agent.mcp:
            return False
        recorded: dict[str, MCPTool] = await self._ledger(
            inp.idempotency_key, lambda: self.mcp.recorded(inp.tenant_id, inp.run_id)
        )
        remote = recorded.get(inp.call.name)
        return remote is not None and remote.read_only

    async def _resolve(self, inp: RunToolInput, attempt: int, progress: dict[str, Any]) -> Invocation:
        """The agent's own tool of that name, else the MCP tool the run recorded under it; a bad call
        (unknown tool, arguments that do not fit its schema) raises ToolError or UnknownTool."""
        call = inp.call
        agent = self.agents.get(inp.agent)
        if agent.has_tool(call.name) or not agent.mcp:
            tool = agent.tool(call.name)
            kwargs = tool.parse_arguments(call.arguments)
            ctx = ToolContext(
                run_id=inp.run_id,
                tenant_id=inp.tenant_id,
                step=inp.step,
                call_index=inp.call_index,
                workspace=self.settings.resolved_workspace,
                attempt=attempt,
                agent=inp.agent,
                memory=self.memory,
                recall=await self._recall_scope(inp) if tool.memory and self.memory is not None else None,
            )
            return Invocation(lambda: tool.call(kwargs, ctx))
        recorded: dict[str, MCPTool] = await self._ledger(
            inp.idempotency_key, lambda: self.mcp.recorded(inp.tenant_id, inp.run_id)
        )
        if call.name not in recorded:
            agent.tool(call.name, also=recorded)  # raises UnknownTool, naming every tool the model may use
        remote = recorded[call.name]
        server = agent.mcp_server(remote.server)
        arguments = remote.parse_arguments(call.arguments)

        async def on_task(task_id: str | None) -> None:
            progress["mcp_task"] = task_id
            # Now rather than at the next beat; Temporal's client still sends it within 0.8 x the
            # heartbeat timeout. From then on, a retry after a crash polls this task.
            activity.heartbeat(progress)

        async def run() -> str:
            text, is_error = await self.mcp.call(
                server,
                remote,
                arguments,
                key=inp.idempotency_key,
                timeout=attempt_seconds_left(),
                task_id=progress["mcp_task"],
                on_task=on_task,
            )
            if is_error:
                raise ToolError(text or f"{call.name} failed without a message")
            return text

        return Invocation(run, mcp_server=server.name)


def previous_task() -> str | None:
    """The MCP task an earlier attempt of this call started (from its last heartbeat), if any."""
    for detail in activity.info().heartbeat_details:
        if isinstance(detail, dict) and isinstance(detail.get("mcp_task"), str):
            return str(detail["mcp_task"])
    return None


def attempt_seconds_left() -> float:
    """What is left of this attempt's start-to-close timeout, less a second to report a timeout
    ourselves (with its reason) before Temporal cuts the attempt off."""
    info = activity.info()
    total = info.start_to_close_timeout.total_seconds() if info.start_to_close_timeout else 300.0
    elapsed = (datetime.now(UTC) - info.started_time).total_seconds()
    return max(total - elapsed - 1.0, 0.5)
