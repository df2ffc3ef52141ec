"""Episodic memory in the embedded Qdrant engine (qdrant-edge) on a folder.

One process owns a shard: a second open fails on the WAL lock, so in the embedded stack
the worker opens it and everything else reaches memory through that worker. Every engine
call blocks (segment IO, vector maths), so each runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    FloatIndexParams,
    IntegerIndexParams,
    IsEmptyCondition,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Point,
    Query,
    QueryRequest,
    RangeFloat,
    ScrollRequest,
    UpdateOperation,
)

from waypoint.errors import ConfigError, StackError
from waypoint.memory.base import RUNS, TREES, Hit, QdrantStoreBase, Scope
from waypoint.memory.episode import Embedder

# Written next to the shard: the embedder its vectors came from. Two embedders of the same size
# (hashing and MiniLM are both 384-d) would otherwise mix silently.
META_FILE = "waypoint_memory.json"
SCROLL_PAGE = 1_000


def payload_indexes() -> dict[str, Any]:
    # tenant is_tenant=True: Qdrant co-locates each tenant's points, so a tenant-filtered search
    # reads that tenant's data only.
    return {
        "tenant": KeywordIndexParams(is_tenant=True),
        "run_id": KeywordIndexParams(),
        "agent": KeywordIndexParams(),
        "kind": KeywordIndexParams(),
        "step": IntegerIndexParams(lookup=True, range=True),
        "created_at": FloatIndexParams(),
        "first_at": FloatIndexParams(),
        RUNS: KeywordIndexParams(),
        TREES: KeywordIndexParams(),
        "root_run_id": KeywordIndexParams(),
    }


def edge_filter(scope: Scope) -> Filter | None:
    must: list[Any] = []
    for key in ("tenant", "run_id"):
        value = getattr(scope, key)
        if value is not None:
            must.append(FieldCondition(key, match=MatchValue(value)))
    if scope.kinds:
        must.append(FieldCondition("kind", match=MatchAny(list(scope.kinds))))
    # What the run recalls by its agent and lineage; or else, of its tree (of any agent, any time).
    own: list[Any] = [FieldCondition("agent", match=MatchValue(scope.agent))] if scope.agent is not None else []
    if scope.as_of_filter:
        own.append(as_of_filter(scope))
    if scope.tree is not None and own:
        must.append(Filter(should=[Filter(must=own), FieldCondition(TREES, match=MatchValue(scope.tree))]))
    else:
        must.extend(own)
    return Filter(must=must) if must else None


def as_of_filter(scope: Scope) -> Filter:
    """The run's own past, or else: first stored by `as_of` (points from before `first_at` by their
    `created_at`), and of none of `exclude_runs`."""
    others: list[Any] = []
    if scope.as_of is not None:
        before = RangeFloat(lte=scope.as_of)
        legacy = Filter(must=[IsEmptyCondition("first_at"), FieldCondition("created_at", range=before)])
        others.append(Filter(should=[FieldCondition("first_at", range=before), legacy]))
    excluded: list[Any] = (
        [FieldCondition("run_id", match=MatchAny(list(scope.exclude_runs)))] if scope.exclude_runs else []
    )
    should: list[Any] = [Filter(must=others, must_not=excluded)]
    for run_id, through in scope.own_past:
        if through is None:  # the run's own episodes, and what it repeated of others'
            should.append(FieldCondition(RUNS, match=MatchValue(run_id)))
        own: list[Any] = [FieldCondition("run_id", match=MatchValue(run_id))]
        if through is not None:
            own.append(FieldCondition("step", range=RangeFloat(lte=through)))
        should.append(Filter(must=own))
    return Filter(should=should)


def check_compatible(path: Path, embedder: Embedder) -> None:
    """Refuse to open a shard written by another embedder, before the engine's own less clear error."""
    fix = (
        f"set WAYPOINT_EMBEDDER back to the one that wrote it, or set WAYPOINT_QDRANT_PATH to a new folder "
        f"(or delete {path}) to start an empty memory"
    )
    meta_file = path / META_FILE
    if meta_file.exists():
        meta = json.loads(meta_file.read_text())
        if meta.get("embedder") != embedder.name or meta.get("dim") != embedder.dim:
            raise ConfigError(
                f"the memory in {path} holds {meta.get('dim')}-d vectors of embedder {meta.get('embedder')!r}, "
                f"not {embedder.dim}-d vectors of {embedder.name!r}: {fix}"
            )
    config = json.loads((path / "edge_config.json").read_text())
    size = config.get("vectors", {}).get("", {}).get("size")
    if size is not None and size != embedder.dim:
        raise ConfigError(
            f"the memory in {path} holds {size}-d vectors, embedder {embedder.name!r} makes "
            f"{embedder.dim}-d ones: {fix}"
        )


class EdgeStore(QdrantStoreBase):
    """The EpisodicStore over a qdrant-edge shard in `path` (created on first open)."""

    def __init__(self, path: Path, embedder: Embedder) -> None:
        super().__init__(embedder)
        self.path = path
        self._closed = False
        exists = (path / "edge_config.json").exists()
        if exists:
            check_compatible(path, embedder)
        try:
            if exists:
                self.shard = EdgeShard.load(str(path))
            else:
                path.mkdir(parents=True, exist_ok=True)
                config = EdgeConfig(vectors=EdgeVectorParams(size=embedder.dim, distance=Distance.Cosine))
                self.shard = EdgeShard.create(str(path), config)
        except Exception as exc:
            if "WAL" in str(exc) or "WouldBlock" in str(exc):
                raise StackError(
                    f"the Qdrant shard in {path} is open in another process (one process owns a shard): "
                    "stop the other worker or `waypoint dev` using this state folder, or give this process "
                    "its own WAYPOINT_QDRANT_PATH"
                ) from None
            raise StackError(
                f"cannot open the Qdrant shard in {path} ({exc}): delete the folder to start an empty memory"
            ) from None
        (path / META_FILE).write_text(json.dumps({"embedder": embedder.name, "dim": embedder.dim}))
        existing = self.shard.info().payload_schema
        for field, params in payload_indexes().items():
            if field not in existing:
                self.shard.update(UpdateOperation.create_field_index(field, params))

    async def optimize(self) -> bool:
        """Build the HNSW index and merge segments. CPU-heavy (seconds at 100k points): call it off the
        hot path, e.g. from a scheduled job. Search is correct without it, only slower on large shards."""
        return await asyncio.to_thread(self.shard.optimize)

    async def _nearest(self, vector: list[float], scope: Scope, limit: int) -> list[Hit]:
        request = QueryRequest(limit=limit, query=Query.Nearest(vector), filter=edge_filter(scope), with_payload=True)
        points = await asyncio.to_thread(self.shard.query, request)
        return [Hit(id=str(p.id), similarity=float(p.score), payload=dict(p.payload or {})) for p in points]

    async def _write(self, points: list[tuple[str, list[float], dict[str, Any]]]) -> None:
        op = UpdateOperation.upsert_points([Point(pid, vec, payload) for pid, vec, payload in points])
        await asyncio.to_thread(self.shard.update, op)

    async def _set_payload(self, point_id: str, payload: dict[str, Any]) -> None:
        await asyncio.to_thread(self.shard.update, UpdateOperation.set_payload([point_id], payload))

    async def _scroll(self, scope: Scope) -> list[dict[str, Any]]:
        def scroll_all() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            offset = None
            while True:
                request = ScrollRequest(offset=offset, limit=SCROLL_PAGE, filter=edge_filter(scope), with_payload=True)
                records, offset = self.shard.scroll(request)
                out.extend(dict(r.payload or {}) for r in records)
                if offset is None:
                    return out

        return await asyncio.to_thread(scroll_all)

    async def _count(self, scope: Scope) -> int:
        return await asyncio.to_thread(self.shard.count, CountRequest(exact=True, filter=edge_filter(scope)))

    async def _delete(self, scope: Scope) -> None:
        flt = edge_filter(scope)
        assert flt is not None  # delete_run always scopes by tenant and run
        await asyncio.to_thread(self.shard.update, UpdateOperation.delete_points_by_filter(flt))

    async def _close(self) -> None:
        def flush_and_close() -> None:
            if not self._closed:
                self._closed = True
                self.shard.flush()
                self.shard.close()

        await asyncio.to_thread(flush_and_close)
