"""Waypoint: durable, time-travelling LLM agent runs on Temporal."""

from waypoint.agents import Agent
from waypoint.errors import ToolError, WaypointError
from waypoint.models import ScriptedModel, ScriptedTurn
from waypoint.tools import Tool, ToolContext, tool

__all__ = ["Agent", "ScriptedModel", "ScriptedTurn", "Tool", "ToolContext", "ToolError", "WaypointError", "tool"]
