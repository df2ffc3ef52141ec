"""How much of each request a provider's prompt cache could serve: the fakes' per-request record.

Providers cache the longest prefix a request shares with one they saw before (tools first, then
the messages in order). A fake server hands each request to `PrefixTracker.observe` as its
cacheable parts in order (`parts`: any JSON values, e.g. the tool list then one item per message)
and a conversation key (requests of one run share it); the tracker compares them with the
previous request of that conversation, part by part, and records the request's size and the size
of the prefix it repeats, in estimated tokens (`waypoint.tokens`, 4 characters a token).

`stats()` is what `GET /stats` on a fake answers and what benchmarks/providers.py reads: every
request's record and the share of all input tokens that repeated the previous request's prefix.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from waypoint.tokens import text_tokens

# OpenAI caches prompts of 1,024 tokens or more, in steps of 128 tokens past the first 1,024.
OPENAI_MIN_CACHED = 1024
OPENAI_CACHE_STEP = 128


@dataclass(frozen=True)
class PrefixRecord:
    index: int  # 1-based, over the tracker's requests
    conversation: str
    tokens: int  # the whole request's cacheable parts
    prefix_tokens: int  # of them, the prefix the previous request of the conversation had too


def conversation_key(*parts: Any) -> str:
    """A short key for the parts every request of one run starts with (instructions and task)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def openai_cached(prefix_tokens: int) -> int:
    """The cached tokens OpenAI would report for a repeated prefix of this size."""
    if prefix_tokens < OPENAI_MIN_CACHED:
        return 0
    return prefix_tokens - (prefix_tokens - OPENAI_MIN_CACHED) % OPENAI_CACHE_STEP


class PrefixTracker:
    def __init__(self) -> None:
        self.records: list[PrefixRecord] = []
        self._last: dict[str, list[tuple[str, int]]] = {}  # conversation -> its last request's parts
        self._lock = threading.Lock()

    def observe(self, conversation: str, parts: Sequence[Any]) -> PrefixRecord:
        encoded = [json.dumps(p, sort_keys=True, ensure_ascii=False) for p in parts]
        sized = [(text, text_tokens(text)) for text in encoded]
        with self._lock:
            previous = self._last.get(conversation, [])
            prefix = 0
            for (text, tokens), (before, _) in zip(sized, previous, strict=False):
                if text != before:
                    break
                prefix += tokens
            self._last[conversation] = sized
            record = PrefixRecord(len(self.records) + 1, conversation, sum(t for _, t in sized), prefix)
            self.records.append(record)
        return record

    def stats(self) -> dict[str, Any]:
        with self._lock:
            records = list(self.records)
        total = sum(r.tokens for r in records)
        repeated = sum(r.prefix_tokens for r in records)
        return {
            "requests": [asdict(r) for r in records],
            "input_tokens": total,
            "prefix_tokens": repeated,
            "prefix_share": repeated / total if total else 0.0,
        }
