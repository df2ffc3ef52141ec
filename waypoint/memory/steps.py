"""What a run's steps become in episodic memory, and what it recalls for the next one.

Pure functions of events and search hits, shared by the model call (which stores and recalls
in the same activity) and the memory worker's own activities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from waypoint.memory.episode import Episode, Recalled
from waypoint.names import MEMORY_SAVE_TOOL, PIN_TOOL, EpisodeKind, EventKind
from waypoint.transcript import clip, decision_text, step_account
from waypoint.types import Memory

StepEvents = Sequence[tuple[str, Mapping[str, Any]]]  # (kind, payload) in log order

STEP_IMPORTANCE = 0.3
DECISION_IMPORTANCE = 0.8
QUERY_CHARS = 1_500
APPROVAL_INDEX = 1_000  # approvals' episode indexes, apart from tool-call indexes at the same step


def step_episodes(tenant: str, agent: str, run_id: str, step: int, rows: StepEvents) -> list[Episode]:
    """The episodes of one step: its account, and each human decision taken in it."""

    def episode(kind: str, text: str, importance: float, index: int = 0) -> Episode:
        return Episode(tenant, agent, run_id, step, kind, text, importance=importance, index=index)

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


def pending_episodes(tenant: str, agent: str, run_id: str, pending: Mapping[int, StepEvents]) -> list[Episode]:
    """The episodes of the steps not stored yet, oldest step first."""
    return [ep for step, rows in sorted(pending.items()) for ep in step_episodes(tenant, agent, run_id, step, rows)]


def recall_query(task: str, last_step: int, last_rows: StepEvents | None) -> str:
    """The text to recall by: the task, then the newest step's account."""
    recent = step_account(last_step, last_rows) if last_rows else ""
    return clip(f"{task}\n{recent}", QUERY_CHARS)


def memory_of(hit: Recalled) -> Memory:
    ep = hit.episode
    return Memory(text=ep.text, run_id=ep.run_id, step=ep.step, kind=ep.kind, score=hit.score, importance=ep.importance)


def recalled_memories(hits: Sequence[Recalled], run_id: str, window_start: int, k: int) -> list[Memory]:
    """The best `k` hits, without this run's steps still in the window (the model sees them verbatim)."""
    kept = [
        memory_of(h)
        for h in hits
        if not (h.episode.run_id == run_id and h.episode.kind == EpisodeKind.STEP and h.episode.step >= window_start)
    ]
    return kept[:k]
