"""Episodic memory, side by side: qdrant-edge against qdrant-client's local mode; hashing against MiniLM.

    python benchmarks/memory.py [--sizes 10000,100000] [--queries 200] [--local-queries 30,5] [--seed 7]
                                [--no-minilm] [--markdown]

Run it as a file (it imports _memory_dataset.py from this folder). Each backend and size is
measured in a fresh child process, so its RSS and disk are its own. Latency uses the hashing
embedder's vectors, computed once for the largest size (MiniLM at 100k would take ~8 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from _memory_dataset import corpus, planted_set, queries
from qdrant_client import AsyncQdrantClient
from rich.console import Console
from rich.table import Table

from waypoint.memory import Embedder, Episode, HashingEmbedder, make_embedder
from waypoint.memory.base import QdrantStoreBase, Scope
from waypoint.memory.edge import EdgeStore
from waypoint.memory.server import QdrantServerStore

TENANTS = 20
NOW = time.time()
console = Console()


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def disk_mib(path: Path) -> tuple[float, float]:
    """(allocated, apparent) MiB: edge's files are sparse, so both matter."""
    files = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files) / 2**20, sum(p.stat().st_size for p in files) / 2**20


def open_backend(backend: str, path: Path, *, in_memory: bool = False) -> QdrantStoreBase:
    if backend == "edge":
        return EdgeStore(path, HashingEmbedder())
    # qdrant-client's local mode: the same API as a server, the engine emulated in Python. With a path it
    # also pickles every point into SQLite (~300 points/s here), too slow to load 100k; so latency runs
    # on ":memory:" and the disk figure comes from the upsert run, which uses a path.
    client = AsyncQdrantClient(location=":memory:") if in_memory else AsyncQdrantClient(path=str(path))
    return QdrantServerStore(client, "bench", HashingEmbedder())


def episode(i: int, text: str, rng: random.Random, kind: str = "step") -> Episode:
    return Episode(
        tenant=f"tenant-{rng.randrange(TENANTS)}", agent="bench", run_id=f"run-{i // 50}", step=i % 50, kind=kind,
        text=text, created_at=NOW - rng.uniform(0, 30 * 86400),
    )  # fmt: skip


def pct(times: list[float], q: float) -> float:
    return float(np.percentile(np.array(times) * 1000, q))


async def timed(fn: Any, args_list: list[Any]) -> list[float]:
    out = []
    for args in args_list:
        began = time.perf_counter()
        await fn(*args)
        out.append(time.perf_counter() - began)
    return out


async def measure(store: QdrantStoreBase, qvecs: np.ndarray, qtexts: list[str]) -> dict[str, float]:
    tenants = [f"tenant-{j % TENANTS}" for j in range(len(qtexts))]
    vecs = [v.tolist() for v in qvecs]
    plain = await timed(store._nearest, [(v, Scope(tenant=None), 20) for v in vecs])
    tenant = await timed(store._nearest, [(v, Scope(tenant=t), 20) for v, t in zip(vecs, tenants, strict=True)])
    search = await timed(store.search, [(t, q) for t, q in zip(tenants, qtexts, strict=True)])
    return {
        "p50 no filter": pct(plain, 50), "p95 no filter": pct(plain, 95),
        "p50 tenant": pct(tenant, 50), "p95 tenant": pct(tenant, 95),
        "search p50": pct(search, 50), "search p95": pct(search, 95),
    }  # fmt: skip


async def latency(backend: str, size: int, work: Path, nqueries: int) -> list[dict[str, Any]]:
    vectors = np.load(work / "vectors.npy", mmap_mode="r")[:size]
    texts = json.loads((work / "texts.json").read_text())[:size]
    qvecs = np.load(work / "qvectors.npy")[:nqueries]
    qtexts = json.loads((work / "qtexts.json").read_text())[:nqueries]
    rng = random.Random(size)
    base_rss = rss_mib()
    path = work / f"{backend}-{size}"
    store = open_backend(backend, path, in_memory=True)
    await store._ready()
    began = time.perf_counter()
    for start in range(0, size, 1000):
        batch = [episode(i, texts[i], rng) for i in range(start, min(size, start + 1000))]
        points = [(e.id, vectors[start + j].tolist(), e.payload()) for j, e in enumerate(batch)]
        await store._write(points)
    load_s = time.perf_counter() - began
    rows = []
    label = "edge" if backend == "edge" else "qdrant-client local (:memory:)"
    common = {"size": size, "queries": nqueries, "bulk load pts/s": size / load_s}
    if isinstance(store, EdgeStore):
        rows.append({"backend": f"{label} (plain segments)", **common, **await measure(store, qvecs, qtexts)})
        began = time.perf_counter()
        await store.optimize()
        optimize_s = time.perf_counter() - began
        rows.append({"backend": f"{label} (optimized, HNSW)", **common, "optimize s": optimize_s,
                     **await measure(store, qvecs, qtexts)})  # fmt: skip
    else:
        rows.append({"backend": label, **common, **await measure(store, qvecs, qtexts)})
    # Growth only: ru_maxrss would be useless here, Linux carries it over from the parent through exec.
    footprint: dict[str, Any] = {"RSS MiB": rss_mib() - base_rss}
    await store.close()
    if path.exists():
        allocated, apparent = disk_mib(path)
        footprint |= {"disk MiB": allocated, "disk apparent MiB": apparent}
    return [row | footprint for row in rows]


async def upserts(backend: str, work: Path) -> dict[str, Any]:
    rng = random.Random(3)
    texts = corpus(99, 3000)
    store = open_backend(backend, work / f"{backend}-upsert")
    began = time.perf_counter()
    for start in range(0, 2000, 100):
        await store.upsert([episode(i, texts[i], rng) for i in range(start, start + 100)])
    steps_s = 2000 / (time.perf_counter() - began)
    began = time.perf_counter()
    for start in range(2000, 3000, 100):
        await store.upsert([episode(i, texts[i], rng, kind="fact") for i in range(start, start + 100)])
    facts_s = 1000 / (time.perf_counter() - began)
    await store.close()
    allocated, apparent = disk_mib(work / f"{backend}-upsert")
    return {"backend": "edge" if backend == "edge" else "qdrant-client local (path)",
            "step episodes/s": steps_s, "fact episodes/s (duplicate check)": facts_s,
            "disk MiB (3,000 episodes)": allocated, "disk apparent MiB": apparent}  # fmt: skip


async def recall_at_5(spec: str, seed: int, work: Path) -> dict[str, Any]:
    data = planted_set(seed)
    embedder: Embedder = make_embedder(spec)
    began = time.perf_counter()
    embedder.embed(data.texts[:8])  # load the model before timing (MiniLM: torch import + weights)
    load_s = time.perf_counter() - began
    store = EdgeStore(work / f"recall-{spec}", embedder)
    began = time.perf_counter()
    ids = await store.upsert(
        [Episode("t", "bench", "planted", i, kind, text, created_at=NOW)
         for i, (kind, text) in enumerate(zip(data.kinds, data.texts, strict=True))]
    )  # fmt: skip
    embed_s = time.perf_counter() - began
    hits = 0
    for question, answer in data.questions:
        found = {r.episode.id for r in await store.search("t", question, k=5, now=NOW)}
        # The answer's own point: one merged into another fact (a false near-duplicate) is a miss.
        hits += ids[answer] in found and ids[answer] == Episode("t", "bench", "planted", answer, "fact", "-").id
    await store.close()
    return {"embedder": spec, "pairs": len(data.questions), "episodes": len(data.texts),
            "recall@5": hits / len(data.questions), "facts merged": len(ids) - len(set(ids)),
            "upsert episodes/s": len(data.texts) / embed_s, "model load s": load_s}  # fmt: skip


def in_child(fn: Any, *args: Any) -> Any:
    """Run `asyncio.run(fn(*args))` in a fresh spawned process, so RSS and caches are its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(run_async, fn, *args).result()


def run_async(fn: Any, *args: Any) -> Any:
    # qdrant-client says local mode ignores payload indexes: known, and part of what is measured.
    warnings.filterwarnings("ignore", message="Payload indexes have no effect")
    return asyncio.run(fn(*args))


def prepare(work: Path, size: int, nqueries: int, seed: int) -> float:
    embedder = HashingEmbedder()
    texts, qtexts = corpus(seed, size), queries(seed, nqueries)
    began = time.perf_counter()
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    rate = size / (time.perf_counter() - began)
    np.save(work / "vectors.npy", vectors)
    np.save(work / "qvectors.npy", np.asarray(embedder.embed(qtexts), dtype=np.float32))
    (work / "texts.json").write_text(json.dumps(texts))
    (work / "qtexts.json").write_text(json.dumps(qtexts))
    return rate


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def show(title: str, rows: list[dict[str, Any]], markdown: bool) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    if markdown:
        print(f"\n**{title}**\n\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
        for row in rows:
            print("| " + " | ".join(fmt(row.get(c, "-")) for c in columns) + " |")
        return
    table = Table(title=title)
    for c in columns:
        table.add_column(c, justify="left" if c in ("backend", "embedder") else "right")
    for row in rows:
        table.add_row(*(fmt(row.get(c, "-")) for c in columns))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200, help="queries per edge measurement")
    parser.add_argument("--local-queries", default="30,5", help="queries per size for qdrant-client local mode")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-minilm", action="store_true", help="skip MiniLM (without the embed extra)")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables (for benchmarks/README.md)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    local_queries = [int(s) for s in args.local_queries.split(",")]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="waypoint-memory-bench-") as tmp:
        work = Path(tmp)
        console.print(f"embedding {max(sizes):,} texts with the hashing embedder ...")
        rate = prepare(work, max(sizes), args.queries, args.seed)
        rows: list[dict[str, Any]] = []
        for size, nlocal in zip(sizes, local_queries, strict=True):
            for backend, nq in (("edge", args.queries), ("local", nlocal)):
                console.print(f"latency: {backend} at {size:,} points, {nq} queries ...")
                rows.extend(in_child(latency, backend, size, work, nq))
        ups = [in_child(upserts, backend, work) for backend in ("edge", "local")]
        specs = ["hashing"] if args.no_minilm else ["hashing", "minilm"]
        recalls = []
        for spec in specs:
            console.print(f"recall@5 with {spec} ...")
            recalls.append(in_child(recall_at_5, spec, args.seed, work))
    timing = ["backend", "size", "queries", "p50 no filter", "p95 no filter", "p50 tenant", "p95 tenant",
              "search p50", "search p95"]  # fmt: skip
    show("recall latency, ms (engine: nearest 20 by cosine; search: store.search k=5 = embed + filter + re-rank)",
         [{k: row[k] for k in timing} for row in rows], args.markdown)  # fmt: skip
    show("footprint per backend (disk after flush; RSS growth from open to close, in its own process)",
         [{k: v for k, v in row.items() if k not in timing[2:]} for row in rows], args.markdown)  # fmt: skip
    show("upsert throughput (store.upsert, 100 per call, hashing embedder included)", ups, args.markdown)
    show(f"recall@5 on the planted set (seed {args.seed}); hashing embeds {rate:,.0f} texts/s", recalls, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
