"""Agent `versioned` as deploy 2 defines it (tests/test_agent_versions.py): instructions B, tools T2
(`lookup` described and typed anew, `archive` removed, `summarize` added)."""

from __future__ import annotations

from waypoint import Agent, tool

INSTRUCTIONS = "Version B: look things up, then summarize them."


@tool(requires_approval=True)
async def lookup(query: str, limit: int = 3) -> str:
    """Look a query up, at most `limit` results (version B)."""
    return f"found {query} (B)"


@tool
async def summarize(text: str) -> str:
    """Summarize a text (only version B has this tool)."""
    return "summary"


versioned = Agent(name="versioned", instructions=INSTRUCTIONS, model="openai:gpt-4o-mini", tools=[lookup, summarize])
