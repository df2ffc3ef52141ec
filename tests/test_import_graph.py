"""The import graph of the installed package (`waypoint/`, with `workflows/` and `activities/` under it),
read from the code: every import, at module level, inside functions and under TYPE_CHECKING, each
resolved to the module it names. No module takes part in a circle."""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for folder, _, files in os.walk(ROOT / "waypoint", followlinks=True):  # workflows/, activities/ are links
        for name in files:
            if name.endswith(".py"):
                path = Path(folder) / name
                parts = list(path.relative_to(ROOT).with_suffix("").parts)
                package = parts[-1] == "__init__"
                found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    arrows: dict[str, set[str]] = defaultdict(set)
    for module, (path, package) in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = module.split(".") if package else module.split(".")[:-1]
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                names = subs + ([base] if len(subs) < len(node.names) else [])
            for name in names:
                target = resolve(name) if name.split(".")[0] == "waypoint" else None
                if target and target != module:
                    arrows[module].add(target)
    return arrows


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in list(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, rest = work[-1]
            nxt = next(rest, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(arrows.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    group.append(top)
                    if top == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_module_is_in_an_import_circle() -> None:
    arrows = graph()
    assert "waypoint.workflows.agent_run" in arrows and "waypoint.client._waypoint" in arrows
    assert circles(arrows) == []


def test_the_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
