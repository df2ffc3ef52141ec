"""The bare-Temporal baseline for step_overhead.py: per step, one "model" activity and one "tool" activity.

It lives in its own module, importing only temporalio and the stdlib, because the
workflow sandbox re-imports the module a workflow is defined in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

MODEL_ACTIVITY = "baseline_model"
TOOL_ACTIVITY = "baseline_tool"
TIMEOUT = timedelta(seconds=30)


@dataclass(frozen=True)
class ModelInput:
    step: int
    tool_steps: int


@dataclass(frozen=True)
class ModelAnswer:
    tool_text: str | None = None
    content: str | None = None


@dataclass(frozen=True)
class BaselineInput:
    tool_steps: int


@activity.defn(name=MODEL_ACTIVITY)
async def fake_model(inp: ModelInput) -> ModelAnswer:
    # Same script as the Waypoint agent: a tool call per step, then an answer.
    if inp.step <= inp.tool_steps:
        return ModelAnswer(tool_text=f"step {inp.step}")
    return ModelAnswer(content="done")


@activity.defn(name=TOOL_ACTIVITY)
async def echo(text: str) -> str:
    return text


@workflow.defn(name="BaselineWorkflow")
class BaselineWorkflow:
    @workflow.run
    async def run(self, inp: BaselineInput) -> int:
        step = 0
        while True:
            step += 1
            answer = await workflow.execute_activity(
                fake_model, ModelInput(step=step, tool_steps=inp.tool_steps), start_to_close_timeout=TIMEOUT
            )
            if answer.tool_text is None:
                return step
            await workflow.execute_activity(echo, answer.tool_text, start_to_close_timeout=TIMEOUT)
