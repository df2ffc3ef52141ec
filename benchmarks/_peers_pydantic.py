"""pydantic-ai's side of peers.py, set up as its Temporal guide shows (docs/durable_execution/temporal.md,
pydantic-ai 2.68): an `Agent` with a `name` and the `TemporalDurability()` capability, a workflow that
subclasses `PydanticAIWorkflow` and lists the agent in `__pydantic_ai_agents__`, a client and a worker
with `PydanticAIPlugin()`. Model requests and the tool each run as an activity with the defaults
(a 60 s start-to-close timeout, Temporal's default retry policy).

Set up beyond the guide's hello world, each from pydantic-ai's own docs:
- a chat-completions model (`OpenAIChatModel`: the `openai:` prefix means the Responses API, which
  the fake server does not speak), on an `OpenAIProvider` whose client has `max_retries=0`, as the
  guide's "Activity Retries" section recommends, so Temporal owns the retries (Waypoint and the
  OpenAI Agents plugin do the same);
- `UsageLimits(request_limit=...)`: the default of 50 requests would stop a 50-step run.
"""

from __future__ import annotations

from datetime import timedelta

from _peers_common import INSTRUCTIONS, MODEL_NAME, async_effect_then_hold, tick_output
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from openai import AsyncOpenAI
    from pydantic_ai import Agent, UsageLimits
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

NAME = "pydantic-ai"
TASK_QUEUE = "peers-pydantic-ai"
RUN_TIMEOUT = timedelta(minutes=30)


async def tick(n: int, of: int, pad: int, hold: float, tag: str) -> str:
    """Advance the count by one and return the tick."""
    await async_effect_then_hold(n, hold, tag)
    return tick_output(n, of, pad, hold, tag)


agent = Agent(
    # Base URL and key from OPENAI_BASE_URL / OPENAI_API_KEY, as the openai SDK reads them.
    OpenAIChatModel(MODEL_NAME, provider=OpenAIProvider(openai_client=AsyncOpenAI(max_retries=0))),
    name="peers_pydantic",
    instructions=INSTRUCTIONS,
    tools=[tick],
    capabilities=[TemporalDurability()],
)


@workflow.defn
class PydanticPeerWorkflow(PydanticAIWorkflow):
    __pydantic_ai_agents__ = [agent]

    @workflow.run
    async def run(self, task: str, request_limit: int) -> str:
        result = await agent.run(task, usage_limits=UsageLimits(request_limit=request_limit))
        return result.output


async def connect(address: str) -> Client:
    return await Client.connect(address, plugins=[PydanticAIPlugin()])


def build_worker(client: Client, task_queue: str = TASK_QUEUE) -> Worker:
    return Worker(client, task_queue=task_queue, workflows=[PydanticPeerWorkflow])


async def start(client: Client, run_id: str, task: str, steps: int, task_queue: str = TASK_QUEUE) -> object:
    """Start a run of `steps` model requests at most; returns the workflow handle."""
    return await client.start_workflow(
        PydanticPeerWorkflow.run,
        args=[task, steps + 5],
        id=run_id,
        task_queue=task_queue,
        execution_timeout=RUN_TIMEOUT,
    )
