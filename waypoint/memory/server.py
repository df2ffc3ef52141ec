"""Episodic memory in a Qdrant server, through qdrant-client's async client.

The collection and its payload indexes are created on first use (so opening the store
needs no round trip), and an existing collection is checked: same vector size, same
embedder (kept in the collection's metadata).
"""

from __future__ import annotations

import asyncio
from typing import Any

from qdrant_client import AsyncQdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse

from waypoint.errors import ConfigError
from waypoint.memory.base import RUNS, TREES, Hit, QdrantStoreBase, Scope
from waypoint.memory.episode import Embedder

SCROLL_PAGE = 1_000


def payload_indexes() -> dict[str, Any]:
    # tenant is_tenant=True: the server co-locates each tenant's points, so a tenant-filtered
    # search reads that tenant's data only.
    return {
        "tenant": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
        "run_id": models.PayloadSchemaType.KEYWORD,
        "agent": models.PayloadSchemaType.KEYWORD,
        "kind": models.PayloadSchemaType.KEYWORD,
        "step": models.PayloadSchemaType.INTEGER,
        "created_at": models.PayloadSchemaType.FLOAT,
        "first_at": models.PayloadSchemaType.FLOAT,
        RUNS: models.PayloadSchemaType.KEYWORD,
        TREES: models.PayloadSchemaType.KEYWORD,
        "root_run_id": models.PayloadSchemaType.KEYWORD,
    }


def server_filter(scope: Scope) -> models.Filter | None:
    must: list[models.Condition] = []
    for key in ("tenant", "run_id"):
        value = getattr(scope, key)
        if value is not None:
            must.append(models.FieldCondition(key=key, match=models.MatchValue(value=value)))
    if scope.kinds:
        must.append(models.FieldCondition(key="kind", match=models.MatchAny(any=list(scope.kinds))))
    # What the run recalls by its agent and lineage; or else, of its tree (of any agent, any time).
    own: list[models.Condition] = (
        [models.FieldCondition(key="agent", match=models.MatchValue(value=scope.agent))]
        if scope.agent is not None
        else []
    )
    if scope.as_of_filter:
        own.append(as_of_filter(scope))
    if scope.tree is not None and own:
        tree = models.FieldCondition(key=TREES, match=models.MatchValue(value=scope.tree))
        must.append(models.Filter(should=[models.Filter(must=own), tree]))
    else:
        must.extend(own)
    return models.Filter(must=must) if must else None


def as_of_filter(scope: Scope) -> models.Filter:
    """The run's own past, or else: first stored by `as_of` (points from before `first_at` by their
    `created_at`), and of none of `exclude_runs`."""
    others: list[models.Condition] = []
    if scope.as_of is not None:
        before = models.Range(lte=scope.as_of)
        legacy = models.Filter(
            must=[
                models.IsEmptyCondition(is_empty=models.PayloadField(key="first_at")),
                models.FieldCondition(key="created_at", range=before),
            ]
        )
        others.append(models.Filter(should=[models.FieldCondition(key="first_at", range=before), legacy]))
    excluded: list[models.Condition] = (
        [models.FieldCondition(key="run_id", match=models.MatchAny(any=list(scope.exclude_runs)))]
        if scope.exclude_runs
        else []
    )
    should: list[models.Condition] = [models.Filter(must=others, must_not=excluded)]
    for run_id, through in scope.own_past:
        if through is None:  # the run's own episodes, and what it repeated of others'
            should.append(models.FieldCondition(key=RUNS, match=models.MatchValue(value=run_id)))
        own: list[models.Condition] = [models.FieldCondition(key="run_id", match=models.MatchValue(value=run_id))]
        if through is not None:
            own.append(models.FieldCondition(key="step", range=models.Range(lte=through)))
        should.append(models.Filter(must=own))
    return models.Filter(should=should)


class QdrantServerStore(QdrantStoreBase):
    """The EpisodicStore over one collection of a Qdrant server (or any AsyncQdrantClient location)."""

    def __init__(self, client: AsyncQdrantClient, collection: str, embedder: Embedder) -> None:
        super().__init__(embedder)
        self.client = client
        self.collection = collection
        self._started = False
        self._start_lock = asyncio.Lock()

    async def _ready(self) -> None:
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            # The OpenAI embedder learns its size from the endpoint: a blocking call, so in a thread.
            dim = await asyncio.to_thread(lambda: self.embedder.dim)
            if await self.client.collection_exists(self.collection):
                await self._check_existing(dim)
            else:
                try:
                    await self.client.create_collection(
                        self.collection,
                        vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE),
                        metadata={"embedder": self.embedder.name, "dim": dim},
                    )
                except UnexpectedResponse as exc:
                    if exc.status_code != 409:  # 409: another worker created it a moment ago
                        raise
                    await self._check_existing(dim)
            info = await self.client.get_collection(self.collection)
            for field, schema in payload_indexes().items():
                if field not in (info.payload_schema or {}):
                    await self.client.create_payload_index(self.collection, field, field_schema=schema, wait=True)
            self._started = True

    async def _check_existing(self, dim: int) -> None:
        info = await self.client.get_collection(self.collection)
        vectors = info.config.params.vectors
        size = vectors.size if isinstance(vectors, models.VectorParams) else None
        meta = info.config.metadata or {}
        stored_name = meta.get("embedder")
        if size != dim or (stored_name is not None and stored_name != self.embedder.name):
            raise ConfigError(
                f"Qdrant collection {self.collection!r} holds {size}-d vectors of embedder {stored_name!r}, "
                f"not {dim}-d vectors of {self.embedder.name!r}: set WAYPOINT_EMBEDDER back to the one that "
                "wrote it, or set WAYPOINT_QDRANT_COLLECTION to a new name to start an empty memory"
            )

    async def _nearest(self, vector: list[float], scope: Scope, limit: int) -> list[Hit]:
        response = await self.client.query_points(
            self.collection, query=vector, query_filter=server_filter(scope), limit=limit, with_payload=True
        )
        return [Hit(id=str(p.id), similarity=float(p.score), payload=dict(p.payload or {})) for p in response.points]

    async def _write(self, points: list[tuple[str, list[float], dict[str, Any]]]) -> None:
        structs = [models.PointStruct(id=pid, vector=vec, payload=payload) for pid, vec, payload in points]
        await self.client.upsert(self.collection, points=structs, wait=True)

    async def _set_payload(self, point_id: str, payload: dict[str, Any]) -> None:
        await self.client.set_payload(self.collection, payload=payload, points=[point_id], wait=True)

    async def _scroll(self, scope: Scope) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        offset: Any = None
        while True:
            records, offset = await self.client.scroll(
                self.collection, scroll_filter=server_filter(scope), limit=SCROLL_PAGE, offset=offset, with_payload=True
            )
            out.extend(dict(r.payload or {}) for r in records)
            if offset is None:
                return out

    async def _count(self, scope: Scope) -> int:
        result = await self.client.count(self.collection, count_filter=server_filter(scope), exact=True)
        return int(result.count)

    async def _delete(self, scope: Scope) -> None:
        flt = server_filter(scope)
        assert flt is not None  # delete_run always scopes by tenant and run
        await self.client.delete(self.collection, points_selector=models.FilterSelector(filter=flt), wait=True)

    async def _close(self) -> None:
        await self.client.close()
