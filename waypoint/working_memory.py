"""Working memory: the context of the next model call, assembled within a token budget.

The parts, in this order:

1. instructions and the task (the checkpoint's head segment);
2. pinned decisions (`decision` events and `pin_decision` calls), verbatim;
3. the latest compaction summary, which stands for the turns it covers;
4. the most recent turns, one group of messages per step, oldest first;
5. episodes recalled from long-term memory, with their source run and step;

then the user messages sent since the last step.

Prompt caching: providers serve the prefix a request shares with an earlier one from their cache
(OpenAI and Gemini on their own, Anthropic at its cache breakpoints) at a tenth to half the input
price. So what changes from step to step goes last: the recalled episodes (a new recall every
step) come after the turns, and the turns leave the window in blocks, not one a step. When the
whole passes the budget, enough of the oldest turns go that it comes back down to about `DROP_TO`
of the budget; then the prefix stays byte for byte the same for the steps that refill the window,
until the next block. (The checkpoint's window, `waypoint.store.context.trim`, drops by the same
rule; dropping one turn a step, as before, changed the prefix at every step once the window was
full, and no cache could hit.) If the turns cannot go (the newest always stays), the recalled
episodes go, the least relevant first; the instructions, the pinned decisions, the summary and the
newest turn always stay. A compaction's summary changes the prefix once, when it is made.

Assembly is a pure function of its inputs, so the same checkpoint gives the same
context on every worker and every retry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from waypoint.tokens import DEFAULT_COUNTER, TokenCounter
from waypoint.types import Memory, Message

# Over budget, the oldest turns leave in a block that brings the window down to this share of it.
DROP_TO = 0.7


def block_drop(sizes: Sequence[int], excess: int, budget: int) -> int:
    """How many of the oldest turns (of `sizes`, oldest first) leave when the whole is `excess`
    tokens over `budget`: the fewest whose sizes reach the excess rounded up to whole blocks of
    `(1 - DROP_TO) * budget` tokens, so the count stays the same from step to step while the
    excess grows within a block. The newest turn never goes."""
    if excess <= 0:
        return 0
    block = max(1, int(budget * (1 - DROP_TO)))
    target = math.ceil(excess / block) * block
    dropped = freed = 0
    while dropped < len(sizes) - 1 and freed < target:
        freed += sizes[dropped]
        dropped += 1
    return dropped


@dataclass
class Parts:
    head: list[Message]
    pinned: list[tuple[int, str]] = field(default_factory=list)  # (step, text)
    summary: str | None = None
    recalled: list[Memory] = field(default_factory=list)
    turns: list[list[Message]] = field(default_factory=list)
    user_messages: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Assembled:
    messages: list[Message]
    tokens: int
    dropped_turns: int
    dropped_recalled: int
    recalled: list[Memory] = field(default_factory=list)  # the recalled episodes that stayed in


def pinned_message(pinned: Sequence[tuple[int, str]]) -> Message:
    lines = "\n".join(f"- [step {step}] {text}" for step, text in pinned)
    return {"role": "system", "content": f"Decisions pinned earlier in this run (binding, verbatim):\n{lines}"}


RECALLED_HEADER = "Recalled from long-term memory (most relevant first):"


def recalled_message(recalled: Sequence[Memory]) -> Message:
    lines = "\n".join(f"- [run {m.run_id}, step {m.step}, {m.kind}] {m.text}" for m in recalled)
    return {"role": "system", "content": f"{RECALLED_HEADER}\n{lines}"}


def without_recalled(messages: Sequence[Message]) -> list[Message]:
    """The messages without the recalled episodes' note, which comes after the turns: what a scripted
    model that reads "the last message" (the newest tool result) wants."""
    return [m for m in messages if not (m["role"] == "system" and str(m["content"]).startswith(RECALLED_HEADER))]


def recalled_texts(recalled_text: str | None, refs: Sequence[Mapping[str, Any]]) -> list[str | None]:
    """The text of each recalled episode (refs in the order `recalled_message` wrote them), read
    back from that message; None for an episode the message does not hold."""
    text = recalled_text or ""
    starts: list[tuple[int, int]] = []  # where each episode's line and its text begin
    at = 0
    for ref in refs:
        prefix = f"- [run {ref['run_id']}, step {ref['step']}, {ref['kind']}] "
        found = text.find(prefix, at)
        starts.append((found, found + len(prefix)) if found >= 0 else (-1, -1))
        at = found + len(prefix) if found >= 0 else at
    texts: list[str | None] = []
    for i, (line, begin) in enumerate(starts):
        if line < 0:
            texts.append(None)
            continue
        end = next((s for s, _ in starts[i + 1 :] if s >= 0), len(text) + 1)
        texts.append(text[begin : end - 1])  # up to the newline before the next episode's line
    return texts


def _fixed(parts: Parts) -> list[Message]:
    fixed = list(parts.head)
    if parts.pinned:
        fixed.append(pinned_message(parts.pinned))
    if parts.summary:
        fixed.append({"role": "system", "content": parts.summary})
    return fixed


def _ordered(
    fixed: list[Message],
    memory: Message | None,
    turns: list[list[Message]],
    tail: list[Message],
    *,
    recalled_first: bool = False,
) -> list[Message]:
    """The one order of working memory's messages: what changes every step (the recalled episodes,
    the new user messages) after the turns, so the prefix stays the same from one step to the next.
    `recalled_first`: the order of calls recorded before that (the recalled episodes before the turns)."""
    history = [m for turn in turns for m in turn]
    recalled = [memory] if memory else []
    if recalled_first:
        return [*fixed, *recalled, *history, *tail]
    return [*fixed, *history, *recalled, *tail]


def rebuild(
    parts: Parts, recalled_text: str | None, dropped_turns: int, *, recalled_first: bool = False
) -> list[Message]:
    """The messages a model call received, from its parts as the log holds them and its record: the
    recalled episodes' message verbatim, and how many of the oldest turns its budget dropped.
    `recalled_first`: as calls recorded before the recalled episodes moved after the turns had them."""
    memory = {"role": "system", "content": recalled_text} if recalled_text else None
    turns = [t for t in parts.turns if t][dropped_turns:]
    tail = [{"role": "user", "content": m} for m in parts.user_messages]
    return _ordered(_fixed(parts), memory, turns, tail, recalled_first=recalled_first)


def assemble(parts: Parts, budget: int, counter: TokenCounter = DEFAULT_COUNTER) -> Assembled:
    """The messages of the next model call, at most `budget` tokens where the parts that always
    stay allow it; over it, the oldest turns go in a block (`block_drop`)."""
    fixed = _fixed(parts)
    tail = [{"role": "user", "content": m} for m in parts.user_messages]
    turns = [t for t in parts.turns if t]
    recalled = list(parts.recalled)

    def build() -> list[Message]:
        return _ordered(fixed, recalled_message(recalled) if recalled else None, turns, tail)

    sizes = [counter.count(t) for t in turns]
    fixed_size = counter.count([*fixed, *tail])
    recalled_size = counter.count([recalled_message(recalled)]) if recalled else 0
    dropped_recalled = 0
    dropped_turns = block_drop(sizes, fixed_size + recalled_size + sum(sizes) - budget, budget)
    del turns[:dropped_turns], sizes[:dropped_turns]
    while recalled and fixed_size + recalled_size + sum(sizes) > budget:
        recalled.pop()  # the least relevant first
        dropped_recalled += 1
        recalled_size = counter.count([recalled_message(recalled)]) if recalled else 0
    messages = build()
    return Assembled(messages, counter.count(messages), dropped_turns, dropped_recalled, recalled)
