"""How recall is ordered and when two memories count as one. Shared by every backend.

    score   = 0.7 * similarity + 0.2 * recency + 0.1 * importance
    recency = 0.5 ** (age / HALF_LIFE_SECONDS)        (1.0 now, 0.5 after 7 days)

Qdrant returns the `candidates(k)` nearest episodes by cosine (always filtered by
tenant); they are re-ranked by `score` and the best k returned. Similarity leads, so
an old but exact memory still beats a fresh vague one; recency and importance break
near-ties.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from waypoint.names import EpisodeKind

SIMILARITY_WEIGHT = 0.7
RECENCY_WEIGHT = 0.2
IMPORTANCE_WEIGHT = 0.1
HALF_LIFE_SECONDS = 7 * 24 * 3600.0

# Kinds whose repeats are merged instead of stored again: an agent that learns the same
# fact in ten runs should recall it once, not crowd out everything else with it.
MERGED_KINDS = frozenset({EpisodeKind.FACT, EpisodeKind.DECISION})
# Cosine at or above which two texts of a merged kind are one memory, for the hashing embedder.
# Measured: case, punctuation and spacing changes stay at 1.0, while one changed word in a short
# sentence (another day, another number) falls to 0.7-0.9.
NEAR_DUPLICATE_COSINE = 0.95
# The bar for semantic embedders (MiniLM, OpenAI), unless the embedder sets `duplicate_cosine`.
# They put a fact and the same fact with another value close together: with MiniLM, "rotates
# every Monday" against "every Friday" is 0.975, above a trivial rewording (0.971). So for them
# only near-identical vectors merge; the normalized-text rule still catches case and punctuation.
SEMANTIC_NEAR_DUPLICATE_COSINE = 0.99


def candidates(k: int) -> int:
    """How many nearest neighbours to fetch for a top-k answer, so re-ranking has room to act."""
    return max(4 * k, k + 16)


def recency(created_at: float, now: float) -> float:
    age = max(0.0, now - created_at)
    return float(0.5 ** (age / HALF_LIFE_SECONDS))


def blend(similarity: float, created_at: float, importance: float, now: float) -> float:
    return SIMILARITY_WEIGHT * similarity + RECENCY_WEIGHT * recency(created_at, now) + IMPORTANCE_WEIGHT * importance


@lru_cache(maxsize=8192)
def normalized_text(text: str) -> str:
    """Case, accents, punctuation and spacing removed: "The API key is X." == "the api-key is x"."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    return " ".join(re.findall(r"[a-z0-9]+", folded))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def duplicate_cosine(embedder: object) -> float:
    return float(getattr(embedder, "duplicate_cosine", SEMANTIC_NEAR_DUPLICATE_COSINE))


def is_near_duplicate(text_a: str, text_b: str, similarity: float, threshold: float = NEAR_DUPLICATE_COSINE) -> bool:
    return similarity >= threshold or normalized_text(text_a) == normalized_text(text_b)
