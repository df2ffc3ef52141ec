"""A dataset's cases: what each holds, and reading them from a JSONL file, checked once for every
surface (CLI `--from-file`, HTTP `POST /v1/datasets`, the Python API).

One case a line:

    {"task": "Count the words in the notes", "expected_output": "42", "expected_tools": ["list_notes",
     {"name": "read_note", "arguments": {"name": "a.md"}}], "metadata": {"topic": "notes"}, "id": "words"}

`task` is required; the rest is optional. An expected tool is a name, or a name with the arguments
the call must have (compared as canonical JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from waypoint.checks import NAME_MAX, check_json, check_name, check_text
from waypoint.errors import InvalidInput

if TYPE_CHECKING:
    from waypoint.calls import CallLine

CASES_MAX = 10_000  # cases of one dataset version (each is a run of every experiment on it)
CASE_FIELDS = ("task", "expected_output", "expected_tools", "metadata", "id")
TOOLS_MAX = 1_000  # expected tool calls of one case
DATASET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class ExpectedCall:
    """A tool call a case expects: its tool, and optionally its arguments (None: any)."""

    name: str
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True)
class EvalCase:
    """One case of a dataset version: the task a run gets, what it should give, where it came from."""

    index: int  # its place in the dataset version, from 0
    task: str
    case_id: str = ""  # the file's `id`, else "case-<index>"; a source run's case: the run id
    expected_output: Any = None  # any JSON value; None: no expectation
    expected_tools: list[ExpectedCall] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    source_run_id: str | None = None  # a case made from a recorded run (`--from-runs`)

    def as_line(self) -> dict[str, Any]:
        """The case as one line of `dataset export` (what `--from-file` reads back)."""
        line: dict[str, Any] = {"id": self.case_id, "task": self.task}
        if self.expected_output is not None:
            line["expected_output"] = self.expected_output
        if self.expected_tools is not None:
            line["expected_tools"] = [tools_line(c) for c in self.expected_tools]
        if self.metadata:
            line["metadata"] = self.metadata
        if self.source_run_id is not None:
            line["source_run_id"] = self.source_run_id
        return line


@dataclass(frozen=True)
class EvalStep:
    """One step of a case's run: the model's text and the tool calls it asked for (with outcomes)."""

    step: int
    content: str | None
    tool_calls: list[CallLine] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class EvalRun:
    """A case's run as scorers see it."""

    run_id: str
    status: str  # a RunStatus
    output: str | None
    steps: list[EvalStep]
    output_json: Any = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: int = 0

    @property
    def tool_calls(self) -> list[CallLine]:
        return [c for s in self.steps for c in s.tool_calls]


def tools_line(call: ExpectedCall) -> Any:
    return call.name if call.arguments is None else {"name": call.name, "arguments": call.arguments}


def check_dataset_name(name: str) -> str:
    if not isinstance(name, str) or not DATASET_NAME.fullmatch(name):
        shown = name if isinstance(name, str) and len(name) <= 60 else f"{str(name)[:60]}..."
        raise InvalidInput(
            f"invalid dataset name {shown!r}: use letters, digits, '.', '_' or '-' (at most 100, "
            "starting with a letter or digit)"
        )
    return name


def expected_calls(value: Any, where: str) -> list[ExpectedCall]:
    """`expected_tools` as calls: a list of tool names or {"name", "arguments"} objects."""
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: expected_tools must be a list of tool names or {{name, arguments}} objects")
    if len(value) > TOOLS_MAX:
        raise InvalidInput(f"{where}: expected_tools has {len(value)} calls: keep it to {TOOLS_MAX}")
    calls = []
    for item in value:
        if isinstance(item, str) and item:
            calls.append(ExpectedCall(check_name(f"{where}: a tool name", item)))
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str) and item["name"]:
            arguments = item.get("arguments")
            if arguments is not None and not isinstance(arguments, Mapping):
                raise InvalidInput(f"{where}: the arguments of expected tool {item['name']!r} must be an object")
            unknown = set(item) - {"name", "arguments"}
            if unknown:
                raise InvalidInput(
                    f"{where}: an expected tool has unknown key(s) {sorted(unknown)}: use name, arguments"
                )
            calls.append(
                ExpectedCall(
                    check_name(f"{where}: a tool name", item["name"]),
                    dict(check_json(f"{where}: expected tool arguments", arguments)) if arguments is not None else None,
                )
            )
        else:
            shown = repr(item)[:100]
            raise InvalidInput(f"{where}: each expected tool is a tool name or an object with a name, got {shown}")
    return calls


def case_of(data: Any, index: int, where: str) -> EvalCase:
    """One case from its JSON object, checked; `where` names it in an error (`cases.jsonl line 3`)."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{where}: a case is a JSON object with a task, got {type(data).__name__}")
    unknown = set(data) - set(CASE_FIELDS) - {"source_run_id"}
    if unknown:
        raise InvalidInput(f"{where}: unknown key(s) {sorted(unknown)}: a case has {', '.join(CASE_FIELDS)}")
    task = data.get("task")
    if not isinstance(task, str) or not task.strip():
        raise InvalidInput(f'{where}: the case has no task: give each case a "task" (the text its run gets)')
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InvalidInput(f"{where}: metadata must be a JSON object")
    case_id = data.get("id")
    if case_id is None:
        case_id = f"case-{index}"
    if not isinstance(case_id, str | int) or isinstance(case_id, bool):
        raise InvalidInput(f"{where}: a case's id is text or a number")
    tools = data.get("expected_tools")
    source = data.get("source_run_id")
    return EvalCase(
        index=index,
        task=check_text(f"{where}: the task", task),
        case_id=check_text(f"{where}: the id", str(case_id), high=NAME_MAX),
        expected_output=check_json(f"{where}: expected_output", data.get("expected_output")),
        expected_tools=expected_calls(tools, where) if tools is not None else None,
        metadata=dict(check_json(f"{where}: metadata", metadata)),
        source_run_id=check_name(f"{where}: source_run_id", source) if isinstance(source, str) else None,
    )


def read_cases(lines: Iterable[str], source: str = "the cases") -> list[EvalCase]:
    """Cases from JSONL text (blank lines skipped), each checked; at least one, at most CASES_MAX,
    ids unique. `source` names the file in errors."""
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{where} is not JSON ({exc.msg}): write one JSON object a line") from None
        if len(cases) >= CASES_MAX:
            raise InvalidInput(f"{source} has more than {CASES_MAX} cases: split it into several datasets")
        case = case_of(data, len(cases), where)
        if case.case_id in seen:
            raise InvalidInput(f"{where}: the id {case.case_id!r} is also the case on line {seen[case.case_id]}")
        seen[case.case_id] = number
        cases.append(case)
    if not cases:
        raise InvalidInput(f"{source} has no cases: write one JSON object a line, each with a task")
    return cases
