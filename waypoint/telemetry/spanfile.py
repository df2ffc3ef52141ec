"""Spans as JSON lines: the local trace store of the embedded stack, and the tree `waypoint trace` prints.

Without an OTLP endpoint the worker (and the CLI, for its client spans) append
finished spans to `<state_dir>/traces/spans.jsonl`, one JSON object per line.
Each batch is one `write()` on a file opened for appending, under an advisory lock
(`spans.jsonl.lock`) that `remove_trace` (the retention path) takes too, so several
processes share the file without interleaving or losing lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


def span_file(state_dir: Path) -> Path:
    return Path(state_dir) / "traces" / "spans.jsonl"


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def span_dict(span: ReadableSpan) -> dict[str, Any]:
    """One finished span as plain JSON (the fields the tree and a reader need)."""
    ctx = span.get_span_context()
    assert ctx is not None
    parent = span.parent
    return {
        "trace_id": _hex(ctx.trace_id, 32),
        "span_id": _hex(ctx.span_id, 16),
        "parent_id": _hex(parent.span_id, 16) if parent is not None else None,
        "name": span.name,
        "kind": span.kind.name,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "status_description": span.status.description,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes or {})} for e in span.events
        ],
        "service": (span.resource.attributes.get("service.name") if span.resource else None),
    }


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive use of the span file across processes (an advisory lock on a file beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def remove_trace(path: Path, trace_id: str) -> int:
    """Drop every span of one trace from the file (the retention path); returns how many went."""
    if not path.exists():
        return 0
    removed = 0
    with _locked(path):
        kept = path.with_name(path.name + ".tmp")
        with path.open() as src, kept.open("w") as dst:
            for line in src:
                if trace_id in line and _trace_of(line) in (trace_id, None):  # None: a line cut mid-write
                    removed += 1
                    continue
                dst.write(line)
        os.replace(kept, path)
    return removed


def _trace_of(line: str) -> str | None:
    try:
        found = json.loads(line).get("trace_id")
    except json.JSONDecodeError:
        return None
    return found if isinstance(found, str) else None


class JsonLinesSpanExporter(SpanExporter):
    """Appends finished spans to a JSON-lines file."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = "".join(json.dumps(span_dict(s), default=str) + "\n" for s in spans).encode()
        try:
            with self._lock, _locked(self.path):
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def read_trace(path: Path, trace_id: str) -> list[dict[str, Any]]:
    """Every span of one trace in the file (streamed: the file may hold many runs)."""
    found: list[dict[str, Any]] = []
    if not path.exists():
        return found
    with path.open() as fh:
        for line in fh:
            if trace_id not in line:  # cheap prefilter before parsing
                continue
            try:
                span = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a crash mid-write
                continue
            if span.get("trace_id") == trace_id:
                found.append(span)
    return found


@dataclass
class Node:
    span: dict[str, Any]
    children: list[Node] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        return ((self.span.get("end_ns") or 0) - (self.span.get("start_ns") or 0)) / 1e6


def span_tree(spans: Iterable[dict[str, Any]]) -> list[Node]:
    """Spans as a forest ordered by start time; a span whose parent is missing is a root."""
    nodes = {s["span_id"]: Node(s) for s in sorted(spans, key=lambda s: (s.get("start_ns") or 0, s["name"]))}
    roots: list[Node] = []
    for node in nodes.values():
        parent = nodes.get(node.span.get("parent_id") or "")
        (parent.children if parent is not None else roots).append(node)
    return roots


def walk(nodes: list[Node], depth: int = 0) -> Iterator[tuple[int, Node]]:
    for node in nodes:
        yield depth, node
        yield from walk(node.children, depth + 1)


# Attributes worth a place on a tree line, in this order.
KEY_ATTRIBUTES = (
    "waypoint.step",
    "waypoint.attempt",
    "gen_ai.request.model",
    "waypoint.failed_over_from",
    "waypoint.agent.fingerprint",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.call.id",
    "http.response.status_code",
    "error.type",
    "db.system",
    "db.system.name",
)


def key_attributes(span: dict[str, Any]) -> dict[str, Any]:
    attrs = span.get("attributes") or {}
    return {k: attrs[k] for k in KEY_ATTRIBUTES if k in attrs}
