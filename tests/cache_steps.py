"""A run's model requests step by step, without servers: what each provider's prompt cache serves.

`simulate` plays an agent that reads one page (`output_bytes` of text) a step, with the defaults:
working memory assembled by `waypoint.working_memory` (budget, block drop, held recall), the
checkpoint's window trimmed by `waypoint.store.context.trim`, inline compaction as the workflow
makes it (past `compact_at` of the budget by the provider's own input count, at most every
`COMPACT_EVERY_MIN_STEPS` steps, the newest `keep_steps` steps left out, the extractive summary),
and episodic memory that recalls `recall_k` of the run's compaction summaries and earlier steps,
a different set at every recall. Each request is built by the provider's adapter (`anthropic_request`,
`gemini_contents`, the chat-completions messages) and priced by the same cache rules as the fakes
(`waypoint.testing`): what the provider's usage fields would say.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from waypoint import compaction as logic
from waypoint.models.anthropic import anthropic_request
from waypoint.models.google import function_declarations, gemini_contents
from waypoint.names import EventKind
from waypoint.store.context import trim
from waypoint.testing.fake_anthropic import PromptCache
from waypoint.testing.fake_gemini import prompt_text
from waypoint.testing.prompt_cache import ImplicitCache, PrefixTracker, conversation_key, openai_cached
from waypoint.tokens import estimate_tokens
from waypoint.transcript import event_messages, step_account
from waypoint.types import Memory, RecalledRef
from waypoint.workflows.agent_run import COMPACT_EVERY_MIN_STEPS
from waypoint.working_memory import (
    HeldRecall,
    Parts,
    assemble,
    assemble_held,
    held_recall,
    recalled_message,
)

INSTRUCTIONS = "Read every page of the report with read_page, one page a step, then say done."
TASK = "Read the report."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_page",
            "description": "Read one page of the report.",
            "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}, "required": ["page"]},
        },
    }
]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


@dataclass(frozen=True)
class Request:
    step: int
    prompt_tokens: int  # all input, as the provider counts it
    cache_read_tokens: int


def page(n: int, size: int) -> str:
    words = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(size // 6))
    return f"page {n}: {words}"[:size]


class Provider:
    """One provider's cache, as its fake keeps it: `use(messages)` gives (prompt tokens, cache reads)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.anthropic = PromptCache()
        self.gemini = ImplicitCache()
        self.openai = PrefixTracker()

    def use(self, messages: list[dict[str, Any]]) -> tuple[int, int]:
        if self.name == "anthropic":
            usage = self.anthropic.use(anthropic_request("claude-sonnet-4-5", messages, TOOLS))
            read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
            return usage["input_tokens"] + read + written, read
        if self.name == "gemini":
            system, contents = gemini_contents(messages)
            body = {
                "systemInstruction": {"parts": [{"text": system}]} if system else None,
                "tools": [{"functionDeclarations": [d.model_dump(mode="json") for d in function_declarations(TOOLS)]}],
                "contents": [c.model_dump(mode="json", exclude_none=True) for c in contents],
            }
            return self.gemini.use("gemini-2.5-flash", prompt_text(body))
        record = self.openai.observe(conversation_key(messages[:2]), [TOOLS, *messages])
        return record.tokens, openai_cached(record.seen_prefix_tokens)


def simulate(
    provider: str,
    *,
    steps: int = 300,
    output_bytes: int = 2048,
    budget: int = 16_000,
    compact_at: float = 0.8,
    keep_steps: int = 2,
    summary_tokens: int = 1_200,
    memory: bool = True,
    recall_k: int = 5,
) -> list[Request]:
    cache = Provider(provider)
    started = [(EventKind.RUN_STARTED, {"instructions": INSTRUCTIONS, "task": TASK})]
    head = [m for kind, payload in started for m in event_messages(kind, payload)]
    segments: list[list[Any]] = [["run", 0, 0, estimate_tokens(head)]]
    events: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    compaction: dict[str, Any] | None = None  # last_step, summary, first_step, key_facts
    summaries: list[Memory] = []  # each compaction's summary, an episode (`summary_episode`)
    compacted_at = 0
    previous: tuple[dict[str, Any], str | None] | None = None  # the last call's record and recalled text
    requests: list[Request] = []
    for step in range(1, steps + 1):
        covered = compaction["last_step"] if compaction else 0
        turns = [
            [m for kind, payload in events[seg[1]] for m in event_messages(kind, payload)]
            for seg in segments[1:]
            if seg[1] > covered
        ]
        parts = Parts(head=head, summary=compaction["summary"] if compaction else None, turns=turns)
        window_start = step - (len(segments) - 1)
        recalled_step: int | None = None
        held: HeldRecall | None = held_recall(*previous) if memory and previous else None
        done = assemble_held(parts, budget, held, step)
        if held is not None and done is not None:
            recalled_step = held.step
        else:
            if memory:
                parts.recalled = recall(events, summaries, window_start, step, recall_k)
                recalled_step = step
            done = assemble(parts, budget)
        prompt, read = cache.use(done.messages)
        requests.append(Request(step, prompt, read))
        text = recalled_message(done.recalled)["content"] if done.recalled else None
        refs = [asdict(RecalledRef(m.run_id, m.step, m.kind, m.score, "")) for m in done.recalled]
        record = {"window_key": done.window_key, "recalled_step": recalled_step, "recalled": refs}
        previous = (record, text) if memory else None

        call = {"id": f"call_{step}_0", "name": "read_page", "arguments": json.dumps({"page": step})}
        events[step] = [
            (EventKind.MODEL_RESPONSE, {"content": None, "tool_calls": [call]}),
            (EventKind.TOOL_RESULT, {"call_id": call["id"], "name": "read_page", "output": page(step, output_bytes)}),
        ]
        messages = [m for kind, payload in events[step] for m in event_messages(kind, payload)]
        segments, _ = trim(
            [*segments, ["run", step, step, estimate_tokens(messages)]],
            budget,
            hidden=lambda seg, covered=covered: seg[2] <= covered,
        )
        if compact_at < 1.0 and prompt > compact_at * budget and step - compacted_at >= COMPACT_EVERY_MIN_STEPS:
            compacted_at = step
            compaction = compact(events, compaction, step - keep_steps, summary_tokens)
            if compaction is not None and memory:
                summaries.append(Memory(compaction["summary"], "run", compaction["last_step"], "summary"))
    return requests


def recall(
    events: dict[int, list[tuple[str, dict[str, Any]]]], summaries: list[Memory], window_start: int, step: int, k: int
) -> list[Memory]:
    """`k` episodes: two of the run's compaction summaries (whose importance ranks them high), then
    its steps before the window, a different choice at every recall (as a recall by the newest
    step's account makes it): the worst case for a prompt cache."""

    def shuffled(items: list[Any], key: Any) -> list[Any]:
        return sorted(items, key=lambda item: hashlib.sha256(f"{step}:{key(item)}".encode()).digest())

    older = [n for n in events if n < window_start]
    chosen = shuffled(summaries, lambda m: m.step)[:2]
    chosen += [Memory(step_account(n, events[n]), "run", n, "step") for n in shuffled(older, str)]
    return [replace(m, score=1.0 - i / 10) for i, m in enumerate(chosen[:k])]


def compact(
    events: dict[int, list[tuple[str, dict[str, Any]]]], previous: dict[str, Any] | None, upto: int, tokens: int
) -> dict[str, Any] | None:
    """A compaction of the steps after the previous one's up to `upto`, as `compact_run` makes it offline."""
    after = previous["last_step"] if previous else 0
    if upto <= after:
        return previous
    covered = [
        logic.LogEvent(seq=n * 10 + i, step=n, kind=kind, payload=payload)
        for n in range(after + 1, upto + 1)
        for i, (kind, payload) in enumerate(events[n])
    ]
    pruned = logic.plan_pruning(covered, 2_000)
    earlier = previous["key_facts"] if previous else []
    first = previous["first_step"] if previous else None
    summary = logic.extractive_summary(covered, pruned, tokens, earlier_facts=earlier, first_step=first)
    return {
        "last_step": upto,
        "summary": summary.text,
        "first_step": first if first is not None else after + 1,
        "key_facts": summary.key_facts,
    }


def cache_share(requests: list[Request]) -> float:
    prompt = sum(r.prompt_tokens for r in requests)
    return sum(r.cache_read_tokens for r in requests) / prompt if prompt else 0.0
