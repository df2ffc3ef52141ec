"""Waypoint's side of subagents.py: agents defined as a user would, loaded by `WAYPOINT_AGENTS=_subagents_waypoint`.

- `fanout_worker`: peers.py's agent under another name (`model="openai:<name>"`, the trivial
  `tick` tool, everything else default: memory on, inline compaction, the default context budget);
  it is the sub-agent, and on its own the one agent that runs the same steps in sequence;
- `fanout_lead`: the lead, with `fanout_worker` as its sub-agent and `tick` as a tool of its own,
  `max_parallel_agents` from SUBAGENTS_CAP (default 8, Waypoint's default);
- `fanout_lead_wide`: the same lead with a cap of SUBAGENTS_WIDE (default 20: no sub-agent waits).
"""

from __future__ import annotations

import os

from _peers_common import INSTRUCTIONS, MODEL_NAME, TOOL_DOC, TOOL_NAME
from _peers_waypoint import MAX_STEPS, tick
from _subagents_common import LEAD_INSTRUCTIONS, WORKER, WORKER_DOC

from waypoint.agents import Agent
from waypoint.tools import tool

LEAD = "fanout_lead"
WIDE_LEAD = "fanout_lead_wide"
CAP = int(os.environ.get("SUBAGENTS_CAP", "8"))
WIDE = int(os.environ.get("SUBAGENTS_WIDE", "20"))

_tick = tool(tick, name=TOOL_NAME, description=TOOL_DOC)
MODEL = f"openai:{MODEL_NAME}"

fanout_worker = Agent(
    name=WORKER, description=WORKER_DOC, instructions=INSTRUCTIONS, model=MODEL, tools=(_tick,), max_steps=MAX_STEPS
)


def _lead(name: str, cap: int) -> Agent:
    return Agent(
        name=name,
        instructions=LEAD_INSTRUCTIONS,
        model=MODEL,
        tools=(_tick,),
        agents=(fanout_worker,),
        max_parallel_agents=cap,
        max_steps=MAX_STEPS,
    )


fanout_lead = _lead(LEAD, CAP)
fanout_lead_wide = _lead(WIDE_LEAD, WIDE)
