"""Memory tools an agent calls itself, MemGPT-style: search, save a fact, pin a decision.

Add them to an agent with `tools=[*MEMORY_TOOLS, ...]`. They are `memory` tools: the
workflow runs them on the memory worker's task queue, whose process owns the store.
"""

from __future__ import annotations

from waypoint.errors import ToolError
from waypoint.memory import Episode, EpisodicStore
from waypoint.memory.steps import recall_search
from waypoint.names import EpisodeKind
from waypoint.tools import ToolContext, tool

SAVED_IMPORTANCE = 0.5
DECISION_IMPORTANCE = 0.9


async def _save(ctx: ToolContext, kind: str, text: str, importance: float) -> Episode:
    """Store one episode of this call (its index is the call's, so a retry rewrites it)."""
    episode = Episode(
        tenant=ctx.tenant_id,
        agent=ctx.agent,
        run_id=ctx.run_id,
        step=ctx.step,
        kind=kind,
        text=text.strip(),
        importance=importance,
        index=ctx.call_index,
        root_run_id=ctx.recall.tree if ctx.recall is not None else None,  # the run's tree of sub-agent runs
    )
    await _store(ctx).upsert([episode])
    return episode


def _store(ctx: ToolContext) -> EpisodicStore:
    if ctx.memory is None:
        raise ToolError("long-term memory is not available on this worker")
    store: EpisodicStore = ctx.memory
    return store


@tool(memory=True, timeout=60)
async def memory_search(ctx: ToolContext, query: str, k: int = 5) -> str:
    """Search your long-term memory (earlier steps and runs, saved facts, decisions) for `query`."""
    if not query.strip():
        raise ToolError("the query is empty")
    found = max(1, min(k, 20))
    if ctx.recall is None:
        hits = await _store(ctx).search(ctx.tenant_id, query, k=found, agent=ctx.agent or None)
    else:  # what the run may recall: a rerun never finds its original's later steps
        hits = await recall_search(_store(ctx), ctx.tenant_id, query, found, ctx.agent or None, ctx.recall)
    if not hits:
        return "nothing found"
    return "\n".join(
        f"[run {h.episode.run_id}, step {h.episode.step}, {h.episode.kind}] {h.episode.text}" for h in hits
    )


@tool(memory=True, timeout=60)
async def memory_save(ctx: ToolContext, text: str, importance: float = SAVED_IMPORTANCE) -> str:
    """Save a fact to long-term memory, for later steps and later runs. `importance` is 0 to 1."""
    if not text.strip():
        raise ToolError("the text is empty")
    if not 0.0 <= importance <= 1.0:
        raise ToolError("importance must be between 0 and 1")
    episode = await _save(ctx, EpisodeKind.FACT, text, importance)
    return f"saved: {episode.text}"


@tool(memory=True, timeout=60)
async def pin_decision(ctx: ToolContext, text: str) -> str:
    """Record a decision: it stays, verbatim, in your working memory for the rest of the run."""
    if not text.strip():
        raise ToolError("the decision is empty")
    decision = (await _save(ctx, EpisodeKind.DECISION, text, DECISION_IMPORTANCE)).text
    return decision  # the pinned text is this output, verbatim


MEMORY_TOOLS = (memory_search, memory_save, pin_decision)
