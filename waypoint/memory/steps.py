"""What a run's steps become in episodic memory, and what it recalls for the next one.

Pure functions of events, lineage and search hits (and the one search recall makes), shared by
the model call (which stores and recalls in the same activity) and the memory worker's own
activities.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from waypoint.memory.episode import Episode, EpisodicStore, Recalled, RecallScope
from waypoint.names import MEMORY_SAVE_TOOL, PIN_TOOL, EpisodeKind, EventKind, MemoryView
from waypoint.transcript import clip, decision_text, step_account
from waypoint.types import Memory

if TYPE_CHECKING:
    from waypoint.store.working import ForkLink  # the store (and SQLAlchemy) only for the annotation

StepEvents = Sequence[tuple[str, Mapping[str, Any]]]  # (kind, payload) in log order

STEP_IMPORTANCE = 0.3
DECISION_IMPORTANCE = 0.8
QUERY_CHARS = 1_500
APPROVAL_INDEX = 1_000  # approvals' episode indexes, apart from tool-call indexes at the same step


def step_episodes(
    tenant: str, agent: str, run_id: str, step: int, rows: StepEvents, root_run_id: str | None = None
) -> list[Episode]:
    """The episodes of one step: its account, and each human decision taken in it."""

    def episode(kind: str, text: str, importance: float, index: int = 0) -> Episode:
        return Episode(
            tenant, agent, run_id, step, kind, text, importance=importance, index=index, root_run_id=root_run_id
        )

    # Memory tools' results are not steps' news: pin_decision and memory_save store their own.
    own = [
        (k, p) for k, p in rows if not (k == EventKind.TOOL_RESULT and p.get("name") in (PIN_TOOL, MEMORY_SAVE_TOOL))
    ]
    found = [episode(EpisodeKind.STEP, step_account(step, own), STEP_IMPORTANCE)] if own else []
    approvals = [p for k, p in rows if k == EventKind.DECISION]
    for i, d in enumerate(approvals):
        text = f"At step {step}, {decision_text(d)}"
        found.append(episode(EpisodeKind.DECISION, text, DECISION_IMPORTANCE, APPROVAL_INDEX + i))
    return found


def pending_episodes(
    tenant: str, agent: str, run_id: str, pending: Mapping[int, StepEvents], root_run_id: str | None = None
) -> list[Episode]:
    """The episodes of the steps not stored yet, oldest step first (of the tree of `root_run_id`)."""
    return [
        ep
        for step, rows in sorted(pending.items())
        for ep in step_episodes(tenant, agent, run_id, step, rows, root_run_id)
    ]


def saved_memory(rows: StepEvents, sub_agents: Collection[str]) -> bool:
    """Whether a step stored what the next recall should find at once: a `memory_save` call, or a
    sub-agent's run (its episodes are of the run's tree). The next model call recalls anew then,
    instead of holding the previous call's episodes (`waypoint.working_memory.assemble_held`)."""
    return any(
        call["name"] == MEMORY_SAVE_TOOL or call["name"] in sub_agents
        for kind, payload in rows
        if kind == EventKind.MODEL_RESPONSE
        for call in payload.get("tool_calls") or []
    )


def recall_query(task: str, last_step: int, last_rows: StepEvents | None) -> str:
    """The text to recall by: the task, then the newest step's account."""
    recent = step_account(last_step, last_rows) if last_rows else ""
    return clip(f"{task}\n{recent}", QUERY_CHARS)


def memory_of(hit: Recalled) -> Memory:
    ep = hit.episode
    return Memory(
        text=ep.text,
        run_id=ep.run_id,
        step=ep.step,
        kind=ep.kind,
        score=hit.score,
        importance=ep.importance,
        stored_at=ep.first_at or ep.created_at,
        updated_at=ep.created_at,
    )


def recall_scope(chain: Sequence[ForkLink]) -> RecallScope:
    """What a run recalls, from its chain of parents (itself first; `RunStore.working.fork_chain`).

    Its own past always: itself, and each ancestor up to the step the chain left it at. Unless it
    was started with `MemoryView.ALL`, never the rest of its ancestors' episodes: their later steps
    are a future this run did not live (a rerun's original's final answer among them). With
    `MemoryView.THEN` (a rerun's or fork's default) nothing stored after its parent's checkpoint
    of the step it started from: memory as the original had it there, and as a parent that
    recalled as of an earlier time had it, that time. A run of its own recalls everything.

    And always every episode of its tree of sub-agent runs, whatever their agent: a child recalls
    its parent's and siblings' episodes, a parent its children's. For a run without caller or
    children that is its own episodes, which it recalls anyway."""
    tree = chain[0].root_run_id
    own: list[tuple[str, int | None]] = [(chain[0].run_id, None)]
    through: int | None = None
    for child, link in zip(chain, chain[1:], strict=False):
        assert child.fork_step is not None  # only a run with a parent has one in the chain
        through = child.fork_step if through is None else min(through, child.fork_step)
        own.append((link.run_id, through))
    view = chain[0].memory or MemoryView.THEN
    if len(chain) == 1 or view == MemoryView.ALL:
        return RecallScope(own_past=tuple(own), tree=tree)
    return RecallScope(
        own_past=tuple(own),
        as_of=as_of(chain) if view == MemoryView.THEN else None,
        exclude_runs=tuple(link.run_id for link in chain[1:]),
        tree=tree,
    )


def as_of(chain: Sequence[ForkLink]) -> float | None:
    """The time a `MemoryView.THEN` run recalls as of: its parent's, if the parent recalled as of a
    time too (an explicit THEN: runs from before the setting recalled everything), else when the
    parent's checkpoint of the step it started from was written."""
    for link, parent in zip(chain, chain[1:], strict=False):
        if parent.memory != MemoryView.THEN:  # the first run, a `now` or `all` one, or one from before
            return link.fork_at
    return None


async def recall_search(
    memory: EpisodicStore, tenant_id: str, query: str, k: int, agent: str | None, scope: RecallScope
) -> list[Recalled]:
    """A recall's search: the agent's memories that `scope` lets the run see, ranked as of its time."""
    return await memory.search(
        tenant_id,
        query,
        k=k,
        agent=agent,
        now=scope.as_of,
        as_of=scope.as_of,
        exclude_runs=scope.exclude_runs,
        own_past=scope.own_past,
        tree=scope.tree,
    )


def recalled_memories(hits: Sequence[Recalled], scope: RecallScope, window_start: int, k: int) -> list[Memory]:
    """The best `k` hits, without the run's own steps still in the window (the model sees them verbatim)."""
    kept = [
        memory_of(h)
        for h in hits
        if not (
            h.episode.kind == EpisodeKind.STEP
            and h.episode.step >= window_start
            and scope.own(h.episode.run_id, h.episode.step)
        )
    ]
    return kept[:k]
