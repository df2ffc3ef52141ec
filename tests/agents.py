"""Agents used by the tests, defined the way a user defines theirs."""

from __future__ import annotations

from waypoint import Agent, ScriptedModel, ScriptedTurn, ToolContext, tool

EFFECTS: list[str] = []  # every call of `note` appends here, to count real side effects


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def note(ctx: ToolContext, text: str) -> str:
    """Remember a line of text."""
    EFFECTS.append(f"{ctx.idempotency_key}={text}")
    return f"noted {text!r}"


calculator = Agent(
    name="calculator",
    instructions="Add numbers with the add tool, then answer.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 3}), ("note", {"text": "adding"})]),
            lambda messages: ScriptedTurn(tool_calls=[("add", {"a": int(messages[-2]["content"]), "b": 10})]),
            lambda messages: ScriptedTurn(content=f"The answer is {messages[-1]['content']}."),
        ]
    ),
    tools=(add, note),
)

looper = Agent(
    name="looper",
    instructions="Never stops on its own.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("add", {"a": i, "b": i})]) for i in range(100)]),
    tools=(add,),
    max_steps=50,
)

clumsy = Agent(
    name="clumsy",
    instructions="Makes every mistake once, then answers.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("no_such_tool", {}), ("add", {"a": "two", "b": 1})]),
            ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 1})]),
            ScriptedTurn(content="done"),
        ]
    ),
    tools=(add,),
)

remote = Agent(
    name="remote",
    instructions="You add numbers.",
    model="openai:fake-model",
    tools=(add,),
)

TEST_AGENTS = [calculator, looper, clumsy, remote]


def _crash(messages: list) -> ScriptedTurn:
    raise KeyError("missing")


broken = Agent(name="broken", instructions="Its script has a bug.", model=ScriptedModel([_crash]))

TEST_AGENTS.append(broken)
