"""flow.py's agent, loaded by its workers (`WAYPOINT_AGENTS=_flow_agents`): peers.py's tick agent on
the model key the limits file names (`openai:fake-model`), without long-term memory, so every step
is one model call, one tick and its checkpoint."""

from __future__ import annotations

from _peers_common import INSTRUCTIONS, TOOL_DOC, TOOL_NAME, tick_output

from waypoint.agents import Agent
from waypoint.tools import tool

AGENT = "flow"
MODEL = "openai:fake-model"


async def tick(n: int, of: int, pad: int, hold: float, tag: str) -> str:
    return tick_output(n, of, pad, hold, tag)


flow = Agent(
    name=AGENT,
    instructions=INSTRUCTIONS,
    model=MODEL,
    tools=(tool(tick, name=TOOL_NAME, description=TOOL_DOC),),
    max_steps=1_000,
    memory=False,
)
