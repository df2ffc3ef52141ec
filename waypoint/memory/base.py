"""What both Qdrant backends share: ids, batching, near-duplicate merging, tenant scoping, re-ranking.

A backend only supplies seven storage primitives (`_nearest`, `_write`, `_set_payload`,
`_scroll`, `_count`, `_delete`, `_close`) over a `Scope`, so the rules of episodic memory
live once, here, and one test suite holds both backends to them.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from waypoint.memory.episode import Embedder, Episode, Recalled
from waypoint.memory.ranking import (
    MERGED_KINDS,
    blend,
    candidates,
    duplicate_cosine,
    is_near_duplicate,
    normalized_text,
)

# Texts per embedder call: large enough to keep MiniLM's matrix maths busy, small enough that
# one call never holds a thread for long.
EMBED_BATCH = 64
# Points per write request.
WRITE_BATCH = 256
# How many nearest neighbours a new fact or decision is compared with for a near duplicate.
DUPLICATE_CANDIDATES = 3
# The payload key listing every run whose episode a point holds: its own, and those of the repeats
# merged into it. A run's recall finds what it stored itself, even merged into another run's point.
RUNS = "runs"
# Likewise every tree of runs (its root run id) whose episode a point holds: a child's fact merged
# into another tree's point is still its own tree's to recall.
TREES = "trees"


@dataclass(frozen=True)
class Scope:
    """A payload filter. `tenant=None` is only ever used by `count()` over everything."""

    tenant: str | None
    agent: str | None = None
    run_id: str | None = None
    kinds: tuple[str, ...] | None = None
    # Recall as of a time (see `EpisodicStore.search`): episodes of `own_past` (run, through step;
    # None: every step, merged repeats included), or else first stored at or before `as_of` and of
    # none of `exclude_runs`.
    as_of: float | None = None
    exclude_runs: tuple[str, ...] = ()
    own_past: tuple[tuple[str, int | None], ...] = ()
    # A tree's episodes pass `agent` and the time and exclusion rule (see `RecallScope.tree`).
    tree: str | None = None

    @property
    def as_of_filter(self) -> bool:
        """Whether the time and exclusion rule applies (without it `own_past` changes nothing)."""
        return self.as_of is not None or bool(self.exclude_runs)


@dataclass(frozen=True)
class Hit:
    id: str
    similarity: float
    payload: dict[str, Any]


def _merged(kept: Episode, repeat: Episode) -> Episode:
    """A near-duplicate keeps the first text, the highest importance, the latest time and the first."""
    return replace(
        kept,
        importance=max(kept.importance, repeat.importance),
        created_at=max(kept.created_at, repeat.created_at),
        first_at=min(kept.first_at, repeat.first_at),
    )


class _BatchIndex:
    """The facts and decisions of one upsert call so far, per (tenant, agent, kind), so that a repeat
    inside the same call merges too. A growing matrix of unit vectors: one product per lookup, which
    keeps a bulk import of thousands of facts fast."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._groups: dict[tuple[str, str, str], tuple[list[str], dict[str, str], list[np.ndarray]]] = {}

    def find(self, ep: Episode, ep_id: str, vec: list[float]) -> str | None:
        group = self._groups.get((ep.tenant, ep.agent, ep.kind))
        if group is None:
            return None
        ids, by_text, buffer = group
        same_text = by_text.get(normalized_text(ep.text))
        if same_text is not None and same_text != ep_id:
            return same_text
        sims = buffer[0][: len(ids)] @ _unit(vec)
        for i in np.flatnonzero(sims >= self.threshold).tolist():
            if ids[i] != ep_id:
                return ids[i]
        return None

    def add(self, ep: Episode, ep_id: str, vec: list[float]) -> None:
        ids, by_text, buffer = self._groups.setdefault((ep.tenant, ep.agent, ep.kind), ([], {}, [np.empty((0, 0))]))
        if len(ids) == buffer[0].shape[0]:  # full: double the capacity
            grown = np.zeros((max(16, 2 * len(ids)), len(vec)))
            if ids:
                grown[: len(ids)] = buffer[0][: len(ids)]
            buffer[0] = grown
        buffer[0][len(ids)] = _unit(vec)
        ids.append(ep_id)
        by_text.setdefault(normalized_text(ep.text), ep_id)


def _tree(ep: Episode) -> tuple[str, ...]:
    return (ep.root_run_id,) if ep.root_run_id else ()


def _unit(vec: list[float]) -> np.ndarray:
    arr = np.asarray(vec, dtype=np.float64)
    norm = float(np.linalg.norm(arr))
    return arr / norm if norm else arr


def _stamped(ep: Episode, now: float) -> Episode:
    """The episode with its times: stored now unless it says when; first stored then too, unless it says."""
    created_at = ep.created_at if ep.created_at > 0 else now
    first_at = ep.first_at if ep.first_at > 0 else created_at
    return (
        ep
        if (created_at, first_at) == (ep.created_at, ep.first_at)
        else replace(ep, created_at=created_at, first_at=first_at)
    )


def _require_tenant(tenant: str) -> None:
    # An empty tenant would be a filter that matches nothing stored, or worse, a caller bug that
    # reads as "all tenants": refuse it loudly.
    if not tenant:
        raise ValueError("a tenant is required: every memory read and delete is scoped to one tenant")


class QdrantStoreBase(ABC):
    embedder: Embedder

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        # One writer at a time: the near-duplicate check reads before it writes, and two concurrent
        # upserts of the same fact must not both miss each other.
        self._write_lock = asyncio.Lock()

    # ---- storage primitives, per backend ----

    async def _ready(self) -> None:  # noqa: B027 - a hook: only the server backend needs it
        """Create or check the collection before first use (the server backend needs a round trip)."""

    @abstractmethod
    async def _nearest(self, vector: list[float], scope: Scope, limit: int) -> list[Hit]: ...

    @abstractmethod
    async def _write(self, points: list[tuple[str, list[float], dict[str, Any]]]) -> None: ...

    @abstractmethod
    async def _set_payload(self, point_id: str, payload: dict[str, Any]) -> None: ...

    @abstractmethod
    async def _scroll(self, scope: Scope) -> list[dict[str, Any]]: ...

    @abstractmethod
    async def _count(self, scope: Scope) -> int: ...

    @abstractmethod
    async def _delete(self, scope: Scope) -> None: ...

    @abstractmethod
    async def _close(self) -> None: ...

    # ---- the EpisodicStore protocol ----

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed in batches, each in a worker thread: embedders are CPU-bound or blocking HTTP."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH):
            vectors.extend(await asyncio.to_thread(self.embedder.embed, list(texts[start : start + EMBED_BATCH])))
        return vectors

    async def upsert(self, episodes: Sequence[Episode]) -> list[str]:
        if not episodes:
            return []
        await self._ready()
        now = time.time()
        stamped = [_stamped(ep, now) for ep in episodes]
        vectors = await self.embed([ep.text for ep in stamped])
        async with self._write_lock:
            # pending: what this call will write, by id (a later copy of one id replaces the earlier).
            pending: dict[str, tuple[Episode, list[float]]] = {}
            # the runs and trees whose episodes each new point holds (a merged repeat adds its own)
            runs: dict[str, set[str]] = {}
            trees: dict[str, set[str]] = {}
            batch = _BatchIndex(duplicate_cosine(self.embedder))
            ids: list[str] = []
            for ep, vec in zip(stamped, vectors, strict=True):
                ep_id = ep.id
                target = None
                if ep.kind in MERGED_KINDS:
                    target = batch.find(ep, ep_id, vec)
                    if target is not None:
                        other, other_vec = pending[target]
                        pending[target] = (_merged(other, ep), other_vec)
                        runs[target].add(ep.run_id)
                        trees[target].update(_tree(ep))
                    else:
                        target = await self._merge_into_stored(ep, ep_id, vec)
                if target is None:
                    pending[ep_id] = (ep, vec)
                    runs[ep_id] = {ep.run_id}
                    trees[ep_id] = set(_tree(ep))
                    if ep.kind in MERGED_KINDS:
                        batch.add(ep, ep_id, vec)
                ids.append(target or ep_id)
            points = [
                (point_id, vec, {**ep.payload(), RUNS: sorted(runs[point_id]), TREES: sorted(trees[point_id])})
                for point_id, (ep, vec) in pending.items()
            ]
            for start in range(0, len(points), WRITE_BATCH):
                await self._write(points[start : start + WRITE_BATCH])
        return ids

    async def _merge_into_stored(self, ep: Episode, ep_id: str, vec: list[float]) -> str | None:
        """The id of a stored near-duplicate of `ep`, after raising its importance and time; or None."""
        scope = Scope(tenant=ep.tenant, agent=ep.agent, kinds=(ep.kind,))
        for hit in await self._nearest(vec, scope, DUPLICATE_CANDIDATES):
            if hit.id == ep_id:
                return None  # the same episode written again (a retry): overwrite it in place
            text = str(hit.payload.get("text", ""))
            if is_near_duplicate(text, ep.text, hit.similarity, duplicate_cosine(self.embedder)):
                await self._set_payload(
                    hit.id,
                    {
                        "importance": max(float(hit.payload["importance"]), ep.importance),
                        "created_at": max(float(hit.payload["created_at"]), ep.created_at),
                        "first_at": min(Episode.from_payload(hit.payload).first_at, ep.first_at),
                        RUNS: sorted({*hit.payload.get(RUNS, [hit.payload["run_id"]]), ep.run_id}),
                        TREES: sorted({*hit.payload.get(TREES, []), *_tree(ep)}),
                    },
                )
                return hit.id
        return None

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
        _require_tenant(tenant)
        if k <= 0:
            return []
        await self._ready()
        now = time.time() if now is None else now
        [vector] = await self.embed([query])
        scope = Scope(
            tenant=tenant,
            agent=agent,
            run_id=run_id,
            kinds=tuple(kinds) if kinds else None,
            as_of=as_of,
            exclude_runs=tuple(exclude_runs),
            own_past=tuple(own_past),
            tree=tree,
        )
        hits = await self._nearest(vector, scope, candidates(k))
        recalled = []
        for hit in hits:
            ep = Episode.from_payload(hit.payload)
            score = blend(hit.similarity, ep.created_at, ep.importance, now)
            recalled.append(Recalled(episode=ep, similarity=hit.similarity, score=score))
        recalled.sort(key=lambda r: (-r.score, -r.similarity, r.episode.id))
        return recalled[:k]

    async def list_run(self, tenant: str, run_id: str) -> list[Episode]:
        _require_tenant(tenant)
        await self._ready()
        episodes = [Episode.from_payload(p) for p in await self._scroll(Scope(tenant=tenant, run_id=run_id))]
        return sorted(episodes, key=lambda ep: (ep.step, ep.kind, ep.index))

    async def delete_run(self, tenant: str, run_id: str) -> int:
        _require_tenant(tenant)
        await self._ready()
        scope = Scope(tenant=tenant, run_id=run_id)
        async with self._write_lock:
            n = await self._count(scope)
            if n:
                await self._delete(scope)
        return n

    async def count(self, tenant: str | None = None) -> int:
        await self._ready()
        return await self._count(Scope(tenant=tenant))

    async def close(self) -> None:
        await self._close()
