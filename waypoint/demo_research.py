"""The research demo: a lead agent fans a question out to sub-agents at once, then has a report written.

`research` hands each note of the demo workspace to its own `note_reader` run (three child runs at
once), then gives their findings to a `report_writer` run, which writes research.md. Every agent
is scripted, so it runs offline with no API key: `waypoint demo --agent research`. The tools are the
notes demo's own.
"""

from __future__ import annotations

import json
import re

from waypoint.agents import Agent
from waypoint.demo import SAMPLE_NOTES, _results_of, read_file, word_stats, write_file
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.types import Message

RESEARCH_TASK = "What do the notes in the notes/ folder say about durable agents? Write research.md."
REPORT_PATH = "research.md"
NOTE_PATH = re.compile(r"notes/[\w.-]+\.txt")


def _task(messages: list[Message]) -> str:
    return next((str(m["content"]) for m in messages if m["role"] == "user"), "")


def _read_note(messages: list[Message]) -> ScriptedTurn:
    found = NOTE_PATH.search(_task(messages))
    if found is None:
        return ScriptedTurn(content="I was given no note to read (name one as notes/<name>.txt).")
    return ScriptedTurn(tool_calls=[("read_file", {"path": found.group()})])


def _count(messages: list[Message]) -> ScriptedTurn:
    text = next((output for _, output in _results_of(messages, "read_file")), "")
    if text.startswith("error:"):
        return ScriptedTurn(content=f"I could not read the note: {text}")
    return ScriptedTurn(tool_calls=[("word_stats", {"text": text})])


def _finding(messages: list[Message]) -> ScriptedTurn:
    (args, text), *_ = _results_of(messages, "read_file") or [({"path": "?"}, "")]
    stats = next((output for _, output in _results_of(messages, "word_stats")), "{}")
    words = json.loads(stats).get("words", 0) if stats.startswith("{") else 0
    first = text.strip().split(". ")[0].rstrip(".")
    return ScriptedTurn(content=f"{args['path']} ({words} words): {first}.")


def _write(messages: list[Message]) -> ScriptedTurn:
    findings = [line for line in _task(messages).splitlines() if line.startswith("- ")]
    lines = ["# What the notes say about durable agents", "", *findings, "", f"Sources: {len(findings)} notes."]
    return ScriptedTurn(tool_calls=[("write_file", {"path": REPORT_PATH, "content": "\n".join(lines) + "\n"})])


def _written(messages: list[Message]) -> ScriptedTurn:
    done = next((output for _, output in _results_of(messages, "write_file")), "nothing was written")
    return ScriptedTurn(content=f"Report written: {done}.")


def _fan_out(messages: list[Message]) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[("note_reader", {"task": f"Read {path} and sum it up."}) for path in SAMPLE_NOTES])


def _hand_to_writer(messages: list[Message]) -> ScriptedTurn:
    findings = [output for _, output in _results_of(messages, "note_reader")]
    task = "Write research.md from these findings:\n" + "\n".join(f"- {f}" for f in findings)
    return ScriptedTurn(tool_calls=[("report_writer", {"task": task})])


def _answer(messages: list[Message]) -> ScriptedTurn:
    written = next((output for _, output in _results_of(messages, "report_writer")), "no report")
    readers = len(_results_of(messages, "note_reader")) or "no"
    return ScriptedTurn(content=f"{readers} sub-agents read the notes at once; {written}")


note_reader = Agent(
    name="note_reader",
    description="Reads one note of the workspace and sums it up in a sentence.",
    instructions="Read the note you are given with read_file, count its words with word_stats, and sum it up.",
    model=ScriptedModel([_read_note, _count, _finding], name="scripted"),
    tools=(read_file, word_stats),
    max_steps=5,
)

report_writer = Agent(
    name="report_writer",
    description="Writes research.md from a list of findings.",
    instructions="Write the findings you are given into research.md with write_file, then say so.",
    model=ScriptedModel([_write, _written], name="scripted"),
    tools=(write_file,),
    max_steps=4,
)

research = Agent(
    name="research",
    instructions=(
        "You lead a research task. Hand each note to a note_reader sub-agent (all at once), then give "
        "their findings to report_writer, and answer with what was written."
    ),
    model=ScriptedModel([_fan_out, _hand_to_writer, _answer], name="scripted"),
    agents=(note_reader, report_writer),
    max_steps=6,
)
