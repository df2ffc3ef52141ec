"""The run's writes to the Postgres mirror, as activities: start, each step, status, finish.

The writes themselves are `waypoint.store.RunStore`'s, idempotent under activity retry
(the step number comes from the workflow, and a second `record_step` for a step that has a
checkpoint changes nothing). What is here is Temporal's part: the attempt number, the error
boundary, and resolving the run's plan from its agent.

A run of an agent with MCP servers lists their tools here, once, on a worker: the tools go into
the `run_started` event (what the model and `run_tool` use for the rest of the run) and their
ToolSpecs into the plan (what the workflow needs), so neither replay nor a later step depends on
a live server. A retried start returns the plan the first attempt recorded.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from temporalio import activity

from waypoint import telemetry
from waypoint.activities.boundary import attempt, boundary, gives_up, heartbeating
from waypoint.activities.tools import preview
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.mcp import MCPHub
from waypoint.names import Activity, RunStatus
from waypoint.retry import START_ATTEMPTS
from waypoint.store import RunStore
from waypoint.store.rows import RunRow
from waypoint.store.steps import NewRun
from waypoint.types import (
    FailoverRecord,
    FinishRunInput,
    ForkOrigin,
    RunPlan,
    RunResult,
    SetStatusInput,
    StartRunInput,
    StepRecord,
)
from waypoint.versions import AgentVersion, agent_tool_schemas


def first_set(a: float | None, b: float | None) -> Any:
    return a or b


def smallest(a: float | None, b: float | None) -> Any:
    return min((v for v in (a, b) if v), default=None)


def annotate_models(row: RunRow) -> None:
    """The run-level model attributes on this attempt's span: `waypoint.run.model`, the model the run
    calls now, and `waypoint.run.models`, every model it has been on (the chat spans name each call's)."""
    telemetry.annotate(**{"run.model": row.current_model, "run.models": list(row.models_used)})


class CheckpointActivities:
    def __init__(
        self,
        store: RunStore,
        agents: AgentRegistry,
        *,
        memory_queue: str | None = None,
        memory_here: bool = False,
        mcp: MCPHub | None = None,
        settings: Settings | None = None,
    ):
        self.store = store
        # How many sub-agent runs one run of a tenant may have at once (the settings' caps).
        self.agents_cap = settings.parallel_agents_cap if settings is not None else lambda tenant: 8
        self.agents = agents
        # The task queue of the worker that owns episodic memory; None when there is none.
        self.memory_queue = memory_queue
        # This process owns it too, and this worker's model calls use it (see RunPlan.memory_on_main_queue).
        self.memory_here = memory_here
        self.mcp = mcp or MCPHub(store)

    def plan(self, inp: StartRunInput) -> RunPlan:
        """The run's plan: the agent's definition, with the run's own model and budgets over it."""
        agent = self.agents.get(inp.agent)
        budget = inp.budget
        # A run's own budget replaces its agent's; a sub-agent run's (what its caller has left) caps it.
        pick = smallest if inp.parent is not None else first_set
        # How deep the caller lets its tree grow caps how deep this agent would let it.
        caller_depth = inp.parent.max_depth if inp.parent is not None else None
        # A run given a model (`--model`, `rerun --model`) calls that one only: failover is the agent's.
        own_model = not inp.pin_model and (inp.model is None or inp.model == agent.model_spec)
        plan = RunPlan(
            model=inp.model or agent.model_spec,
            max_steps=budget.max_steps or agent.max_steps,
            tools=agent.tool_specs(),
            retry=agent.model_retry,
            max_tokens=pick(budget.max_tokens, agent.max_tokens),
            max_cost_usd=pick(budget.max_cost_usd, agent.max_cost_usd),
            deadline_seconds=pick(budget.deadline_seconds, agent.deadline_seconds),
            max_repairs=agent.max_repairs,
            continue_as_new_every=agent.continue_as_new_every,
            context_tokens=agent.context_tokens,
            recall_k=agent.recall_k if agent.memory and self.memory_queue else 0,
            memory_queue=self.memory_queue,
            memory_on_main_queue=self.memory_here and self.memory_queue is not None,
            compact_at=agent.compact_at,
            agents=agent.agent_names,
            max_parallel_agents=min(agent.max_parallel_agents, self.agents_cap(inp.tenant_id)),
            max_agent_depth=min(agent.max_agent_depth, caller_depth or agent.max_agent_depth),
            depth=inp.parent.depth if inp.parent is not None else 0,
            output_schema=agent.output_schema,
            fallback_models=agent.fallback_models if own_model else [],
            failover_after=agent.failover_after,
        )
        return replace(plan, start_step=inp.fork.step) if inp.fork is not None else plan

    @activity.defn(name=Activity.START_RUN)
    @boundary
    @gives_up(START_ATTEMPTS)
    async def start_run(self, inp: StartRunInput) -> RunPlan:
        """Create the run row, its `run_started` event and checkpoint 0 (instructions + task); list
        the agent's MCP tools first, if it has MCP servers."""
        agent = self.agents.get(inp.agent)
        fork = inp.fork
        if inp.instructions and fork is not None and not fork.instructions:
            # A fork (a thread's next turn) with its own instructions heads its inherited window with them.
            fork = replace(fork, instructions=inp.instructions)
        async with heartbeating(inp.run_id):  # listing MCP tools may take a while (a server starting)
            plan = self.plan(inp)
            mcp_tools: list[dict[str, Any]] = []
            mcp_names: list[str] = []
            if agent.mcp:
                recorded = await self.store.recorded_plan(inp.tenant_id, inp.run_id)
                if recorded is not None:  # a retry after the first attempt committed
                    return recorded
                found = await self.mcp.discover(agent.name, agent.mcp, [t.name for t in agent.tools])
                plan = replace(plan, tools=[*plan.tools, *(t.spec() for t in found)])
                mcp_tools = [t.to_json() for t in found]
                mcp_names = [t.name for t in found]
            # A rerun's instructions override (`rerun --instructions`), else the run's own (an
            # assistant's), else the agent's.
            instructions = (fork.instructions if fork else None) or inp.instructions or agent.instructions
            version = AgentVersion(
                agent=agent.name,
                instructions=await self.head_instructions(inp.tenant_id, fork, instructions),
                tools=agent_tool_schemas(agent, self.agents),
                models=[plan.model, *plan.fallback_models],
                mcp_tools=mcp_names,
            )
            telemetry.annotate(
                **{"agent.fingerprint": version.fingerprint, "run.model": plan.model, "run.models": [plan.model]}
            )
            new = NewRun(
                run_id=inp.run_id,
                tenant_id=inp.tenant_id,
                agent=agent.name,
                task=inp.task,
                instructions=instructions,
                plan=plan,
                fork=fork,
                trace_id=telemetry.trace_id(),  # the run's trace, for `waypoint trace`
                mcp_tools=mcp_tools,
                parent=inp.parent,
                priority=inp.priority,
                webhook=inp.webhook,
                schedule_id=inp.schedule_id,
                assistant_id=inp.assistant_id,
                assistant_version=inp.assistant_version,
                version=version,
                batch_id=inp.batch_id,
                # A root's own max_steps bounds its whole tree's model calls; its agent's default does not.
                tree_max_steps=inp.budget.max_steps if inp.parent is None else None,
            )
            return await self.store.steps.create_run(new)

    async def head_instructions(self, tenant_id: str, fork: ForkOrigin | None, instructions: str) -> str:
        """The instructions the run's model reads: its own, except in a fork that keeps its parent's
        window (no instructions of its own), which reads the parent's head."""
        if fork is None or fork.instructions:
            return instructions
        parent = await self.store.versions.run_fingerprint(tenant_id, fork.run_id)
        if parent is not None:
            return (await self.store.versions.agent_version(tenant_id, parent)).instructions
        started = await self.store.run_started(tenant_id, fork.run_id)  # a parent from before versions
        return str((started or {}).get("instructions") or instructions)

    @activity.defn(name=Activity.RECORD_STEP)
    @boundary
    async def record_step(self, record: StepRecord) -> int:
        """Append the step's events and write its checkpoint atomically; returns the step's last seq."""
        return await self.store.steps.record_step(record, attempt=attempt())

    @activity.defn(name=Activity.RECORD_FAILOVER)
    @boundary
    async def record_failover(self, record: FailoverRecord) -> None:
        """Log a step's move to the agent's next model as a `model_failover` event (once, whatever the
        retries), with the run's row; the attempt's span says where the run is now."""
        annotate_models(await self.store.log.record_failover(record))

    @activity.defn(name=Activity.SET_STATUS)
    @boundary
    async def set_run_status(self, inp: SetStatusInput) -> None:
        """Mirror a live status change (paused, waiting for approval, running again)."""
        if inp.awaits_children and inp.tenant_id:
            status = RunStatus(inp.status)
            await self.store.trees.set_status_over_children(inp.tenant_id, inp.run_id, status, caller=inp.caller)
        elif inp.caller:  # a sub-agent run's wait for approval shows on its callers
            await self.store.trees.set_status_in_tree(
                inp.tenant_id or None, inp.run_id, RunStatus(inp.status), inp.detail
            )
        else:
            await self.store.log.set_status(inp.tenant_id or None, inp.run_id, RunStatus(inp.status), inp.detail)

    @activity.defn(name=Activity.FINISH_RUN)
    @boundary
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        """Set the final status once, with a `run_finished` event; a retry changes nothing. A run that
        could not start (`inp.start`) gets its row here, failed, with the reason."""
        if inp.start is not None:
            start = inp.start
            row = await self.store.log.record_failed_start(
                inp.tenant_id,
                inp.run_id,
                agent=start.agent,
                task=start.task,
                model=start.model or "",
                error=inp.error or "could not start",
                parent=start.parent,
                priority=start.priority,
                webhook=start.webhook,
                schedule_id=start.schedule_id,
            )
        else:
            row = await self.store.log.finish_run(
                inp.tenant_id,
                inp.run_id,
                RunStatus(inp.status),
                inp.output,
                inp.error,
                interrupted=inp.interrupted,
                output_json=json.loads(inp.output) if inp.output_is_json and inp.output is not None else None,
            )
        annotate_models(row)
        result = row.result()
        if row.caller_run_id is None:
            # A typed answer's parsed copy stays in Postgres (the client reads it there): history
            # carries the answer once, as text.
            if result.output_json is not None:
                return replace(result, output_json=None, output_stored=True)
            return result
        await self.store.trees.mirror_waiting(row.run_id, RunStatus(row.status), None)  # its callers stop waiting on it
        # A sub-agent run's caller reads the whole answer from Postgres: its history gets a preview.
        # A typed sub-agent's answer is its JSON text, which the caller's model reads as the tool's result.
        text, stored = preview(result.output or "")
        return replace(
            result, output=text if result.output is not None else None, output_stored=stored, output_json=None
        )
