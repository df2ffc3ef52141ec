"""No HTTP route (nor a helper of one) makes more than one write call to the client on any one path:
a write that needs several steps (take a thread's next place, cancel the run before it, start, undo on
failure) is one client call, so Python, the CLI, MCP and HTTP get the same saga and no route runs one.

A write is a client method that acts through the scope (`Scope.act`), or calls one that does. Two
calls in the two branches of one `if` are alternatives, not two writes.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Names too common to tell a client write from a dict's or a set's method by the name alone.
AMBIGUOUS = {"update", "copy", "delete", "create"}
BRANCHES = {"body", "orelse", "handlers"}
Step = tuple[ast.AST, str, int]  # a node, the field a call sits under, its index in that field's list


def client_methods() -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for path in (ROOT / "waypoint" / "client").glob("*.py"):
        for cls in ast.parse(path.read_text()).body:
            if isinstance(cls, ast.ClassDef):
                for f in cls.body:
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                        found[f"{cls.name}.{f.name}"] = f
    return found


def called(node: ast.AST) -> set[str]:
    return {c.func.attr for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)}


def client_writes() -> set[str]:
    methods = client_methods()
    writes = {key.split(".")[1] for key, f in methods.items() if "act" in called(f)}
    grew = True
    while grew:  # a method that calls a write is one
        grew = False
        for key, f in methods.items():
            name = key.split(".")[1]
            if name not in writes and not name.startswith("__") and called(f) & (writes - AMBIGUOUS):
                writes.add(name)
                grew = True
    return {w for w in writes if not w.startswith("_")}


def on_the_client(func: ast.Attribute) -> bool:
    return "wp" in ast.unparse(func.value).split(".")


def exclusive(path_a: list[Step], path_b: list[Step]) -> bool:
    """Whether two calls are alternatives: in different branches of one `if` (or `try`), or the first
    in an `if` whose branch returns or raises, the second after that `if`."""
    for (node_a, field_a, at_a), (node_b, field_b, at_b) in zip(path_a, path_b, strict=False):
        if node_a is not node_b:
            return False
        if field_a != field_b:
            return isinstance(node_a, ast.If | ast.IfExp | ast.Try) and {field_a, field_b} <= BRANCHES
        if at_a != at_b:
            first = getattr(node_a, field_a)[min(at_a, at_b)]
            return isinstance(first, ast.If) and ends(first.body if at_a < at_b else first.orelse)
    return False


def ends(block: list[ast.stmt]) -> bool:
    return bool(block) and isinstance(block[-1], ast.Return | ast.Raise)


def write_calls(function: ast.AST, writes: set[str]) -> list[tuple[ast.Call, list[Step]]]:
    found: list[tuple[ast.Call, list[Step]]] = []

    def visit(node: ast.AST, path: list[Step]) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in writes and on_the_client(node.func):
                found.append((node, path))
        for field, value in ast.iter_fields(node):
            children = value if isinstance(value, list) else [value]
            for at, child in enumerate(children):
                if isinstance(child, ast.AST) and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    visit(child, [*path, (node, field, at)])

    visit(function, [])
    return found


def routes_with_two_writes(source: str, writes: set[str]) -> list[str]:
    bad = []
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            calls = write_calls(function, writes)
            for i, (a, path_a) in enumerate(calls):
                for b, path_b in calls[i + 1 :]:
                    if not exclusive(path_a, path_b):
                        bad.append(f"{function.name}: {ast.unparse(a.func)} and {ast.unparse(b.func)}")
    return bad


def test_the_client_writes_are_found() -> None:
    writes = client_writes()
    assert {"start_run", "cancel", "approve", "deny", "fork", "rerun", "start_turn", "send"} <= writes
    assert "list_runs" not in writes and "status" not in writes


def test_no_route_makes_two_write_calls_to_the_client() -> None:
    writes = client_writes()
    bad = []
    for path in sorted((ROOT / "waypoint" / "app" / "http").rglob("*.py")):
        bad += [f"{path.relative_to(ROOT)}: {line}" for line in routes_with_two_writes(path.read_text(), writes)]
    assert bad == []


def test_the_check_finds_a_route_with_two_writes_and_passes_alternatives() -> None:
    two = """
async def start(api, tenant):
    await api.wp.cancel("r1", tenant_id=tenant)
    return await api.wp.start_run("hi", tenant_id=tenant)
"""
    either = """
async def decide(api, body):
    if body.approve:
        await api.wp.approve("r1")
    else:
        await api.wp.deny("r1")
"""
    early = """
async def decide(api, body):
    if not body.approve:
        return await api.wp.deny("r1")
    await api.wp.approve("r1")
"""
    after = """
async def decide(api, body):
    if body.first:
        await api.wp.deny("r1")
    await api.wp.approve("r1")
"""
    writes = {"cancel", "start_run", "approve", "deny"}
    assert routes_with_two_writes(two, writes) == ["start: api.wp.cancel and api.wp.start_run"]
    assert routes_with_two_writes(either, writes) == []
    assert routes_with_two_writes(early, writes) == []
    assert routes_with_two_writes(after, writes) == ["decide: api.wp.deny and api.wp.approve"]
