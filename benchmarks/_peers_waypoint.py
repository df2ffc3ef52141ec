"""Waypoint's side of peers.py: agents defined as a user would, loaded by `WAYPOINT_AGENTS=_peers_waypoint`.

- `peers-waypoint`: `model="openai:<name>"` and one trivial tool, everything else default
  (memory on, inline compaction on, the default context budget);
- `peers-waypoint-keyed`: the same, with the tool keyed by `ctx.idempotency_key` as Waypoint's
  README asks of a tool with an external side effect (only the kill test tells them apart);
- `peers-waypoint-local`: the trivial tool marked `@tool(local=True)`, when this Waypoint has it.
"""

from __future__ import annotations

from _peers_common import INSTRUCTIONS, MODEL_NAME, TOOL_DOC, TOOL_NAME, async_effect_then_hold, tick_output

from waypoint.agents import Agent
from waypoint.tools import ToolContext, tool

AGENT = "peers-waypoint"
KEYED_AGENT = "peers-waypoint-keyed"
LOCAL_AGENT = "peers-waypoint-local"
MAX_STEPS = 10_000  # the benchmark's runs set their own step budget


async def tick(n: int, of: int, pad: int, hold: float, tag: str) -> str:
    await async_effect_then_hold(n, hold, tag)
    return tick_output(n, of, pad, hold, tag)


async def keyed_tick(ctx: ToolContext, n: int, of: int, pad: int, hold: float, tag: str) -> str:
    await async_effect_then_hold(n, hold, tag, key=ctx.idempotency_key)
    return tick_output(n, of, pad, hold, tag)


def _agent(name: str, tick_tool: object) -> Agent:
    return Agent(
        name=name,
        instructions=INSTRUCTIONS,
        model=f"openai:{MODEL_NAME}",
        tools=(tick_tool,),  # type: ignore[arg-type]
        max_steps=MAX_STEPS,
    )


peers_waypoint = _agent(AGENT, tool(tick, name=TOOL_NAME, description=TOOL_DOC))
peers_waypoint_keyed = _agent(KEYED_AGENT, tool(keyed_tick, name=TOOL_NAME, description=TOOL_DOC))

try:
    _local_tick = tool(tick, name=TOOL_NAME, description=TOOL_DOC, local=True)
except TypeError:  # this Waypoint has no local tools yet
    _local_tick = None
peers_waypoint_local = _agent(LOCAL_AGENT, _local_tick) if _local_tick is not None else None
