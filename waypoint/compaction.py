"""State compaction, the pure part: what to pin, what to prune, how to summarize without a model.

A compaction covers one seq range `[first_seq, last_seq]` of a run's event log.
It never changes the log; it produces a *view*:

- pinned decisions, verbatim: every `decision` event (a human approved or denied
  a tool call) and every `pin_decision` tool call the agent made;
- pruned tool outputs, each with the reason and the text that stands in for it:
  `superseded` (a later call of the same tool with the same arguments in the
  range), `duplicate` (the same tool returned the same text earlier in the
  range), `oversize` (over N tokens: replaced by an extractive summary and a
  reference to the original event);
- a summary of the range: from the run's model (structured output, see
  activities/compaction.py) or, offline or when the model fails, the extractive
  summary built here.

Working memory after a compaction (`waypoint.store` loads it, `waypoint.working_memory`
assembles it): the head (instructions and task), the pinned decisions, the summary, then
every turn after last_seq verbatim. Pruning happens
inside the range: it decides what the summarizer reads, and `pruned` records
what was dropped and why; the original events stay readable with
`waypoint show` / `waypoint export`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from waypoint.names import PIN_TOOL, EventKind
from waypoint.tokens import text_tokens
from waypoint.transcript import decision_text, event_messages, pinned_call_text, tool_calls
from waypoint.types import Message

SUMMARY_HEADER = "Summary of earlier steps"


@dataclass(frozen=True)
class LogEvent:
    seq: int
    step: int
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Pin:
    """A decision kept verbatim in working memory."""

    step: int
    seq: int
    text: str
    source: str  # "decision" (a human's approve/deny) or "pin_decision" (the agent's tool)


@dataclass(frozen=True)
class Pruned:
    seq: int
    step: int
    tool: str
    reason: str  # "superseded", "duplicate" or "oversize"
    tokens: int
    replacement: str


@dataclass
class Summary:
    """What a summarizer returns; `method` is "model" or "extractive"."""

    text: str
    decisions: list[dict[str, Any]] = field(default_factory=list)
    open_threads: list[str] = field(default_factory=list)
    key_facts: list[dict[str, Any]] = field(default_factory=list)
    method: str = "extractive"


def _calls(events: list[LogEvent]) -> dict[str, dict[str, Any]]:
    """call_id -> the call ({"id", "name", "arguments"}) of every tool call the model made in the range."""
    return tool_calls((e.kind, e.payload) for e in events)


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return arguments


def find_pins(events: list[LogEvent]) -> list[Pin]:
    """Every decision in the range, verbatim, in log order."""
    pins: list[Pin] = []
    calls = _calls(events)
    for e in events:
        if e.kind == EventKind.DECISION:
            text = decision_text(e.payload, calls.get(e.payload.get("call_id", "")))
            pins.append(Pin(step=e.step, seq=e.seq, text=text, source=EventKind.DECISION))
        elif e.kind == EventKind.MODEL_RESPONSE:
            for c in e.payload.get("tool_calls") or []:
                if c["name"] == PIN_TOOL and (text := pinned_call_text(c)):
                    pins.append(Pin(step=e.step, seq=e.seq, text=text, source=PIN_TOOL))
    return pins


def plan_pruning(events: list[LogEvent], oversize_tokens: int) -> list[Pruned]:
    """Tool outputs of the range that the compacted view does not need in full.

    Rules, first match wins: an output is `superseded` when a later call of the same tool with the
    same arguments in the range returned again; a `duplicate` when the same tool returned the same
    text earlier (the earliest copy is kept); `oversize` when over `oversize_tokens`. Error outputs
    are never pruned as duplicates of successes (they differ in text anyway).
    """
    calls = _calls(events)
    results = [e for e in events if e.kind == EventKind.TOOL_RESULT]
    latest_by_call: dict[tuple[str, str], LogEvent] = {}
    for e in results:
        call = calls.get(e.payload.get("call_id", ""))
        if call is not None:
            latest_by_call[(call["name"], _canonical(call["arguments"]))] = e
    first_by_output: dict[tuple[str, str], LogEvent] = {}
    pruned: list[Pruned] = []
    for e in results:
        name = e.payload.get("name", "?")
        output = str(e.payload.get("output", ""))
        tokens = text_tokens(output)
        where = f"output of {name} at step {e.step}, event #{e.seq}"
        call = calls.get(e.payload.get("call_id", ""))
        later = latest_by_call.get((call["name"], _canonical(call["arguments"]))) if call else None
        if later is not None and later.seq != e.seq:
            # Its first words stay: what was true then (an id, a count) may matter after the newer answer.
            text = (
                f"[{where}: superseded by the same call at step {later.step}, event #{later.seq}; "
                f"it began: {extract(output, 25)}]"
            )
            pruned.append(Pruned(e.seq, e.step, name, "superseded", tokens, text))
            continue
        first = first_by_output.setdefault((name, output), e)
        if first.seq != e.seq:
            text = f"[{where}: identical to the output at step {first.step}, event #{first.seq}]"
            pruned.append(Pruned(e.seq, e.step, name, "duplicate", tokens, text))
            continue
        if tokens > oversize_tokens:
            text = f"[{where}, {tokens:,} tokens; summary: {extract(output, 60)}]"
            pruned.append(Pruned(e.seq, e.step, name, "oversize", tokens, text))
    return pruned


_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def extract(text: str, words: int) -> str:
    """The first `words` words of a text, on one line."""
    parts = text.split()
    head = " ".join(parts[:words])
    return head + (" …" if len(parts) > words else "")


def _fact_score(sentence: str) -> int:
    """How much a sentence looks like a fact worth keeping: numbers, identifiers, assertions."""
    score = 2 if re.search(r"\d", sentence) else 0
    score += len(re.findall(r"\b[A-Z][\w-]*\d[\w-]*\b", sentence))  # identifiers such as INV-2031
    score += 2 if re.search(r"\b(is|are|was|=|equals|must|never|always|because)\b", sentence) else 0
    score += 1 if re.search(r"[\w.-]+/[\w./-]+|\w+\.\w{2,4}\b", sentence) else 0  # paths, file names
    return score


def view_lines(events: list[LogEvent], pruned: list[Pruned], *, output_words: int = 40) -> list[tuple[int, str]]:
    """The range as (step, line) pairs: what the summarizer reads. Pruned outputs appear as their
    replacement; other outputs are cut to `output_words` words."""
    replaced = {p.seq: p for p in pruned}
    lines: list[tuple[int, str]] = []
    for e in events:
        p = e.payload
        if e.kind == EventKind.USER_MESSAGE:
            lines.append((e.step, f"user: {p.get('content', '')}"))
        elif e.kind == EventKind.DECISION:
            continue  # pinned verbatim, outside the summary
        elif e.kind == EventKind.MODEL_RESPONSE:
            if p.get("content"):
                lines.append((e.step, f"assistant: {p['content']}"))
            for c in p.get("tool_calls") or []:
                lines.append((e.step, f"call {c['name']}({c.get('arguments') or ''})"))
        elif e.kind == EventKind.TOOL_RESULT:
            if e.seq in replaced:
                lines.append((e.step, replaced[e.seq].replacement))
            else:
                flag = " (error)" if p.get("is_error") else ""
                out = extract(str(p.get("output", "")), output_words)
                lines.append((e.step, f"{p.get('name', '?')}{flag} -> {out}"))
    return lines


def extractive_summary(
    events: list[LogEvent],
    pruned: list[Pruned],
    budget_tokens: int,
    *,
    earlier_facts: list[dict[str, Any]] | None = None,
    first_step: int | None = None,
) -> Summary:
    """A summary that needs no model: the user's messages, key facts (sentences with numbers,
    identifiers, assertions, each with its step; `earlier_facts` of the previous compaction come
    first), the open threads (the last assistant text, failed calls not retried with success),
    then one line per step from the newest back, until `budget_tokens` is spent."""
    calls = _calls(events)
    facts: list[tuple[int, int, str]] = []  # (-score, step, sentence)
    seen: set[str] = set()
    for f in earlier_facts or []:
        seen.add(f["fact"])
        # A small edge over new ones of the same shape: they were chosen once already.
        facts.append((-_fact_score(str(f["fact"])) - 1, int(f["step"]), str(f["fact"])))
    users: list[str] = []
    last_text = ""
    failed: dict[str, int] = {}
    for e in events:
        p = e.payload
        texts: list[str] = []
        if e.kind == EventKind.USER_MESSAGE:
            users.append(f"step {e.step}: {extract(str(p.get('content', '')), 80)}")
            texts = [str(p.get("content", ""))]
        elif e.kind == EventKind.MODEL_RESPONSE and p.get("content"):
            last_text = str(p["content"])
            texts = [last_text]
        elif e.kind == EventKind.TOOL_RESULT:
            call = calls.get(p.get("call_id", ""))
            key = f"{p.get('name')}({call['arguments'] if call else ''})"
            if p.get("is_error"):
                failed[key] = e.step
            else:
                failed.pop(key, None)
            # Pruned outputs too: a superseded answer may hold facts the newer one lacks.
            # Facts sit near the top of an output; duplicates are dropped by sentence.
            texts = [str(p.get("output", ""))[:4000]]
        for text in texts:
            for s in sentences(text):
                score = _fact_score(s)
                if score >= 2 and len(s) <= 300 and s not in seen:
                    seen.add(s)
                    facts.append((-score, e.step, s))
    facts.sort()
    steps = sorted({e.step for e in events})
    start = first_step if first_step is not None else (steps[0] if steps else 0)
    span = f"steps {start}-{steps[-1]}" if steps else "no steps"
    parts = [f"{SUMMARY_HEADER} ({span}, extractive: no model was used)."]
    if users:
        parts.append("User messages: " + " | ".join(users))
    open_threads = [f"the call {k} failed at step {s} and was not retried with success" for k, s in failed.items()]
    if last_text:
        open_threads.append(f"last assistant note (step {steps[-1] if steps else 0}): {extract(last_text, 40)}")
    if open_threads:
        parts.append("Open threads: " + " | ".join(open_threads))
    budget = budget_tokens - text_tokens("\n".join(parts))
    kept: list[tuple[int, str]] = []
    room = budget * 0.6  # the rest is for the step lines
    for _, step, s in facts:
        cost = text_tokens(f"- (step {step}) {s}")
        if cost <= room:
            room -= cost
            kept.append((step, s))
    kept.sort(key=lambda f: f[0])
    kept_facts = [{"step": step, "fact": s} for step, s in kept]
    if kept:
        parts.append("Key facts:\n" + "\n".join(f"- (step {step}) {s}" for step, s in kept))
    budget = budget_tokens - text_tokens("\n".join(parts))
    step_lines: list[str] = []
    by_step: dict[int, list[str]] = {}
    for step, line in view_lines(events, pruned, output_words=12):
        by_step.setdefault(step, []).append(line)
    for step in reversed(steps):  # newest first: the recent past matters most
        line = f"- step {step}: " + "; ".join(by_step.get(step, []))
        line = line if len(line) <= 400 else line[:399] + "…"
        cost = text_tokens(line)
        if cost > budget:
            omitted = len(steps) - len(step_lines)
            step_lines.append(f"- ({omitted} earlier steps omitted: see `waypoint show` / `waypoint export`)")
            break
        budget -= cost
        step_lines.append(line)
    if step_lines:
        parts.append("Steps, newest first:\n" + "\n".join(step_lines))
    return Summary(text="\n".join(parts), open_threads=open_threads, key_facts=kept_facts, method="extractive")


def model_summary_text(summary: Summary, first_step: int, last_step: int) -> str:
    """The text block a structured model summary becomes in working memory."""
    parts = [f"{SUMMARY_HEADER} (steps {first_step}-{last_step}).", summary.text.strip()]
    if summary.key_facts:
        parts.append("Key facts:\n" + "\n".join(f"- (step {f['step']}) {f['fact']}" for f in summary.key_facts))
    if summary.decisions:
        parts.append("Decisions:\n" + "\n".join(f"- (step {d['step']}) {d['text']}" for d in summary.decisions))
    if summary.open_threads:
        parts.append("Open threads:\n" + "\n".join(f"- {t}" for t in summary.open_threads))
    return "\n".join(parts)


def pins_text(pins: list[Pin] | list[dict[str, Any]]) -> str:
    rows = [p if isinstance(p, dict) else {"step": p.step, "text": p.text} for p in pins]
    return "Decisions (pinned, verbatim):\n" + "\n".join(f"- (step {r['step']}) {r['text']}" for r in rows)


def range_messages(events: list[LogEvent]) -> list[Message]:
    return [m for e in events for m in event_messages(e.kind, e.payload)]
