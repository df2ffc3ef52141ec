"""The demo agent: reads the notes in its workspace, counts their words and writes a report.

It is defined like any user's agent. Its model is scripted, so it runs offline
with no API key; `waypoint demo --model openai:<name>` gives the same tools to
a real model instead. `chaos_variant()` adds a slow, external effect for
`waypoint demo --chaos` to crash a worker in.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from waypoint.agents import Agent
from waypoint.errors import ToolError
from waypoint.models.scripted import ScriptedModel, ScriptedTurn, TurnSource
from waypoint.tools import ToolContext, tool
from waypoint.types import Message

DEMO_TASK = "Read every note in the notes/ folder, count the words of each, and write report.md with the totals."

SAMPLE_NOTES = {
    "notes/durability.txt": (
        "A durable agent run survives a worker crash. Temporal replays the workflow from its history,\n"
        "and completed activities are never run again.\n"
    ),
    "notes/time-travel.txt": (
        "Every step is mirrored into Postgres: an append-only event log and one checkpoint per step.\n"
        "Any step can be shown, diffed or forked.\n"
    ),
    "notes/memory.txt": (
        "Working memory is what fits in the context window. Episodic memory lives in Qdrant\n"
        "and is recalled by similarity.\n"
    ),
}

MAX_READ_BYTES = 100_000


def seed_workspace(workspace: Path) -> None:
    """Write the demo's sample notes into the workspace, keeping any the user changed."""
    for rel, text in SAMPLE_NOTES.items():
        path = workspace / rel
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def _inside(ctx: ToolContext, rel: str) -> Path:
    root = ctx.workspace.resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise ToolError(f"{rel!r} is outside the workspace; use a path relative to it")
    return path


@tool
def list_files(ctx: ToolContext, folder: str = ".") -> list[str]:
    """List the files under a folder of the workspace (paths relative to the workspace)."""
    base = _inside(ctx, folder)
    if not base.is_dir():
        raise ToolError(f"no folder {folder!r} in the workspace")
    root = ctx.workspace.resolve()
    return sorted(str(p.relative_to(root)) for p in base.rglob("*") if p.is_file())


@tool
def read_file(ctx: ToolContext, path: str) -> str:
    """Read a text file of the workspace."""
    target = _inside(ctx, path)
    if not target.is_file():
        raise ToolError(f"no file {path!r} in the workspace")
    return target.read_bytes()[:MAX_READ_BYTES].decode("utf-8", errors="replace")


@tool
def word_stats(text: str) -> dict[str, Any]:
    """Count the words and lines of a text and name its most frequent longer words."""
    words = re.findall(r"[A-Za-z][A-Za-z'-]+", text.lower())
    common = Counter(w for w in words if len(w) > 4).most_common(3)
    return {"words": len(words), "lines": len(text.splitlines()), "top_words": [w for w, _ in common]}


@tool
def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Write a text file into the workspace, replacing it if it exists."""
    target = _inside(ctx, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"wrote {len(content.encode())} bytes to {path}"


def _results_of(messages: list[Message], name: str) -> list[tuple[dict[str, Any], str]]:
    """The arguments and outputs of the latest turn's calls of tool `name`, wherever they are in the
    conversation: a fork or a rerun may have put a user message after them."""
    outputs = {m.get("tool_call_id"): m["content"] for m in messages if m["role"] == "tool"}
    for message in reversed(messages):
        calls = [c for c in message.get("tool_calls") or [] if c["function"]["name"] == name]
        if message["role"] == "assistant" and calls:
            return [(json.loads(c["function"]["arguments"]), outputs.get(c["id"], "")) for c in calls]
    return []


def _read_notes(messages: list[Message]) -> ScriptedTurn:
    listing = next((output for _, output in _results_of(messages, "list_files")), "")
    if not listing.startswith("["):
        return ScriptedTurn(content=f"I found no notes to read ({listing or 'nothing was listed'}).")
    return ScriptedTurn(tool_calls=[("read_file", {"path": f}) for f in json.loads(listing)])


def _count_words(messages: list[Message]) -> ScriptedTurn:
    texts = [text for _, text in _results_of(messages, "read_file")]
    if not texts:
        return ScriptedTurn(content="I have no notes to count: there is nothing read in this conversation.")
    return ScriptedTurn(tool_calls=[("word_stats", {"text": text}) for text in texts])


def _write_report(messages: list[Message]) -> ScriptedTurn:
    path_of = {text: args["path"] for args, text in _results_of(messages, "read_file")}
    counted = [(path_of.get(args["text"], "(a note)"), output) for args, output in _results_of(messages, "word_stats")]
    stats = [(path, json.loads(output)) for path, output in counted if output.startswith("{")]
    if not stats:
        return ScriptedTurn(content="I have no word counts to report: there are none in this conversation.")
    lines = ["# Notes report", "", "| file | words | lines | frequent words |", "|---|---|---|---|"]
    lines += [f"| {p} | {s['words']} | {s['lines']} | {', '.join(s['top_words'])} |" for p, s in stats]
    lines += ["", f"Total: {sum(s['words'] for _, s in stats)} words in {len(stats)} notes."]
    return ScriptedTurn(tool_calls=[("write_file", {"path": "report.md", "content": "\n".join(lines) + "\n"})])


def _report_total(messages: list[Message]) -> str:
    written = _results_of(messages, "write_file")
    return written[-1][0]["content"].strip().splitlines()[-1] if written else "No report was written."


def _answer(messages: list[Message]) -> ScriptedTurn:
    return ScriptedTurn(content=f"I read the notes and wrote report.md. {_report_total(messages)}")


DEMO_TURNS: list[TurnSource] = [
    ScriptedTurn(tool_calls=[("list_files", {"folder": "notes"})]),
    _read_notes,
    _count_words,
    _write_report,
    _answer,
]

demo = Agent(
    name="demo",
    instructions=(
        "You are a careful assistant working in a folder of files. Use the tools to list and read files, "
        "count words with word_stats, and write your report with write_file. Answer briefly when done."
    ),
    model=ScriptedModel(DEMO_TURNS, name="scripted"),
    tools=(list_files, read_file, word_stats, write_file),
    max_steps=10,
)

# --- the chaos variant -----------------------------------------------------------------------------

CHAOS_AGENT = "demo-chaos"
ARCHIVE_LOG = Path("archive") / "log.txt"  # the effect: one line per archived report, "<key> <path> <digest>"
ARCHIVE_ATTEMPTS = Path("archive") / "attempts.txt"  # one line per attempt, "<key> attempt <n> pid <pid>"
ARCHIVE_SECONDS = 3.0


@tool(timeout=30)
def archive_report(ctx: ToolContext, path: str) -> str:
    """Copy a file of the workspace into the archive (slow, as an upload would be)."""
    source = _inside(ctx, path)
    if not source.is_file():
        raise ToolError(f"no file {path!r} in the workspace")
    log, attempts = ctx.workspace / ARCHIVE_LOG, ctx.workspace / ARCHIVE_ATTEMPTS
    log.parent.mkdir(parents=True, exist_ok=True)
    # Every attempt says where it runs, so `waypoint demo --chaos` can kill that worker mid-call.
    with attempts.open("a") as fh:
        fh.write(f"{ctx.idempotency_key} attempt {ctx.attempt} pid {os.getpid()}\n")
    time.sleep(ARCHIVE_SECONDS)  # a sync tool runs in a thread; run_tool heartbeats meanwhile
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    # The effect is keyed by the call, not the attempt: a worker may die after appending but before
    # the ledger records the call, and the attempt that re-runs it must not append a second line.
    done = log.read_text().splitlines() if log.exists() else []
    if any(line.split(" ", 1)[0] == ctx.idempotency_key for line in done):
        return f"{path} was already archived by this call"
    with log.open("a") as fh:
        fh.write(f"{ctx.idempotency_key} {path} sha256:{digest}\n")
    return f"archived {path} (sha256:{digest})"


def _archive(messages: list[Message]) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[("archive_report", {"path": "report.md"})])


def _answer_archived(messages: list[Message]) -> ScriptedTurn:
    archived = next((output for _, output in _results_of(messages, "archive_report")), "did not archive it")
    return ScriptedTurn(content=f"I read the notes, wrote report.md and {archived}. {_report_total(messages)}")


def chaos_variant() -> Agent:
    """The demo agent plus one slow `archive_report` call after the report.

    Built on request rather than at module level: every worker registers each
    Agent of this module, and only the chaos demo's own workers need this one
    (they load it through `waypoint.demo_chaos`).
    """
    return Agent(
        name=CHAOS_AGENT,
        instructions=demo.instructions + " Then archive the report with archive_report.",
        model=ScriptedModel([*DEMO_TURNS[:-1], _archive, _answer_archived], name="scripted"),
        tools=(*demo.tools, archive_report),
        max_steps=10,
    )
