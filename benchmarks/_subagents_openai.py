"""The OpenAI Agents SDK's side of subagents.py: agents as tools (`Agent.as_tool`) on Temporal's plugin.

Set up as `_peers_openai.py` is (its module docstring: the README's plugin and worker, chat
completions, tracing off), with the lead a user writes from the SDK's "agents as tools" guide:
the sub-agent is an `Agent` with the `tick` activity tool, and the lead lists
`sub_agent.as_tool(tool_name=..., tool_description=..., max_turns=...)` among its tools.

What that means on Temporal: `as_tool` runs the sub-agent's `Runner.run` inside the lead's
workflow (the plugin turns each model call into an activity; there is no child workflow), so the
whole tree is one workflow and one history, and the SDK runs the lead's tool calls of one turn
concurrently, with no cap (`as_tool` has no such option).
"""

from __future__ import annotations

from datetime import timedelta

from _peers_common import INSTRUCTIONS, MODEL_NAME
from _peers_openai import RUN_TIMEOUT, OpenAIPeerWorkflow, configure, connect, tick
from _subagents_common import LEAD_INSTRUCTIONS, WORKER, WORKER_DOC
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner
    from temporalio.openai_agents import workflow as agents_workflow

NAME = "openai-agents"
TASK_QUEUE = "subagents-openai-agents"
__all__ = ["NAME", "TASK_QUEUE", "OpenAIFanOutWorkflow", "build_worker", "connect", "start_lead"]


@workflow.defn
class OpenAIFanOutWorkflow:
    @workflow.run
    async def run(self, task: str, max_turns: int) -> str:
        tick_tool = agents_workflow.activity_as_tool(tick, start_to_close_timeout=timedelta(seconds=10))
        sub_agent = Agent(name=WORKER, instructions=INSTRUCTIONS, model=MODEL_NAME, tools=[tick_tool])
        lead = Agent(
            name="fanout_lead",
            instructions=LEAD_INSTRUCTIONS,
            model=MODEL_NAME,
            tools=[sub_agent.as_tool(tool_name=WORKER, tool_description=WORKER_DOC, max_turns=max_turns), tick_tool],
        )
        result = await Runner.run(lead, input=task, max_turns=max_turns)
        return str(result.final_output)


def build_worker(client: Client, task_queue: str = TASK_QUEUE) -> Worker:
    configure()
    return Worker(
        client, task_queue=task_queue, workflows=[OpenAIPeerWorkflow, OpenAIFanOutWorkflow], activities=[tick]
    )


async def start_lead(client: Client, workflow_id: str, task: str, max_turns: int, task_queue: str = TASK_QUEUE) -> str:
    await client.start_workflow(
        OpenAIFanOutWorkflow.run,
        args=[task, max_turns],
        id=workflow_id,
        task_queue=task_queue,
        execution_timeout=RUN_TIMEOUT,
    )
    return workflow_id
