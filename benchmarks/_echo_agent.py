"""The scripted echo agent of rerun.py and evals.py: `steps` steps that each call `echo` once, then
the answer "done". The model is `ScriptedModel`, so a step costs no model time and a rerun with
the same script matches its source call for call.

evals.py's worker processes load this module (`WAYPOINT_AGENTS=_echo_agent`, with this folder on
PYTHONPATH) and so register `EVALS_AGENT`; rerun.py builds its own with `echo_agent`.
"""

from __future__ import annotations

from waypoint.agents import Agent
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.tools import tool

EVALS_STEPS = 3  # "a few tool calls per run"


@tool
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def echo_agent(name: str, steps: int) -> Agent:
    turns = [ScriptedTurn(tool_calls=[("echo", {"text": f"step {i}"})]) for i in range(1, steps + 1)]
    return Agent(
        name=name,
        instructions="Call echo until the script says you are done.",
        model=ScriptedModel([*turns, ScriptedTurn(content="done")]),
        tools=(echo,),
        max_steps=steps + 1,
        memory=False,
    )


EVALS_AGENT = echo_agent("bench-evals", EVALS_STEPS)
