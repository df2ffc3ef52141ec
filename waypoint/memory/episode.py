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
    created_at: float = 0.0  # epoch seconds; 0 -> now at upsert; a merged repeat moves it to the repeat's time
    # When the memory was first stored (epoch seconds; 0 -> `created_at`): a merge never moves it,
    # so recall "as of" a time finds a fact that existed then, however often it was learned since.
    first_at: float = 0.0
    # The root run of the run's tree of sub-agent runs (the run itself for a run without a caller;
    # None: not known, an episode stored before trees were). Recall within a tree filters on it.
    root_run_id: str | None = None

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
            # points stored before `first_at` existed: their time is the best known
            first_at=float(payload.get("first_at", payload["created_at"])),
            root_run_id=payload.get("root_run_id"),
        )


@dataclass(frozen=True)
class Recalled:
    """A search hit: the episode, its cosine similarity to the query and its blended score."""

    episode: Episode
    similarity: float  # cosine
    score: float  # the blended re-rank score (see waypoint.memory.ranking)


@dataclass(frozen=True)
class RecallScope:
    """Which episodes one run's recall may see (see `EpisodicStore.search`):

    - `own_past`: the run's own history, as (run, through step; None: every step): the run itself,
      then each ancestor it was forked or rerun from, up to the step its child started at. Always
      recallable (episodes still in the window are dropped later: the model sees them verbatim);
    - `as_of`: other episodes only if first stored at or before this time (epoch seconds);
    - `exclude_runs`: other episodes never of these runs (the ancestors: their steps after the
      fork point are a future this run did not live, its final answer included);
    - `tree`: the root run of the run's tree of sub-agent runs: every episode of the tree is
      recallable too, whatever its agent (a parent recalls what its children learned, a child
      what its parent and siblings did). Episodes stored before trees were carry none: they are
      recalled by the other rules only.
    """

    own_past: tuple[tuple[str, int | None], ...] = ()
    as_of: float | None = None
    exclude_runs: tuple[str, ...] = ()
    tree: str | None = None

    def own(self, run_id: str, step: int) -> bool:
        """Whether an episode of (run, step) is part of the run's own history."""
        return any(r == run_id and (last is None or step <= last) for r, last in self.own_past)


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
        as_of: float | None = None,
        exclude_runs: Sequence[str] = (),
        own_past: Sequence[tuple[str, int | None]] = (),
        tree: str | None = None,
    ) -> list[Recalled]:
        """The `k` best episodes for `query` (similarity blended with recency and importance), of the
        tenant, optionally of one agent, run or some kinds. Recall "as of" a time:
        `as_of` keeps episodes first stored at or before it (epoch seconds); `exclude_runs` leaves
        out those runs' episodes; `own_past` (run, through step; None: every step) names episodes
        that pass both anyway, the asking run's own history (see `RecallScope`). `tree`: the
        episodes of that tree of runs pass the agent filter and both rules too."""
        ...

    async def list_run(self, tenant: str, run_id: str) -> list[Episode]:
        """Every episode of a run, ordered by step, kind, index."""
        ...

    async def delete_run(self, tenant: str, run_id: str) -> int:
        """Delete a run's episodes (only that tenant's); returns how many."""
        ...

    async def count(self, tenant: str | None = None) -> int: ...

    async def close(self) -> None: ...
