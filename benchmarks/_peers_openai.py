"""The OpenAI Agents SDK's side of peers.py, with Temporal's plugin (`temporalio-openai-agents` 1.1.0,
`temporalio.openai_agents`), set up as its README shows: a workflow that builds an `Agent` and calls
`Runner.run`, the tool as a Temporal activity through `workflow.activity_as_tool(...,
start_to_close_timeout=timedelta(seconds=10))` (the README's weather example) registered on the worker,
and a client whose `OpenAIAgentsPlugin` has `ModelActivityParameters(start_to_close_timeout=30 s)` (the
README's worker). The plugin's default model provider is kept (an `AsyncOpenAI(max_retries=0)`).

Set up beyond the README, each from the OpenAI Agents SDK's own docs:
- `set_default_openai_api("chat_completions")` ("Responses API support" in its models guide: the
  SDK speaks the Responses API by default, the fake server only chat completions; base URL and key
  come from OPENAI_BASE_URL / OPENAI_API_KEY, as that section says);
- tracing off with `OPENAI_AGENTS_DISABLE_TRACING=1` (its tracing guide): traces are uploaded to
  OpenAI's servers otherwise, and this machine is offline;
- `Runner.run(max_turns=...)`: the default of 10 turns would stop a 50-step run.
"""

from __future__ import annotations

import os
from datetime import timedelta

from _peers_common import INSTRUCTIONS, MODEL_NAME, async_effect_then_hold, tick_output
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner, set_default_openai_api
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents import workflow as agents_workflow

NAME = "openai-agents"
TASK_QUEUE = "peers-openai-agents"
RUN_TIMEOUT = timedelta(minutes=30)


@activity.defn(name="tick")
async def tick(n: int, of: int, pad: int, hold: float, tag: str) -> str:
    """Advance the count by one and return the tick."""
    await async_effect_then_hold(n, hold, tag)
    return tick_output(n, of, pad, hold, tag)


@workflow.defn
class OpenAIPeerWorkflow:
    @workflow.run
    async def run(self, task: str, max_turns: int) -> str:
        agent = Agent(
            name="peers_openai",
            instructions=INSTRUCTIONS,
            model=MODEL_NAME,
            tools=[agents_workflow.activity_as_tool(tick, start_to_close_timeout=timedelta(seconds=10))],
        )
        result = await Runner.run(agent, input=task, max_turns=max_turns)
        return str(result.final_output)


def configure() -> None:
    """Process-wide settings the SDK reads: call before building the client and worker."""
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_default_openai_api("chat_completions")


async def connect(address: str) -> Client:
    configure()
    plugin = OpenAIAgentsPlugin(model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)))
    return await Client.connect(address, plugins=[plugin])


def build_worker(client: Client, task_queue: str = TASK_QUEUE) -> Worker:
    configure()
    return Worker(client, task_queue=task_queue, workflows=[OpenAIPeerWorkflow], activities=[tick])


async def start(client: Client, run_id: str, task: str, steps: int, task_queue: str = TASK_QUEUE) -> object:
    """Start a run of `steps` model requests at most; returns the workflow handle."""
    return await client.start_workflow(
        OpenAIPeerWorkflow.run,
        args=[task, steps + 5],
        id=run_id,
        task_queue=task_queue,
        execution_timeout=RUN_TIMEOUT,
    )
