"""`waypoint trace RUN`: a run's span tree from the local span file, or its id and UI link."""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape
from rich.tree import Tree

from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.telemetry.spanfile import Node, key_attributes, read_trace, span_file, span_tree


def ui_link(settings: Settings, trace_id: str) -> str | None:
    return settings.trace_ui_url.replace("{trace_id}", trace_id) if settings.trace_ui_url else None


def _label(node: Node) -> str:
    span = node.span
    failed = span.get("status") == "ERROR"
    name = f"[red]{escape(span['name'])}[/red]" if failed else f"[bold]{escape(span['name'])}[/bold]"
    attrs = " ".join(
        f"{k.rsplit('.', 1)[-1] if k.startswith('waypoint.') else k}={v}" for k, v in key_attributes(span).items()
    )
    status = f" [red]ERROR {escape(span.get('status_description') or '')[:120]}[/red]" if failed else ""
    return f"{name} [dim]{node.duration_ms:.1f} ms{' ' + escape(attrs) if attrs else ''}[/dim]{status}"


def tree(run_id: str, trace_id: str, spans: list[dict[str, Any]]) -> Tree:
    root = Tree(f"run [bold]{run_id}[/bold]  trace {trace_id}  ({len(spans)} spans)")

    def add(parent: Tree, nodes: list[Node]) -> None:
        for node in nodes:
            add(parent.add(_label(node)), node.children)

    add(root, span_tree(spans))
    return root


def trace_spans(settings: Settings, run_id: str, trace_id: str) -> list[dict[str, Any]]:
    path = span_file(settings.state_dir)
    spans = read_trace(path, trace_id)
    if not spans:
        raise NotFound(
            f"no spans of run {run_id} (trace {trace_id}) in {path}: the worker writes them there when "
            "no OTLP endpoint is set, about a second after they end; with an endpoint, open the trace in its UI"
        )
    return spans


def as_json(spans: list[dict[str, Any]]) -> str:
    return json.dumps(spans, indent=2, default=str)
