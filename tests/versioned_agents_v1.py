"""Agent `versioned` as deploy 1 defines it (tests/test_agent_versions.py): instructions A, tools T1."""

from __future__ import annotations

from waypoint import Agent, tool

INSTRUCTIONS = "Version A: look things up, then archive them."


@tool(requires_approval=True)
async def lookup(query: str) -> str:
    """Look a query up (version A)."""
    return f"found {query}"


@tool
async def archive(note: str) -> str:
    """Archive a note (only version A has this tool)."""
    return "archived"


versioned = Agent(name="versioned", instructions=INSTRUCTIONS, model="openai:gpt-4o-mini", tools=[lookup, archive])
