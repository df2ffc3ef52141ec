"""Episodic memory: episodes in Qdrant, recalled by similarity blended with recency and importance.

    open_store(settings)         -> EpisodicStore: a Qdrant server when `qdrant_url` is set,
                                    else the embedded engine (qdrant-edge) in `resolved_qdrant_path`
    make_embedder(spec, settings) -> Embedder: `hashing` (default), `minilm`, `openai:<model>`

Both backends implement one protocol and pass one test suite (tests/test_episodic_store.py).
The re-ranking formula and the near-duplicate rule are in `waypoint.memory.ranking`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from waypoint.memory.embedders import HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder, make_embedder
from waypoint.memory.episode import KINDS, Embedder, Episode, EpisodicStore, Recalled, RecallScope

if TYPE_CHECKING:
    from waypoint.config import Settings

__all__ = [
    "KINDS",
    "Embedder",
    "Episode",
    "EpisodicStore",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "RecallScope",
    "Recalled",
    "make_embedder",
    "open_store",
]


def open_store(settings: Settings) -> EpisodicStore:
    """The configured store. The edge shard opens here (fast; fails at once if another process owns it);
    a server collection is created or checked on first use."""
    embedder = make_embedder(settings.embedder, settings)
    if settings.qdrant_url:
        from qdrant_client import AsyncQdrantClient

        from waypoint.memory.server import QdrantServerStore

        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        # check_compatibility=False: the version check is a blocking request inside the constructor;
        # the collection check on first use reports an unreachable or wrong server instead.
        client = AsyncQdrantClient(url=settings.qdrant_url, api_key=api_key, check_compatibility=False)
        return QdrantServerStore(client, settings.qdrant_collection, embedder)
    from waypoint.memory.edge import EdgeStore

    return EdgeStore(settings.resolved_qdrant_path, embedder)
