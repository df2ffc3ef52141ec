"""Compaction on long, tool-heavy transcripts: token reduction, decision and fact retention, time.

    python benchmarks/compaction.py [--transcripts 5] [--steps 200] [--seed 7]

Each transcript is generated from the seed: repeated identical tool calls,
superseded results, exact duplicates, big outputs (log dumps of 2k-6k tokens),
planted decisions (human approvals/denials and `pin_decision` calls) and
planted facts (one sentence at the top of a tool output, with a question and
its answer). Every transcript is compacted as `compact_run` does it, leaving the
newest 2 steps verbatim, twice: with the extractive fallback (no model), and
with a "model": the fake OpenAI server (waypoint/fake_openai.py) over real HTTP
and the openai SDK, whose responder answers a structured summary built from
the prompt (the sentences with numbers become key facts). That second column
measures the plumbing, not the quality of a real model.

Fact retention: a fact counts as kept when its answer is in the compacted
working memory, or in the top 5 episodes recalled for its question from
episodic memory (an embedded Qdrant shard in a temporary folder, the default
hashing embedder), which holds one episode per tool call ("step N: tool(args)
-> first 400 characters of the output", what the step did and what came of it)
plus the compaction's summary episode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from waypoint import compaction as logic
from waypoint.activities.compaction import CompactionActivities
from waypoint.config import Settings
from waypoint.memory import Episode, HashingEmbedder
from waypoint.memory.edge import EdgeStore
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.tokens import messages_tokens
from waypoint.transcript import event_messages
from waypoint.working_memory import Parts, assemble

KEEP_STEPS = 2
WORDS = (
    "cache index shard build deploy retry timeout worker queue schema column request handler module "
    "config branch commit review latency service client token session buffer stream parser report"
).split()


@dataclass
class Planted:
    question: str
    answer: str


@dataclass
class Transcript:
    events: list[logic.LogEvent]
    facts: list[Planted]
    decisions: list[str]  # texts that must appear verbatim in working memory
    steps: int


def filler(rng: random.Random, words: int) -> str:
    """Tool-output text. One sentence in six is shaped like a fact ("The latency of shard s-12 is
    418."), so planted facts compete with look-alikes for the summary's room."""
    out: list[str] = []
    while len(out) < words:
        if rng.random() < 1 / 6:
            a, b = rng.sample(WORDS, 2)
            out += f"The {a} of {b} {b[0]}-{rng.randint(1, 99)} is {rng.randint(2, 9999)}.".split()
        else:
            out += [str(rng.randint(2, 999)) if rng.random() < 0.04 else rng.choice(WORDS) for _ in range(13)]
            out[-1] += "."
    return " ".join(out)


FACTS = [
    ("The deploy token for service svc-{k} is T-{n}.", "What is the deploy token for service svc-{k}?", "T-{n}"),
    ("The database port of cluster c-{k} is {p}.", "Which port does the database of cluster c-{k} use?", "{p}"),
    ("Invoice INV-{n} totals {p}.{k}0 EUR.", "How much does invoice INV-{n} total?", "{p}.{k}0 EUR"),
    ("The on-call engineer for team t-{k} is {name}.", "Who is on call for team t-{k}?", "{name}"),
]
NAMES = ["Priya Nair", "Jonas Berg", "Ana Souza", "Kenji Mori", "Lena Fischer", "Omar Haddad"]


def build(seed: int, steps: int) -> Transcript:
    rng = random.Random(seed)
    seq = 1
    events = [logic.LogEvent(1, 0, "run_started", {"instructions": "You maintain services.", "task": "Fix the build"})]
    outputs: dict[tuple[str, str], str] = {}
    pools = {
        "search": [{"q": q} for q in ("flaky test", "timeout", "deploy token", "port", "invoice", "on call")],
        "fetch": [{"url": f"http://wiki/{p}"} for p in ("build", "deploy", "oncall", "billing", "db")],
        "read_file": [{"path": f"src/mod{i}.py"} for i in range(8)],
        "run_tests": [{"target": t} for t in ("unit", "api", "db", "all")],
    }
    fact_steps = set(rng.sample(range(2, steps - KEEP_STEPS), 12))
    decision_steps = set(range(7, steps - KEEP_STEPS, 13))
    facts: list[Planted] = []
    decisions: list[str] = []
    for n in range(1, steps + 1):
        calls = []
        for i in range(rng.choice((1, 1, 2, 3))):
            tool = rng.choice(list(pools))
            args = rng.choice(pools[tool])
            key = (tool, json.dumps(args))
            if key in outputs and rng.random() < 0.5:
                out = outputs[key]  # the same answer again
            elif tool == "run_tests" and rng.random() < 0.6:
                out = "412 passed, 0 failed."  # identical across targets: an exact duplicate
            elif rng.random() < 0.05:
                out = "LOG DUMP\n" + filler(rng, rng.randint(1500, 4000))  # oversize
            else:
                out = filler(rng, rng.randint(40, 300))
            if n in fact_steps and i == 0:
                template, question, answer = FACTS[len(facts) % len(FACTS)]
                values = {"k": len(facts) + 1, "n": rng.randint(10000, 99999), "p": rng.randint(1000, 9999)}
                values["name"] = NAMES[len(facts) % len(NAMES)]
                out = template.format(**values) + " " + out
                facts.append(Planted(question.format(**values), answer.format(**values)))
            outputs[key] = out
            calls.append((f"c{n}_{i}", tool, json.dumps(args), out))
        if n in decision_steps:
            k = len(decisions) + 1
            if k % 2:
                text = f"Decision {k}: ship the fix for module mod{k % 8} behind flag F-{k}."
                calls.append((f"c{n}_p", "pin_decision", json.dumps({"text": text}), "pinned"))
                decisions.append(text)
            else:
                reason = f"reviewed by the release manager (ticket REL-{k})"
                seq += 1
                events.append(
                    logic.LogEvent(
                        seq, n, "decision", {"call_id": calls[0][0], "decision": "approved", "reason": reason}
                    )
                )
                decisions.append(f"a human approved {calls[0][1]}({calls[0][2]}): {reason}")
        content = f"Step {n}: checking {calls[0][1]}." if rng.random() < 0.3 else None
        seq += 1
        tool_calls = [{"id": c, "name": t, "arguments": a} for c, t, a, _ in calls]
        events.append(logic.LogEvent(seq, n, "model_response", {"content": content, "tool_calls": tool_calls}))
        for c, t, _, out in calls:
            seq += 1
            events.append(logic.LogEvent(seq, n, "tool_result", {"call_id": c, "name": t, "output": out}))
    return Transcript(events, facts, decisions, steps)


def fake_model(body: dict[str, Any], n: int) -> Turn:
    """A stand-in model: key facts are the prompt's sentences with a number or a name after "is"."""
    prompt = body["messages"][1]["content"]
    facts = []
    for line in prompt.splitlines():
        m = re.match(r"\[step (\d+)\] (.*)", line)
        if not m:
            continue
        for sentence in logic.sentences(m.group(2)):
            if re.search(r"\b(is|totals)\b [A-Z0-9]", sentence) and len(sentence) < 160:
                facts.append({"step": int(m.group(1)), "fact": sentence.split(" -> ")[-1]})
    answer = {
        "summary": "The agent worked on fixing the build: it searched, fetched wiki pages, read modules and "
        "ran the test suites repeatedly; the tests pass.",
        "decisions": [],
        "open_threads": ["confirm the fix in production"],
        "key_facts": facts[:40],
    }
    return Turn(content=json.dumps(answer))


async def compact(acts: CompactionActivities, t: Transcript, spec: str) -> tuple[list[dict], dict[str, Any], float]:
    """Compact like compact_run; returns (working memory, the row's fields, seconds)."""
    started = time.perf_counter()
    cut = t.steps - KEEP_STEPS
    new = [e for e in t.events if e.kind != "run_started" and e.step <= cut]
    pins = logic.find_pins(new)
    pruned = logic.plan_pruning(new, acts.settings.compaction_oversize_tokens)
    summary, _ = await acts.summarize(spec, "Fix the build", None, new, pruned)
    block = logic.model_summary_text(summary, 1, cut) if summary.method == "model" else summary.text
    elapsed = time.perf_counter() - started
    row = {
        "first_seq": 2,
        "last_seq": new[-1].seq,
        "summary": block,
        "pinned": [{"step": p.step, "text": p.text} for p in pins],
        "pruned": pruned,
    }
    # The working memory the next model call would read, assembled as production assembles it.
    head = [m for e in t.events if e.kind == "run_started" for m in event_messages(e.kind, e.payload)]
    turns: dict[int, list[dict]] = {}
    for e in t.events:
        if e.seq > row["last_seq"]:
            turns.setdefault(e.step, []).extend(event_messages(e.kind, e.payload))
    parts = Parts(head=head, pinned=[(p.step, p.text) for p in pins], summary=block, turns=list(turns.values()))
    return assemble(parts, budget=10**9).messages, row, elapsed


async def measure(label: str, acts: CompactionActivities, spec: str, transcripts: list[Transcript], tmp: Path) -> dict:
    reductions, times, decisions_kept, decisions_all, facts_view, facts_kept, facts_all = [], [], 0, 0, 0, 0, 0
    prune_counts: dict[str, int] = {}
    store = EdgeStore(tmp / label, HashingEmbedder())
    try:
        for i, t in enumerate(transcripts):
            view, row, elapsed = await compact(acts, t, spec)
            full = [m for e in t.events for m in event_messages(e.kind, e.payload)]
            reductions.append(1 - messages_tokens(view) / messages_tokens(full))
            times.append(elapsed / t.steps * 100)
            for p in row["pruned"]:
                prune_counts[p.reason] = prune_counts.get(p.reason, 0) + 1
            text = "\n".join(str(m.get("content") or "") for m in view)
            decisions_all += len(t.decisions)
            decisions_kept += sum(d in text for d in t.decisions)
            run_id = f"{label}-{i}"
            episodes = [
                Episode(
                    "bench",
                    "maintainer",
                    run_id,
                    e.step,
                    "step",
                    f"step {e.step}: {e.payload['name']} -> {e.payload['output'][:400]}",
                    index=j,
                )
                for j, e in enumerate(e for e in t.events if e.kind == "tool_result")
            ]
            episodes.append(Episode("bench", "maintainer", run_id, t.steps, "summary", row["summary"], importance=0.8))
            await store.upsert(episodes)
            for f in t.facts:
                facts_all += 1
                in_view = f.answer in text
                recalled = await store.search("bench", f.question, k=5, run_id=run_id)
                facts_view += in_view
                facts_kept += in_view or any(f.answer in r.episode.text for r in recalled)
    finally:
        await store.close()
    return {
        "label": label,
        "reduction": statistics.mean(reductions),
        "reduction_min": min(reductions),
        "decisions": decisions_kept / decisions_all,
        "facts_view": facts_view / facts_all,
        "facts": facts_kept / facts_all,
        "ms_per_100": statistics.median(times) * 1000,
        "pruned": prune_counts,
        "counts": (decisions_all, facts_all),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transcripts", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    transcripts = [build(args.seed + i, args.steps) for i in range(args.transcripts)]
    fake = FakeOpenAI(responder=fake_model).start()
    try:
        settings = Settings(openai_api_key="bench", openai_base_url=fake.base_url, model_timeout_seconds=30)
        acts = CompactionActivities(None, settings)  # type: ignore[arg-type] # summarize() reads no database
        with tempfile.TemporaryDirectory() as tmp:
            rows = [
                await measure("extractive", acts, "scripted", transcripts, Path(tmp)),
                await measure("model", acts, "openai:fake-model", transcripts, Path(tmp)),
            ]
    finally:
        fake.stop()
    full = [
        logic.messages_tokens([m for e in t.events for m in event_messages(e.kind, e.payload)]) for t in transcripts
    ]
    console = Console()
    table = Table(
        title=f"compaction: {args.transcripts} transcripts x {args.steps} steps, seed {args.seed}, "
        f"~{statistics.mean(full):,.0f} tokens each",
        title_justify="left",
    )
    for col in (
        "summary",
        "token reduction (mean / min)",
        "decisions kept",
        "facts in view",
        "facts kept",
        "ms / 100 steps",
    ):
        table.add_column(col, justify="left" if col == "summary" else "right")
    for r in rows:
        table.add_row(
            r["label"] if r["label"] == "extractive" else "model (fake server)",
            f"{r['reduction']:.1%} / {r['reduction_min']:.1%}",
            f"{r['decisions']:.0%} of {r['counts'][0]}",
            f"{r['facts_view']:.0%}",
            f"{r['facts']:.0%} of {r['counts'][1]}",
            f"{r['ms_per_100']:.1f}",
        )
    console.print(table)
    console.print(
        "pruned tool outputs (all transcripts): " + ", ".join(f"{k} {v}" for k, v in sorted(rows[0]["pruned"].items()))
    )


if __name__ == "__main__":
    asyncio.run(main())
