"""Waypoint: durable, time-travelling LLM agent runs on Temporal.

    from waypoint import Agent, tool, Waypoint, Settings

Names are imported on first use, so `import waypoint` (and the `waypoint` command) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Agent": "waypoint.agents",
    "RetrySpec": "waypoint.types",
    "Score": "waypoint.evals.scorers",
    "ScriptedModel": "waypoint.models.scripted",
    "ScriptedTurn": "waypoint.models.scripted",
    "Settings": "waypoint.config",
    "Tool": "waypoint.tools",
    "ToolContext": "waypoint.tools",
    "ToolError": "waypoint.errors",
    "Waypoint": "waypoint.client",
    "WaypointError": "waypoint.errors",
    "scorer": "waypoint.evals.scorers",
    "tool": "waypoint.tools",
}

__all__ = [
    "Agent",
    "RetrySpec",
    "Score",
    "ScriptedModel",
    "ScriptedTurn",
    "Settings",
    "Tool",
    "ToolContext",
    "ToolError",
    "Waypoint",
    "WaypointError",
    "scorer",
    "tool",
]

if TYPE_CHECKING:
    from waypoint.agents import Agent
    from waypoint.client import Waypoint
    from waypoint.config import Settings
    from waypoint.errors import ToolError, WaypointError
    from waypoint.evals.scorers import Score, scorer
    from waypoint.models.scripted import ScriptedModel, ScriptedTurn
    from waypoint.tools import Tool, ToolContext, tool
    from waypoint.types import RetrySpec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'waypoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
