"""One suite, both Qdrant backends: the embedded engine (qdrant-edge) and qdrant-client's async client.

No Qdrant server runs on these machines, so the server backend runs on qdrant-client's local
mode (`location=":memory:"`): the same `AsyncQdrantClient` API and the same code path in
`QdrantServerStore`, with the engine emulated in Python. Pointing `url=` at a real server is
the only difference in production.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import AsyncQdrantClient, models

from waypoint.config import Settings
from waypoint.errors import ConfigError, StackError
from waypoint.memory import Episode, EpisodicStore, HashingEmbedder, open_store
from waypoint.memory.base import QdrantStoreBase
from waypoint.memory.edge import EdgeStore
from waypoint.memory.ranking import HALF_LIFE_SECONDS, NEAR_DUPLICATE_COSINE, blend
from waypoint.memory.server import QdrantServerStore

NOW = 1_800_000_000.0
DAY = 24 * 3600.0
# qdrant-client says once that local mode ignores payload indexes; that is the point of RecordingClient.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect")
INDEXED = {"tenant", "run_id", "agent", "kind", "step", "created_at", "first_at", "runs", "trees", "root_run_id"}


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, recording each call's batch size and thread."""

    def __init__(self, dim: int = 384, name: str = "hashing") -> None:
        super().__init__(dim)
        self.name = name
        self.calls: list[tuple[int, int]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append((len(texts), threading.get_ident()))
        return super().embed(texts)


class RecordingClient(AsyncQdrantClient):
    """The real client, remembering the payload indexes asked for: local mode accepts them but does
    not report them back (`payload_schema` stays empty), a server would."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.indexes: dict[str, Any] = {}

    async def create_payload_index(self, collection_name: str, field_name: str, **kwargs: Any) -> Any:
        self.indexes[field_name] = kwargs["field_schema"]
        return await super().create_payload_index(collection_name, field_name, **kwargs)


def server_store(client: AsyncQdrantClient, embedder: HashingEmbedder) -> QdrantServerStore:
    return QdrantServerStore(client, "test_episodes", embedder)


@pytest.fixture(params=["edge", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[QdrantStoreBase]:
    embedder = CountingEmbedder()
    s: QdrantStoreBase
    if request.param == "edge":
        s = EdgeStore(tmp_path / "shard", embedder)
    else:
        s = server_store(RecordingClient(location=":memory:"), embedder)
    yield s
    await s.close()


def ep(tenant: str = "t1", run: str = "run-1", step: int = 1, kind: str = "step", text: str = "x", **kw) -> Episode:
    return Episode(tenant=tenant, agent=kw.pop("agent", "helper"), run_id=run, step=step, kind=kind, text=text, **kw)


async def test_upsert_then_list_run_in_order(store: QdrantStoreBase):
    episodes = [
        ep(step=2, kind="step", text="wrote the report"),
        ep(step=1, kind="step", index=1, text="read notes/b.txt"),
        ep(step=1, kind="step", index=0, text="read notes/a.txt"),
        ep(step=1, kind="decision", text="use the word count tool", importance=0.8),
        ep(run="run-2", text="another run"),
    ]
    ids = await store.upsert(episodes)
    assert ids == [e.id for e in episodes]
    listed = await store.list_run("t1", "run-1")
    assert [(e.step, e.kind, e.index) for e in listed] == [
        (1, "decision", 0),
        (1, "step", 0),
        (1, "step", 1),
        (2, "step", 0),
    ]
    decision = listed[0]
    assert decision.text == "use the word count tool" and decision.importance == 0.8 and decision.agent == "helper"
    assert decision.created_at > NOW - 10 * 365 * DAY  # 0 was replaced by the time of the upsert
    assert await store.count("t1") == 5
    assert await store.count() == 5


async def test_the_same_episode_twice_is_one_point(store: QdrantStoreBase):
    first = ep(step=3, kind="step", text="called the search tool", created_at=NOW)
    again = ep(step=3, kind="step", text="called the search tool (retried)", created_at=NOW + 5)
    assert first.id == again.id and first.id != ep(step=3, index=1).id
    await store.upsert([first])
    await store.upsert([again])
    await store.upsert([first, first])  # duplicates inside one batch too
    assert await store.count("t1") == 1
    # a retried fact write is the same point, not a merge into itself
    fact = ep(step=4, kind="fact", text="The build server is ci-3.")
    assert await store.upsert([fact]) == [fact.id]
    assert await store.upsert([fact]) == [fact.id]
    assert await store.count("t1") == 2


async def test_near_duplicate_facts_merge(store: QdrantStoreBase):
    fact = ep(step=1, kind="fact", text="The staging database password rotates every Monday.", created_at=NOW - DAY)
    [fact_id] = await store.upsert([fact])
    # trivial differences, another run and step, higher importance, later: merged into the first point
    same = ep(
        run="run-9",
        step=7,
        kind="fact",
        text="the staging database password rotates every monday!!",
        importance=0.9,
        created_at=NOW,
    )
    assert await store.upsert([same]) == [fact_id]
    assert await store.count("t1") == 1
    [kept] = await store.list_run("t1", "run-1")
    assert kept.importance == 0.9 and kept.created_at == NOW and kept.text == fact.text
    # a lower importance never lowers it, an older time never moves it back
    await store.upsert([ep(run="run-8", kind="fact", text=fact.text, importance=0.1, created_at=NOW - 9 * DAY)])
    [kept] = await store.list_run("t1", "run-1")
    assert (kept.importance, kept.created_at) == (0.9, NOW)
    # a different fact is stored; so is the same text as a plain step, for another agent or tenant
    other = ep(run="run-9", step=8, kind="fact", text="The staging database password rotates every Friday.")
    step = ep(run="run-9", step=9, kind="step", text=fact.text)
    other_agent = ep(run="run-9", step=10, kind="fact", text=fact.text, agent="other")
    other_tenant = ep(tenant="t2", run="run-9", step=11, kind="fact", text=fact.text)
    ids = await store.upsert([other, step, other_agent, other_tenant])
    assert ids == [other.id, step.id, other_agent.id, other_tenant.id]
    assert await store.count("t1") == 4 and await store.count("t2") == 1


async def test_near_duplicates_inside_one_batch_and_decisions(store: QdrantStoreBase):
    a = ep(step=1, kind="decision", text="Ship the release on Friday.", importance=0.5)
    b = ep(step=2, kind="decision", text="ship the release on friday", importance=0.8)
    c = ep(step=3, kind="decision", text="Postpone the release to next week.")
    assert await store.upsert([a, b, c]) == [a.id, a.id, c.id]
    listed = await store.list_run("t1", "run-1")
    assert [(e.step, e.importance) for e in listed] == [(1, 0.8), (3, 0.3)]


async def test_tenant_isolation(store: QdrantStoreBase):
    await store.upsert([ep(tenant="A", run="r", step=i, text=f"secret plan number {i}") for i in range(3)])
    assert [r.episode.tenant for r in await store.search("A", "secret plan")] == ["A"] * 3
    assert await store.search("B", "secret plan") == []
    assert await store.list_run("B", "r") == []
    assert await store.count("B") == 0
    assert await store.delete_run("B", "r") == 0
    assert await store.count("A") == 3
    # the same run id under tenant B is B's own
    await store.upsert([ep(tenant="B", run="r-b", step=0, text="secret plan of B")])
    assert [r.episode.text for r in await store.search("B", "secret plan")] == ["secret plan of B"]
    assert await store.delete_run("A", "r") == 3
    assert await store.count("A") == 0 and await store.count("B") == 1
    with pytest.raises(ValueError, match="tenant is required"):
        await store.search("", "secret plan")


async def test_search_filters_and_score(store: QdrantStoreBase):
    await store.upsert(
        [
            ep(run="r1", step=1, kind="step", text="deployed the billing service to staging", created_at=NOW - DAY),
            ep(run="r1", step=2, kind="decision", text="billing service deploys need approval", created_at=NOW),
            ep(run="r2", step=1, kind="summary", text="the billing service migration finished", agent="ops"),
            ep(run="r2", step=2, kind="step", text="watered the office plants"),
        ]
    )
    hits = await store.search("t1", "billing service deploy", k=2, now=NOW)
    assert len(hits) == 2 and all("billing" in h.episode.text for h in hits)
    for h in hits:
        assert -1.0 <= h.similarity <= 1.0
        assert h.score == pytest.approx(blend(h.similarity, h.episode.created_at, h.episode.importance, NOW))
    assert hits[0].score >= hits[1].score
    assert {h.episode.run_id for h in await store.search("t1", "billing", run_id="r2")} == {"r2"}
    assert {h.episode.agent for h in await store.search("t1", "billing", agent="ops")} == {"ops"}
    kinds = await store.search("t1", "billing", kinds=["decision", "summary"])
    assert sorted(h.episode.kind for h in kinds) == ["decision", "summary"]
    assert await store.search("t1", "billing", k=0) == []


async def test_recall_as_of_a_time_and_without_some_runs(store: QdrantStoreBase):
    """What a rerun recalls: memory as it was at a time, without its lineage's episodes, except its own past."""
    text = "the deploy key of the staging cluster"
    await store.upsert(
        [
            ep(run="before", step=1, text=f"{text} is K-1", created_at=NOW - DAY),
            ep(run="after", step=1, text=f"{text} is K-2", created_at=NOW + DAY),
            # the original run (started after NOW) and its rerun's own steps
            ep(run="original", step=1, text=f"{text}: looked up", created_at=NOW + 10),
            ep(run="original", step=2, text=f"{text}: final answer K-3", created_at=NOW + 20),
            ep(run="rerun", step=3, text=f"{text}: the rerun's own step", created_at=NOW + 30),
            # a fact known before NOW and learned again after it: merged, still known as of NOW
            ep(run="before", step=2, kind="fact", text="The deploy key is rotated weekly.", created_at=NOW - DAY),
            ep(run="after", step=2, kind="fact", text="the deploy key is rotated weekly", created_at=NOW + DAY),
        ]
    )
    # a point written before episodes carried `first_at`: its `created_at` stands for it
    legacy = ep(run="legacy", step=1, text=f"{text} was K-0", created_at=NOW - 2 * DAY)
    payload = legacy.payload()
    del payload["first_at"]
    [vector] = await store.embed([legacy.text])
    await store._write([(legacy.id, vector, payload)])

    def found(hits: list) -> set[tuple[str, int]]:
        return {(h.episode.run_id, h.episode.step) for h in hits}

    everything = found(await store.search("t1", text, k=20))
    assert len(everything) == 7  # the repeated fact is one point
    # as of NOW: what was stored by then, and nothing of the excluded runs
    as_of = await store.search("t1", text, k=20, as_of=NOW, exclude_runs=["original"])
    assert found(as_of) == {("before", 1), ("before", 2), ("legacy", 1)}
    assert next(h.episode for h in as_of if h.episode.kind == "fact").first_at == NOW - DAY
    # the run's own past passes both rules: itself, and the original up to the step it started from
    own = await store.search(
        "t1", text, k=20, as_of=NOW, exclude_runs=["original"], own_past=[("rerun", None), ("original", 1)]
    )
    assert found(own) == {("before", 1), ("before", 2), ("legacy", 1), ("rerun", 3), ("original", 1)}
    # memory as it is now, without the original's episodes
    current = await store.search("t1", text, k=20, exclude_runs=["original"])
    assert found(current) == everything - {("original", 1), ("original", 2)}
    # a fact the rerun saved again, merged into the original's point, is the rerun's own too
    vault = ep(run="original", step=2, kind="fact", text="The vault code is 4412.", created_at=NOW + 20)
    repeat = ep(run="rerun", step=1, kind="fact", text="the vault code is 4412", created_at=NOW + 40)
    assert await store.upsert([vault]) == await store.upsert([repeat]) == [vault.id]
    kwargs: dict[str, Any] = {"as_of": NOW, "exclude_runs": ["original"]}
    assert found(await store.search("t1", "vault code", **kwargs)) == {("before", 1), ("before", 2), ("legacy", 1)}
    mine = await store.search("t1", "vault code", own_past=[("rerun", None)], **kwargs)
    assert ("original", 2) in found(mine)


async def test_recall_within_a_tree_of_runs(store: QdrantStoreBase):
    """A run of a tree of sub-agent runs recalls the tree's episodes whatever their agent and time; the
    rest by its agent and lineage as before. Episodes stored before trees carry none: old rules only."""
    text = "the river code of the northern dam"
    await store.upsert(
        [
            ep(run="lead", agent="lead", text=f"{text}: asked a reader", root_run_id="lead", created_at=NOW + 10),
            ep(run="lead.1.0", agent="reader", kind="fact", text=f"{text} is OTTER-9", root_run_id="lead"),
            ep(run="lead.1.1", agent="writer", step=2, text=f"{text}: wrote it down", root_run_id="lead"),
            # another tree, and a run of the lead's agent without one
            ep(run="other", agent="reader", kind="fact", text=f"{text} was OTTER-1", root_run_id="other"),
            ep(run="alone", agent="lead", text=f"{text}: an older lead run", root_run_id="alone", created_at=NOW - DAY),
        ]
    )
    legacy = ep(run="legacy", agent="reader", text=f"{text}: before trees")
    payload = {k: v for k, v in legacy.payload().items() if k != "root_run_id"}
    [vector] = await store.embed([legacy.text])
    await store._write([(legacy.id, vector, payload)])

    async def recall(agent: str, **kwargs: Any) -> set[str]:
        return {h.episode.run_id for h in await store.search("t1", text, k=20, agent=agent, **kwargs)}

    assert await recall("lead") == {"lead", "alone"}  # no tree: by agent only, as before
    # the parent recalls what its children learned, the children their parent's and each other's
    assert await recall("lead", tree="lead") == {"lead", "alone", "lead.1.0", "lead.1.1"}
    assert await recall("reader", tree="lead") == {"lead", "lead.1.0", "lead.1.1", "other", "legacy"}
    # a tree's episodes pass the time and lineage rules too; the rest still obey them
    as_of = await recall("lead", tree="lead", as_of=NOW, exclude_runs=["alone"])
    assert as_of == {"lead", "lead.1.0", "lead.1.1"}
    assert await recall("lead", as_of=NOW) == {"alone"}  # without its tree, the lead run is too new
    [child] = [h.episode for h in await store.search("t1", text, run_id="lead.1.0")]
    assert child.root_run_id == "lead" and Episode.from_payload(payload).root_run_id is None
    # a child's fact merged into another tree's point is still its tree's to recall
    repeat = ep(run="next.1.0", agent="reader", kind="fact", text=f"{text} was otter-1!", root_run_id="next")
    assert await store.upsert([repeat]) == [ep(run="other", kind="fact").id]
    assert "other" in await recall("lead", tree="next")
    assert "other" not in await recall("lead", tree="lead")


async def test_rerank_blends_recency_and_importance(store: QdrantStoreBase):
    text = "the nightly backup job failed with a disk full error"
    old = ep(step=1, text=text, created_at=NOW - 30 * DAY)
    new = ep(step=2, text=text, created_at=NOW)
    important = ep(step=3, text=text, created_at=NOW, importance=0.9)
    vague_fresh = ep(step=4, text="a job ran tonight", created_at=NOW, importance=1.0)
    await store.upsert([old, new, important, vague_fresh])
    hits = await store.search("t1", text, k=4, now=NOW)
    # equal similarity: importance, then recency decide; the exact old memory still beats a vague fresh one
    assert [h.episode.step for h in hits] == [3, 2, 1, 4]
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-4)
    assert hits[2].score == pytest.approx(0.7 * 1.0 + 0.2 * 0.5 ** (30 * DAY / HALF_LIFE_SECONDS) + 0.1 * 0.3, abs=1e-4)


async def test_delete_run_removes_only_that_run(store: QdrantStoreBase):
    await store.upsert([ep(run="r1", step=i, text=f"step {i}") for i in range(4)] + [ep(run="r2", text="keep me")])
    assert await store.delete_run("t1", "r1") == 4
    assert await store.list_run("t1", "r1") == []
    assert [e.text for e in await store.list_run("t1", "r2")] == ["keep me"]
    assert await store.delete_run("t1", "r1") == 0


async def test_embedding_is_batched_and_off_the_event_loop(store: QdrantStoreBase):
    embedder = store.embedder
    assert isinstance(embedder, CountingEmbedder)
    loop_thread = threading.get_ident()
    await store.upsert([ep(step=i, text=f"observation number {i}") for i in range(150)])
    assert [n for n, _ in embedder.calls] == [64, 64, 22]
    assert all(thread != loop_thread for _, thread in embedder.calls)
    assert await store.count("t1") == 150


async def test_payload_indexes_are_created(store: QdrantStoreBase):
    await store.upsert([ep(text="anything")])
    if isinstance(store, EdgeStore):
        schema = store.shard.info().payload_schema
        assert set(schema) == INDEXED
        assert schema["tenant"].params is not None and schema["tenant"].params.is_tenant is True
    else:
        assert isinstance(store, QdrantServerStore)
        assert isinstance(store.client, RecordingClient)
        assert set(store.client.indexes) == INDEXED
        tenant = store.client.indexes["tenant"]
        assert isinstance(tenant, models.KeywordIndexParams) and tenant.is_tenant is True
        assert store.client.indexes["step"] == models.PayloadSchemaType.INTEGER
        info = await store.client.get_collection(store.collection)
        assert info.config.metadata == {"embedder": "hashing", "dim": 384}
        assert info.config.params.vectors.size == 384  # type: ignore[union-attr]


async def test_another_embedder_is_refused(tmp_path: Path):
    shard = tmp_path / "shard"
    edge = EdgeStore(shard, HashingEmbedder())
    await edge.upsert([ep(text="hello")])
    await edge.close()
    with pytest.raises(ConfigError, match="384-d vectors of embedder 'hashing'.*WAYPOINT_EMBEDDER"):
        EdgeStore(shard, HashingEmbedder(dim=128))
    with pytest.raises(ConfigError, match="WAYPOINT_QDRANT_PATH"):
        EdgeStore(shard, CountingEmbedder(name="minilm"))  # same size, other vector space
    reopened = EdgeStore(shard, HashingEmbedder())
    assert [e.text for e in await reopened.list_run("t1", "run-1")] == ["hello"]  # data survived the reopen
    await reopened.close()

    client = AsyncQdrantClient(location=":memory:")
    await server_store(client, HashingEmbedder()).upsert([ep(text="hello")])
    for embedder in (HashingEmbedder(dim=128), CountingEmbedder(name="minilm")):
        with pytest.raises(ConfigError, match="WAYPOINT_QDRANT_COLLECTION"):
            await server_store(client, embedder).count()
    assert await server_store(client, HashingEmbedder()).count() == 1
    await client.close()


async def test_a_second_open_of_a_shard_is_a_clear_error(tmp_path: Path):
    first = EdgeStore(tmp_path / "shard", HashingEmbedder())
    with pytest.raises(StackError, match="open in another process.*WAYPOINT_QDRANT_PATH"):
        EdgeStore(tmp_path / "shard", HashingEmbedder())
    await first.close()
    await first.close()  # closing twice is harmless
    second = EdgeStore(tmp_path / "shard", HashingEmbedder())  # the lock left with the first
    await second.close()


async def test_open_store_follows_settings(tmp_path: Path):
    settings = Settings(state_dir=tmp_path / "state")
    store: EpisodicStore = open_store(settings)
    assert isinstance(store, EdgeStore) and store.path == (tmp_path / "state" / "qdrant").resolve()
    assert store.embedder.name == "hashing"
    await store.close()
    # A server URL: nothing connects until the first use, so no server is needed to build it.
    remote = open_store(Settings(state_dir=tmp_path, qdrant_url="http://127.0.0.1:1", qdrant_collection="mem"))
    assert isinstance(remote, QdrantServerStore) and remote.collection == "mem"
    await remote.close()


def test_near_duplicate_threshold_is_documented():
    from tests.docs import page

    memory = page("guides/memory.md")
    assert f"{NEAR_DUPLICATE_COSINE}" in memory and "0.7 * similarity + 0.2 * recency + 0.1 * importance" in memory


def test_episode_ids_are_stable():
    # uuid5 of (run_id, step, kind, index): the same in every process, so it is pinned here
    e = Episode(tenant="t", agent="a", run_id="run-1", step=3, kind="fact", text="whatever", index=2)
    assert e.id == str(uuid.UUID(e.id)) and e.id == Episode("u", "b", "run-1", 3, "fact", "other", index=2).id
    assert e.id != Episode("t", "a", "run-1", 3, "step", "whatever", index=2).id
    with pytest.raises(ValueError, match="kind"):
        Episode("t", "a", "r", 1, "note", "x")
