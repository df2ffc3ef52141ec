"""Waypoint: durable, time-travelling LLM agent runs on Temporal.

    from waypoint import Agent, tool, Waypoint, Settings

The public API is `__all__` (pinned by tests/test_public_api.py): agents and tools, the client
`Waypoint` and the types its methods return, the errors, the settings, the worker plugin. Every
other module is the runtime's own, free to change.

Names are imported on first use (PEP 562), so `import waypoint`, the `waypoint` command and
`from waypoint import Agent` stay fast: defining an agent loads no database driver, no Temporal
client and no model SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and the module that defines it, imported only when the name is first used.
_EXPORTS = {
    # agents, tools, models, scorers
    "Agent": "waypoint.agents",
    "Budget": "waypoint.types",
    "MCPServer": "waypoint.mcp.servers",
    "RetrySpec": "waypoint.types",
    "Score": "waypoint.evals.scorers",
    "ScriptedModel": "waypoint.models.scripted",
    "ScriptedTurn": "waypoint.models.scripted",
    "Tool": "waypoint.tools",
    "ToolContext": "waypoint.tools",
    "scorer": "waypoint.evals.scorers",
    "tool": "waypoint.tools",
    # the client, its settings, the worker plugin
    "Settings": "waypoint.config",
    "Waypoint": "waypoint.client",
    "Role": "waypoint.access",
    "WaypointPlugin": "waypoint.app.plugin",
    "worker_plugin": "waypoint.app.plugin",
    # what the client's methods return
    "AgentInfo": "waypoint.types",
    "ApiKeyRow": "waypoint.store.keys",
    "AssistantRow": "waypoint.store.assistants",
    "BatchReport": "waypoint.store.rows",
    "CompactionReport": "waypoint.compaction_types",
    "CompactionRow": "waypoint.store.compactions",
    "EventRow": "waypoint.store.rows",
    "LineageLink": "waypoint.store.travel",
    "Memory": "waypoint.types",
    "ReplayOutcome": "waypoint.client",
    "RunComparison": "waypoint.store.compare",
    "RunProgress": "waypoint.types",
    "RunResult": "waypoint.types",
    "RunRow": "waypoint.store.rows",
    "RunTree": "waypoint.store.trees",
    "ScheduleInfo": "waypoint.gateway.schedule",
    "ScheduleRow": "waypoint.store.schedules",
    "StateDiff": "waypoint.store.travel",
    "StepLine": "waypoint.store.reads",
    "StepState": "waypoint.store.travel",
    "ThreadRow": "waypoint.store.threads",
    "Verdict": "waypoint.store.integrity",
    "WebhookAttempt": "waypoint.store.webhooks",
    "WebhookDelivery": "waypoint.store.webhooks",
    # the errors a user catches (waypoint.errors draws the tree)
    "ConfigError": "waypoint.errors",
    "Conflict": "waypoint.errors",
    "Forbidden": "waypoint.errors",
    "InvalidInput": "waypoint.errors",
    "MCPCallFailed": "waypoint.errors",
    "MCPStartFailed": "waypoint.errors",
    "MalformedAnswer": "waypoint.errors",
    "Mismatch": "waypoint.errors",
    "ModelError": "waypoint.errors",
    "ModelRequestRejected": "waypoint.errors",
    "ModelUnavailable": "waypoint.errors",
    "NotFound": "waypoint.errors",
    "PayloadTooLarge": "waypoint.errors",
    "ScriptError": "waypoint.errors",
    "StackError": "waypoint.errors",
    "ToolError": "waypoint.errors",
    "Unavailable": "waypoint.errors",
    "UnknownAgent": "waypoint.errors",
    "UnknownScorer": "waypoint.errors",
    "UnknownTool": "waypoint.errors",
    "WaypointError": "waypoint.errors",
}

__all__ = [
    "Agent",
    "AgentInfo",
    "ApiKeyRow",
    "AssistantRow",
    "BatchReport",
    "Budget",
    "CompactionReport",
    "CompactionRow",
    "ConfigError",
    "Conflict",
    "EventRow",
    "Forbidden",
    "InvalidInput",
    "LineageLink",
    "MCPCallFailed",
    "MCPServer",
    "MCPStartFailed",
    "MalformedAnswer",
    "Memory",
    "Mismatch",
    "ModelError",
    "ModelRequestRejected",
    "ModelUnavailable",
    "NotFound",
    "PayloadTooLarge",
    "ReplayOutcome",
    "RetrySpec",
    "Role",
    "RunComparison",
    "RunProgress",
    "RunResult",
    "RunRow",
    "RunTree",
    "ScheduleInfo",
    "ScheduleRow",
    "Score",
    "ScriptError",
    "ScriptedModel",
    "ScriptedTurn",
    "Settings",
    "StackError",
    "StateDiff",
    "StepLine",
    "StepState",
    "ThreadRow",
    "Tool",
    "ToolContext",
    "ToolError",
    "Unavailable",
    "UnknownAgent",
    "UnknownScorer",
    "UnknownTool",
    "Verdict",
    "Waypoint",
    "WaypointError",
    "WaypointPlugin",
    "WebhookAttempt",
    "WebhookDelivery",
    "scorer",
    "tool",
    "worker_plugin",
]

if TYPE_CHECKING:
    from waypoint.access import Role
    from waypoint.agents import Agent
    from waypoint.app.plugin import WaypointPlugin, worker_plugin
    from waypoint.client import ReplayOutcome, Waypoint
    from waypoint.compaction_types import CompactionReport
    from waypoint.config import Settings
    from waypoint.errors import (
        ConfigError,
        Conflict,
        Forbidden,
        InvalidInput,
        MalformedAnswer,
        MCPCallFailed,
        MCPStartFailed,
        Mismatch,
        ModelError,
        ModelRequestRejected,
        ModelUnavailable,
        NotFound,
        PayloadTooLarge,
        ScriptError,
        StackError,
        ToolError,
        Unavailable,
        UnknownAgent,
        UnknownScorer,
        UnknownTool,
        WaypointError,
    )
    from waypoint.evals.scorers import Score, scorer
    from waypoint.gateway.schedule import ScheduleInfo
    from waypoint.mcp.servers import MCPServer
    from waypoint.models.scripted import ScriptedModel, ScriptedTurn
    from waypoint.store.assistants import AssistantRow
    from waypoint.store.compactions import CompactionRow
    from waypoint.store.compare import RunComparison
    from waypoint.store.integrity import Verdict
    from waypoint.store.keys import ApiKeyRow
    from waypoint.store.reads import StepLine
    from waypoint.store.rows import BatchReport, EventRow, RunRow
    from waypoint.store.schedules import ScheduleRow
    from waypoint.store.threads import ThreadRow
    from waypoint.store.travel import LineageLink, StateDiff, StepState
    from waypoint.store.trees import RunTree
    from waypoint.store.webhooks import WebhookAttempt, WebhookDelivery
    from waypoint.tools import Tool, ToolContext, tool
    from waypoint.types import AgentInfo, Budget, Memory, RetrySpec, RunProgress, RunResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'waypoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
