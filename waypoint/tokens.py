"""Token estimates: the one rule (4 characters a token) every part of Waypoint sizes text by.

Exact counts come from the model's usage report and are stored with each answer; an
estimate is what working memory, checkpoints and compaction use before a call, so it only
has to be close and fast. `benchmarks/tokens.py` measures it against a real subword
tokenizer (MiniLM's WordPiece, the one available offline): estimate / actual is about 0.9
on English prose and Python, 0.7 on dense JSON, and 0.55 to 0.7 on the worst single
messages. So it runs low; inline compaction triggers on the model's exact usage report
(`Agent.compact_at`), not on this estimate. The SQL that selects runs for compaction divides
by CHARS_PER_TOKEN too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Protocol

from waypoint.types import Message

CHARS_PER_TOKEN = 4


def text_tokens(text: str) -> int:
    """Estimated tokens of a text."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens of messages, over their JSON form (roles and keys included)."""
    return text_tokens(json.dumps(list(messages), ensure_ascii=False))


def messages_tokens(messages: Sequence[Message]) -> int:
    """Estimated tokens message by message, so that the sizes of consecutive ranges add up."""
    return sum(estimate_tokens([m]) for m in messages)


class TokenCounter(Protocol):
    """Counts the tokens of messages; plug a real tokenizer into working memory with one."""

    def count(self, messages: Sequence[Message]) -> int: ...


class CharEstimate:
    """The default TokenCounter: `estimate_tokens`."""

    chars_per_token = CHARS_PER_TOKEN

    def count(self, messages: Sequence[Message]) -> int:
        return estimate_tokens(messages)


DEFAULT_COUNTER: TokenCounter = CharEstimate()
