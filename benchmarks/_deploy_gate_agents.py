"""The agent of deploy_gate.py: scripted like the demo (no model server), one tool call, then an answer."""

from __future__ import annotations

from waypoint import Agent, ScriptedModel, ScriptedTurn, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


gate_agent = Agent(
    name="gate-bench",
    instructions="Add two numbers, then answer.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 3})]), ScriptedTurn(content="5")]),
    tools=(add,),
)
