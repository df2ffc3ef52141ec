"""Working memory: the context of the next model call, assembled within a token budget.

The parts, in this order:

1. instructions and the task (the checkpoint's head segment);
2. pinned decisions (`decision` events and `pin_decision` calls), verbatim;
3. the latest compaction summary, which stands for the turns it covers;
4. episodes recalled from long-term memory, with their source run and step;
5. the most recent turns, one group of messages per step, oldest first;

then the user messages sent since the last step.

Prompt caching: providers serve the prefix a request shares with an earlier one from their cache
(OpenAI and Gemini on their own, Anthropic at its cache breakpoints) at a tenth to half the input
price. So a request repeats the previous one byte for byte and adds the newest turn at the end,
and everything before the turns changes only when the turns' start changes anyway:

- the turns leave the window in blocks, not one a step: when the whole passes the budget, enough
  of the oldest turns go that it comes back down to about `DROP_TO` of the budget, and the prefix
  stays the same for the steps that refill the window. (The checkpoint's window,
  `waypoint.store.context.trim`, drops by the same rule.)
- the recalled episodes are held: a model call keeps the episodes the previous call received
  (`held_recall`, `assemble_held`) as long as the messages before the turns and the oldest turn
  are the same (`Assembled.window_key`), for at most `RECALL_EVERY` steps. They are recalled anew
  when the window moves (a block drop, a compaction's new summary, a new pinned decision), which
  changes everything after them anyway, and after a step that saved to memory (`memory_save`, a
  sub-agent's run: `waypoint.memory.steps.saved_memory`), whose news the next step should see.
  (Recalled at every step, they would change the prefix at every step before the turns, and be
  outside it at every step after the newest turn.)
- a compaction's summary changes the prefix once, when it is made.

If the turns cannot go (the newest always stays), the recalled episodes go, the least relevant
first; the instructions, the pinned decisions, the summary and the newest turn always stay.

Assembly is a pure function of its inputs, so the same checkpoint (and the previous call's record,
for the held episodes) gives the same context on every worker and every retry.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from waypoint.tokens import DEFAULT_COUNTER, TokenCounter
from waypoint.types import Memory, Message

# Over budget, the oldest turns leave in a block that brings the window down to this share of it.
DROP_TO = 0.7
# Steps a recall is held at most while the window stays put: a new recall then costs one prefix change.
RECALL_EVERY = 50


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
    window_key: str = ""  # the messages before the turns and the oldest turn, hashed (see window_key)


@dataclass(frozen=True)
class HeldRecall:
    """The recalled episodes a model call received, as the next call may keep them."""

    memories: list[Memory]
    window_key: str  # the call's `Assembled.window_key`
    step: int  # the step whose call recalled them


def pinned_message(pinned: Sequence[tuple[int, str]]) -> Message:
    lines = "\n".join(f"- [step {step}] {text}" for step, text in pinned)
    return {"role": "system", "content": f"Decisions pinned earlier in this run (binding, verbatim):\n{lines}"}


RECALLED_HEADER = "Recalled from long-term memory (most relevant first):"


def recalled_message(recalled: Sequence[Memory]) -> Message:
    lines = "\n".join(f"- [run {m.run_id}, step {m.step}, {m.kind}] {m.text}" for m in recalled)
    return {"role": "system", "content": f"{RECALLED_HEADER}\n{lines}"}


def without_recalled(messages: Sequence[Message]) -> list[Message]:
    """The messages without the recalled episodes' note: what a scripted model that reads the last
    messages as the newest turn wants, whatever the note's place."""
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
    recalled_last: bool = False,
) -> list[Message]:
    """The one order of working memory's messages: the recalled episodes (held while the window stays
    put) before the turns, the new user messages after them, so each request repeats the previous one
    and adds to its end. `recalled_last`: the order of calls recorded while the recalled episodes,
    then new at every step, came after the turns."""
    history = [m for turn in turns for m in turn]
    recalled = [memory] if memory else []
    if recalled_last:
        return [*fixed, *history, *recalled, *tail]
    return [*fixed, *recalled, *history, *tail]


def window_key(fixed: Sequence[Message], turns: Sequence[Sequence[Message]]) -> str:
    """The messages before the recalled episodes and the oldest turn after them, hashed: while it
    stays the same from one call to the next, the window has not moved, and the next request
    repeats the previous one up to its newest turn."""
    oldest = list(turns[0]) if turns else []
    text = json.dumps([list(fixed), oldest], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def rebuild(
    parts: Parts, recalled_text: str | None, dropped_turns: int, *, recalled_last: bool = False
) -> list[Message]:
    """The messages a model call received, from its parts as the log holds them and its record: the
    recalled episodes' message verbatim, and how many of the oldest turns its budget dropped.
    `recalled_last`: as calls recorded while the recalled episodes came after the turns had them."""
    memory = {"role": "system", "content": recalled_text} if recalled_text else None
    turns = [t for t in parts.turns if t][dropped_turns:]
    tail = [{"role": "user", "content": m} for m in parts.user_messages]
    return _ordered(_fixed(parts), memory, turns, tail, recalled_last=recalled_last)


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
    key = window_key(fixed, turns)
    return Assembled(messages, counter.count(messages), dropped_turns, dropped_recalled, recalled, key)


def held_recall(request: Mapping[str, Any] | None, recalled_text: str | None) -> HeldRecall | None:
    """The episodes a call received, from its record (`CallRecord` as the log holds it) and its
    recalled message: None when the record cannot give them back exactly (a call recorded before
    records named their window, a message that does not read back to the same text)."""
    if not request or not request.get("window_key") or request.get("recalled_step") is None:
        return None
    refs = request.get("recalled") or []
    texts = recalled_texts(recalled_text, refs)
    if any(t is None for t in texts):
        return None
    memories = [
        Memory(text=str(t), run_id=r["run_id"], step=r["step"], kind=r["kind"], score=r.get("score", 0.0))
        for r, t in zip(refs, texts, strict=True)
    ]
    if (recalled_message(memories)["content"] if memories else None) != (recalled_text or None):
        return None
    return HeldRecall(memories, str(request["window_key"]), int(request["recalled_step"]))


def assemble_held(
    parts: Parts, budget: int, held: HeldRecall | None, step: int, counter: TokenCounter = DEFAULT_COUNTER
) -> Assembled | None:
    """The assembly of step `step` with the previous call's recalled episodes, if they may stay:
    the window has not moved since (the same `window_key`) and they were recalled fewer than
    `RECALL_EVERY` steps ago. None: recall anew (the prefix after them changes anyway)."""
    if held is None or step - held.step >= RECALL_EVERY:
        return None
    done = assemble(replace(parts, recalled=list(held.memories)), budget, counter)
    return done if done.window_key == held.window_key else None
