"""Waypoint's errors: one small tree, each message naming the fix.

    WaypointError              anything a user can fix; the CLI prints its message in one line
      ConfigError              a setting is missing or wrong
      InvalidInput             a request that cannot be served as given (an empty task, a bad budget,
                               step or tenant id)
        Mismatch               an answer that does not fit what waits for it (an approval's edited input
                               its tool's schema refuses, an answer to a call that asks no question, an
                               unknown interrupt id): HTTP 422
      NotFound                 an unknown run, step or episode (another tenant's run is not found too)
        UnknownAgent
        UnknownTool
        UnknownScorer          a scorer no worker has (not built in, no `@scorer` of that name)
      Forbidden                the caller's role does not allow the action (names the role it needs):
                               HTTP 403
      Conflict                 the request does not fit the run's state (a message to a finished run,
                               deleting a running run)
      StackError               an embedded component failed to start (names which, and the fix)
      Unavailable              Temporal, Postgres or a memory worker cannot be reached: retryable
      MemoryElsewhere          a model call with memory reached a worker that does not hold the store:
                               not retried there, the workflow sends it to the memory task queue
      ToolError                raised by a tool: reported to the model, the run goes on
      MCPStartFailed           an MCP server did not answer when a run started (names its command or URL,
                               with the tail of its stderr)
      MCPCallFailed            an MCP tool call got no answer: a dead or unreachable server, a timeout, a
                               protocol error; retryable, per the tool's retry spec
      PayloadTooLarge          a value too large for Temporal: pass a reference instead
      ScriptError              a scripted model's own code failed
      ModelError               the model provider's failure
        ModelRequestRejected   a 4xx answer: the same request cannot succeed later
        ModelUnavailable       429, 5xx, a timeout or a dropped connection: retryable, after `retry_after`
        MalformedAnswer        HTTP 200 with a body that is not a chat completion: retryable a few times
      WebhookFailed            a webhook POST got no answer, a 429 or a 5xx: retried with backoff
      WebhookRefused           a webhook POST got another 4xx (or a redirect), or its host resolves to a
                               refused address: not retried

At the activity boundary (`activities/boundary.py`) every one becomes a
`temporalio.exceptions.ApplicationError` whose `type` is the class name, non-retryable unless
the class is `retryable`; `waypoint.retry.NON_RETRYABLE` lists those names for the retry
policies. Standard library only: workflow code imports this module.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any


class WaypointError(Exception):
    """Base class: its message names the fix. `retryable`: a later attempt may succeed."""

    retryable = False

    def __init__(self, message: str, *, retry_after: timedelta | None = None, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.details = details or {}

    @property
    def message(self) -> str:
        return str(self)


class ConfigError(WaypointError):
    pass


class InvalidInput(WaypointError):
    pass


class Mismatch(InvalidInput):
    pass


class NotFound(WaypointError):
    pass


class UnknownAgent(NotFound):
    pass


class UnknownTool(NotFound):
    pass


class UnknownScorer(NotFound):
    pass


class Forbidden(WaypointError):
    """The caller's role does not allow the action; the message names the role it needs."""


class Conflict(WaypointError):
    pass


class StackError(WaypointError):
    pass


class Unavailable(WaypointError):
    retryable = True


class MemoryElsewhere(WaypointError):
    """A model call with episodic memory reached a worker of the run's own task queue that does not
    hold the store (another process owns it). Nothing ran: the workflow sends the call to the memory
    task queue instead, at once, so it is not retried here."""


class ToolError(WaypointError):
    """Raise from a tool to report a failure to the model instead of failing the run."""


class MCPStartFailed(WaypointError):
    """An MCP server of the agent could not be reached, or did not list its tools, when a run started."""


class MCPCallFailed(WaypointError):
    """An MCP tool call got no answer (a tool's own error result is a ToolError instead); a later
    attempt, on a fresh session if the old one died, may succeed."""

    retryable = True


class PayloadTooLarge(WaypointError):
    pass


class ScriptError(WaypointError):
    pass


class ModelError(WaypointError):
    """A failed model call; `details["status"]` is the HTTP status when there was an answer."""

    @property
    def status(self) -> int | None:
        status = self.details.get("status")
        return status if isinstance(status, int) else None


class ModelRequestRejected(ModelError):
    pass


class ModelUnavailable(ModelError):
    retryable = True


class MalformedAnswer(ModelError):
    retryable = True


class WebhookFailed(WaypointError):
    """A webhook POST that a later attempt may deliver: no answer, a timeout, HTTP 429 or 5xx."""

    retryable = True


class WebhookRefused(WaypointError):
    """A webhook POST no retry can deliver: another 4xx, a redirect, or a host that resolves to a
    link-local or metadata address."""


def non_retryable_types() -> list[str]:
    """Names of every error class a retry cannot heal, for `RetryPolicy.non_retryable_error_types`."""
    found: list[str] = []
    pending: list[type[WaypointError]] = [WaypointError]
    while pending:
        cls = pending.pop(0)
        if not cls.retryable and cls is not WaypointError and cls is not ModelError:
            found.append(cls.__name__)
        pending += cls.__subclasses__()
    return found


def failure_message(exc: BaseException, *, with_type: bool = False) -> str:
    """The plain message of a Temporal failure's cause (an ActivityError's ApplicationError, say),
    without the error type that `str()` would prefix; `with_type`: prefixed by the cause's own
    type name when it has one (an unexpected exception's class, such as KeyError)."""
    cause = exc.__cause__ or exc
    message = getattr(cause, "message", None) or str(cause) or type(cause).__name__
    kind = getattr(cause, "type", None) if with_type else None
    return f"{kind}: {message}" if kind else message
