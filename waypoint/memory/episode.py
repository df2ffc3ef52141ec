"""What episodic memory stores and returns, and the two protocols its parts meet.

Kept apart from `__init__` so that the backends can import these types without
importing each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from waypoint.names import EpisodeKind

# A fixed namespace: the same (run_id, step, kind, index) gives the same point id on
# every machine and in every process, so a retried write overwrites instead of adding.
EPISODE_NAMESPACE = uuid.UUID("6f1d2a57-3c1e-4b0e-9a51-0f7f3b2c9d11")

KINDS = tuple(k.value for k in EpisodeKind)


@dataclass(frozen=True)
class Episode:
    """One memory: a step's outcome, a decision, a compaction summary or a fact."""

    tenant: str
    agent: str
    run_id: str
    step: int
    kind: str  # "step" | "decision" | "summary" | "fact"
    text: str
    importance: float = 0.3  # 0..1; decisions and summaries higher (e.g. 0.8)
    index: int = 0  # tells apart several episodes of one kind at one step
    created_at: float = 0.0  # epoch seconds; 0 -> now at upsert

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"episode kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not 0.0 <= self.importance <= 1.0:
            raise ValueError(f"episode importance {self.importance} must be between 0 and 1")

    @property
    def id(self) -> str:
        return str(uuid.uuid5(EPISODE_NAMESPACE, f"{self.run_id}\x1f{self.step}\x1f{self.kind}\x1f{self.index}"))

    def payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Episode:
        return cls(
            tenant=str(payload["tenant"]),
            agent=str(payload["agent"]),
            run_id=str(payload["run_id"]),
            step=int(payload["step"]),
            kind=str(payload["kind"]),
            text=str(payload["text"]),
            importance=float(payload["importance"]),
            index=int(payload.get("index", 0)),
            created_at=float(payload["created_at"]),
        )


@dataclass(frozen=True)
class Recalled:
    """A search hit: the episode, its cosine similarity to the query and its blended score."""

    episode: Episode
    similarity: float  # cosine
    score: float  # the blended re-rank score (see waypoint.memory.ranking)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of `dim` floats. Synchronous: the stores call it in a thread."""

    @property
    def name(self) -> str:
        """Stored with the vectors: a store refuses vectors of another embedder."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class EpisodicStore(Protocol):
    """Long-term memory of a tenant's agents. Every read and delete is scoped to one tenant."""

    embedder: Embedder

    async def upsert(self, episodes: Sequence[Episode]) -> list[str]:
        """Store episodes (embedded in batches). Returns one id per episode, in order: its own id, or,
        for a fact or decision that repeats an existing one, the id of the point it was merged into."""
        ...

    async def search(
        self,
        tenant: str,
        query: str,
        *,
        k: int = 5,
        agent: str | None = None,
        run_id: str | None = None,
        kinds: Sequence[str] | None = None,
        now: float | None = None,
    ) -> list[Recalled]: ...

    async def list_run(self, tenant: str, run_id: str) -> list[Episode]:
        """Every episode of a run, ordered by step, kind, index."""
        ...

    async def delete_run(self, tenant: str, run_id: str) -> int:
        """Delete a run's episodes (only that tenant's); returns how many."""
        ...

    async def count(self, tenant: str | None = None) -> int: ...

    async def close(self) -> None: ...
