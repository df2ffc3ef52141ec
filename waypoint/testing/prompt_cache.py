"""Prompt caching on the fakes: what each provider's cache would serve of a request, by its documented rules.

Every fake keeps two records of each request, both here:

- `PrefixTracker`: the request's cacheable parts in order (`parts`: any JSON values, e.g. the tool
  list then one item per message) and a conversation key (requests of one run share it). It records
  the request's size, the prefix it repeats of the previous request of its conversation, part by
  part, and the longest prefix (whole parts) any earlier request of the fake had, in estimated
  tokens (`waypoint.tokens`, 4 characters a token). `report` adds what the fake's usage said: all
  input tokens, the cache reads and the cache writes, as the provider's own fields name them.
- the provider's cache rule, which sets the usage the fake answers with:
  - OpenAI (`openai_cached`): the longest prefix seen before, 1,024 tokens at least, counted in
    steps of 128 past the first 1,024;
  - Gemini (`ImplicitCache`): implicit caching, the longest prefix a recent request of the same
    model had, 1,024 tokens at least (Gemini 2.5 Flash's minimum);
  - Anthropic (`waypoint.testing.fake_anthropic.PromptCache`): only at `cache_control` breakpoints,
    with the 20-block lookback and the minimum cacheable length.

`stats()` is what `GET /stats` on a fake answers and what benchmarks/providers.py reads: every
request's record, the share of all input tokens that repeated the previous request's prefix, and
the share the provider's usage reported as read from the cache (`cache_share`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from waypoint.tokens import text_tokens

# OpenAI caches prompts of 1,024 tokens or more, in steps of 128 tokens past the first 1,024.
OPENAI_MIN_CACHED = 1024
OPENAI_CACHE_STEP = 128
# Gemini's implicit caching starts at 1,024 tokens for 2.5 Flash (2,048 for 2.5 Pro).
GEMINI_MIN_CACHED = 1024
# Prefix hashes a tracker remembers before it starts over (a fake serves tests and benchmarks, not days).
SEEN_LIMIT = 500_000


@dataclass(frozen=True)
class PrefixRecord:
    index: int  # 1-based, over the tracker's requests
    conversation: str
    tokens: int  # the whole request's cacheable parts
    prefix_tokens: int  # of them, the prefix the previous request of the conversation had too
    seen_prefix_tokens: int = 0  # of them, the longest prefix (whole parts) any earlier request had
    # What the fake's usage reported, in the provider's own terms (0 until `report`).
    prompt_tokens: int = 0  # all input: the cached part included
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


def conversation_key(*parts: Any) -> str:
    """A short key for the parts every request of one run starts with (instructions and task)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def openai_cached(prefix_tokens: int) -> int:
    """The cached tokens OpenAI would report for a repeated prefix of this size."""
    if prefix_tokens < OPENAI_MIN_CACHED:
        return 0
    return prefix_tokens - (prefix_tokens - OPENAI_MIN_CACHED) % OPENAI_CACHE_STEP


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix, by binary search over C-speed slice comparisons."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class ImplicitCache:
    """Implicit prefix caching (Gemini's): a request reads from the cache the longest prefix, in
    characters, that one of the `recent` latest requests of its scope (the model) began with, if it
    is `min_tokens` tokens or more. No breakpoints, no writes to pay for."""

    def __init__(self, min_tokens: int = GEMINI_MIN_CACHED, recent: int = 32) -> None:
        self.min_tokens = min_tokens
        self._recent: dict[str, deque[str]] = {}
        self._size = recent
        self._lock = threading.Lock()

    def use(self, scope: str, text: str) -> tuple[int, int]:
        """(prompt tokens, cached tokens) of one request's text, remembered for the next ones."""
        with self._lock:
            recent = self._recent.setdefault(scope, deque(maxlen=self._size))
            shared = max((common_prefix(text, earlier) for earlier in recent), default=0)
            recent.append(text)
        prompt = text_tokens(text)
        cached = min(shared // 4, prompt)
        return prompt, cached if cached >= self.min_tokens else 0


class PrefixTracker:
    def __init__(self) -> None:
        self.records: list[PrefixRecord] = []
        self._last: dict[str, list[tuple[str, int]]] = {}  # conversation -> its last request's parts
        self._seen: set[str] = set()  # the hash of every prefix (whole parts) of every request so far
        self._lock = threading.Lock()

    def observe(self, conversation: str, parts: Sequence[Any]) -> PrefixRecord:
        encoded = [json.dumps(p, sort_keys=True, ensure_ascii=False) for p in parts]
        sized = [(text, text_tokens(text)) for text in encoded]
        chain, hashes = hashlib.sha256(), []
        for text in encoded:
            chain.update(b"\x00" + text.encode())
            hashes.append(chain.copy().hexdigest())
        with self._lock:
            previous = self._last.get(conversation, [])
            prefix = 0
            for (text, tokens), (before, _) in zip(sized, previous, strict=False):
                if text != before:
                    break
                prefix += tokens
            seen = 0
            for digest, (_, tokens) in zip(hashes, sized, strict=True):
                if digest not in self._seen:
                    break
                seen += tokens
            if len(self._seen) > SEEN_LIMIT:
                self._seen.clear()
            self._seen.update(hashes)
            self._last[conversation] = sized
            record = PrefixRecord(len(self.records) + 1, conversation, sum(t for _, t in sized), prefix, seen)
            self.records.append(record)
        return record

    def report(self, record: PrefixRecord, prompt_tokens: int, cache_read: int, cache_write: int = 0) -> PrefixRecord:
        """Add to `record` the usage the fake answered its request with."""
        done = replace(
            record, prompt_tokens=prompt_tokens, cache_read_tokens=cache_read, cache_write_tokens=cache_write
        )
        with self._lock:
            self.records[record.index - 1] = done
        return done

    def stats(self) -> dict[str, Any]:
        with self._lock:
            records = list(self.records)
        total = sum(r.tokens for r in records)
        repeated = sum(r.prefix_tokens for r in records)
        prompt = sum(r.prompt_tokens for r in records)
        read = sum(r.cache_read_tokens for r in records)
        return {
            "requests": [asdict(r) for r in records],
            "input_tokens": total,
            "prefix_tokens": repeated,
            "prefix_share": repeated / total if total else 0.0,
            "prompt_tokens": prompt,
            "cache_read_tokens": read,
            "cache_share": read / prompt if prompt else 0.0,
        }
