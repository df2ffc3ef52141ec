"""The public API is `waypoint.__all__`, pinned here: a name added to or dropped from it is a decision
this file records. Every name resolves, the README imports only public names, and defining an agent
loads no database driver."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys

import waypoint
from tests.docs import everything

PUBLIC = [
    # agents, tools, models, scorers
    "Agent",
    "Budget",
    "MCPServer",
    "RetrySpec",
    "Score",
    "ScriptedModel",
    "ScriptedTurn",
    "Tool",
    "ToolContext",
    "scorer",
    "tool",
    # the client, its settings, the worker plugin
    "Settings",
    "Waypoint",
    "Role",
    "WaypointPlugin",
    "worker_plugin",
    # what the client's methods return
    "AgentInfo",
    "ApiKeyRow",
    "AssistantRow",
    "BatchReport",
    "CompactionReport",
    "CompactionRow",
    "EventRow",
    "LineageLink",
    "Memory",
    "ReplayOutcome",
    "RunComparison",
    "RunProgress",
    "RunResult",
    "RunRow",
    "RunTree",
    "ScheduleInfo",
    "ScheduleRow",
    "StateDiff",
    "StepLine",
    "StepState",
    "ThreadRow",
    "Verdict",
    "WebhookAttempt",
    "WebhookDelivery",
    # errors
    "ConfigError",
    "Conflict",
    "Forbidden",
    "InvalidInput",
    "MCPCallFailed",
    "MCPStartFailed",
    "MalformedAnswer",
    "Mismatch",
    "ModelError",
    "ModelRequestRejected",
    "ModelUnavailable",
    "NotFound",
    "PayloadTooLarge",
    "ScriptError",
    "StackError",
    "ToolError",
    "Unavailable",
    "UnknownAgent",
    "UnknownScorer",
    "UnknownTool",
    "WaypointError",
]


def test_all_is_the_pinned_list() -> None:
    assert sorted(waypoint.__all__) == sorted(PUBLIC)
    assert len(set(waypoint.__all__)) == len(waypoint.__all__)
    assert not [name for name in waypoint.__all__ if name.startswith("_")]


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    for name in waypoint.__all__:
        value = getattr(waypoint, name)
        assert getattr(value, "__name__", name) == name, name
        assert value.__module__.startswith("waypoint."), (name, value.__module__)
    errors = [getattr(waypoint, n) for n in waypoint.__all__ if n.endswith(("Error", "Failed")) or n == "NotFound"]
    assert all(issubclass(e, waypoint.WaypointError) for e in errors)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        waypoint.check_position  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "check_position" in str(exc)
    else:
        raise AssertionError("a helper of the surfaces leaked into the public API")


def readme_imports() -> list[tuple[str, str]]:
    """(module, name) of every `from waypoint... import name` in the Python blocks of the README and
    the documentation's pages."""
    found: list[tuple[str, str]] = []
    for block in re.findall(r"```python\n(.*?)```", everything(), re.S):
        try:
            tree = ast.parse(block)
        except SyntaxError:  # a fragment (`...` bodies, a shell prompt): read its import lines alone
            lines = [line for line in block.splitlines() if re.match(r"\s*from waypoint[\w.]* import ", line)]
            tree = ast.parse("\n".join(line.strip() for line in lines))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "waypoint":
                found += [(node.module or "", alias.name) for alias in node.names]
    return found


def test_the_readme_imports_only_public_names() -> None:
    found = readme_imports()
    assert ("waypoint", "Agent") in found and ("waypoint", "Waypoint") in found
    for module, name in found:
        assert not name.startswith("_") and not any(part.startswith("_") for part in module.split(".")), (module, name)
        if module == "waypoint":
            assert name in waypoint.__all__, f"the README imports {name} from waypoint, which does not export it"
        else:
            mod = importlib.import_module(module)
            public = getattr(mod, "__all__", None)
            assert hasattr(mod, name), (module, name)
            assert public is None or name in public, f"{module}.{name} is not in {module}.__all__"


def test_the_readmes_python_api_types_are_exported() -> None:
    text = everything()
    for name in ("RunRow", "StepLine", "RunResult", "RunProgress", "Budget", "StepState", "StateDiff", "RunTree"):
        assert f"`{name}" in text or f"{name}(" in text or f"# {name}" in text, name
        assert name in waypoint.__all__, name


def test_from_waypoint_import_agent_loads_no_database_driver_nor_temporal_client() -> None:
    code = (
        "import sys; from waypoint import Agent, tool, Budget, RunResult; "
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for heavy in ("sqlalchemy", "asyncpg", "qdrant_client", "openai", "temporalio", "fastapi"):
        assert f"'{heavy}'" not in loaded, f"`from waypoint import Agent` imports {heavy}"
