"""Agents of the budget pool tests (tests/test_budget_pool.py); a module of its own, so a worker process
started for a test loads them with WAYPOINT_AGENTS=tests.budget_agents."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from waypoint import Agent, ScriptedModel, ScriptedTurn, tool

COUNT_STEPS = 8  # a counter's tally calls before it answers
KILL_MARKER = "budget-call-started"  # written by budget_crashy's slow model call, before it waits to be killed


@tool
def tally(n: int) -> str:
    """Count to n."""
    return f"counted to {n}"


counter = Agent(
    name="counter",
    description="Counts, one tally call a step.",
    instructions="Count with tally, step by step, then say how far you got.",
    model=ScriptedModel(
        [*(ScriptedTurn(tool_calls=[("tally", {"n": i})]) for i in range(COUNT_STEPS)), ScriptedTurn(content="counted")]
    ),
    tools=(tally,),
    memory=False,
)

# Three counters at once, in its first turn (the reported tree: a parent and 3 parallel sub-agents).
fan_counter = Agent(
    name="fan_counter",
    instructions="Hand three parts to counter at once, then sum up.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("counter", {"task": f"part {i}"}) for i in range(3)]),
            ScriptedTurn(content="all parts counted"),
        ]
    ),
    agents=(counter,),
    memory=False,
)


async def _until_killed(messages: list) -> ScriptedTurn:
    """The first attempt marks the workspace and waits for its worker to be killed; a retry answers."""
    marker = Path(os.environ.get("WAYPOINT_WORKSPACE", ".")) / KILL_MARKER
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("started")
        await asyncio.Event().wait()  # held until the test SIGKILLs the worker
    return ScriptedTurn(content="counted, after a crash")


budget_crashy = Agent(
    name="budget_crashy",
    instructions="Count once, then answer (slowly, the first time).",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("tally", {"n": 1})]), _until_killed]),
    tools=(tally,),
    memory=False,
)
