"""Episodic memory storage. For now: the embedded Qdrant shard's lifecycle.

An edge shard is owned by exactly one process (a second open fails on the WAL
lock), so in the embedded stack the worker opens it and everything else
reaches memory through that worker.
"""

from __future__ import annotations

from pathlib import Path

from qdrant_edge import Distance, EdgeConfig, EdgeShard, EdgeVectorParams

from waypoint.errors import StackError

VECTOR_SIZE = 384  # all-MiniLM-L6-v2, the sentence-transformers default


class EdgeMemory:
    """The embedded Qdrant shard in a folder: created on first open, reopened after."""

    def __init__(self, path: Path):
        self.path = path
        try:
            if (path / "edge_config.json").exists():
                self.shard = EdgeShard.load(str(path))
            else:
                path.mkdir(parents=True, exist_ok=True)
                config = EdgeConfig(vectors=EdgeVectorParams(size=VECTOR_SIZE, distance=Distance.Cosine))
                self.shard = EdgeShard.create(str(path), config)
        except Exception as exc:
            raise StackError(
                f"cannot open the Qdrant shard in {path} ({exc}); is another worker using this state folder?"
            ) from None

    def count(self) -> int:
        return self.shard.info().points_count

    def close(self) -> None:
        self.shard.flush()
        self.shard.close()
