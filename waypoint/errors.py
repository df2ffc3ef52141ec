"""Waypoint's errors.

    WaypointError                 anything a user can fix; the CLI prints its message in one line
      ConfigError                 a setting is missing or wrong
      StackError                  an embedded component failed to start (names which, and the fix)
      NotFound                    unknown run, agent, tool or step
      UnknownAgent
      UnknownTool
      ToolError                   raised by a tool: reported to the model, the run goes on

At the activity boundary these become `temporalio.exceptions.ApplicationError`
with `type` set to the class name, so retry policies can list them.
"""


class WaypointError(Exception):
    """Base class: its message names the fix."""


class ConfigError(WaypointError):
    pass


class StackError(WaypointError):
    pass


class NotFound(WaypointError):
    pass


class UnknownAgent(NotFound):
    pass


class UnknownTool(NotFound):
    pass


class ToolError(WaypointError):
    """Raise from a tool to report a failure to the model instead of failing the run."""
