"""Retry and timeout rules of every activity, in one place.

Imported by workflow code, so it may use only temporalio and the stdlib.

- Model calls: HTTP 408/409/429/5xx, timeouts and connection errors retry. The
  activity computes the delay itself (exponential backoff with jitter, or the
  provider's Retry-After) and hands it over as `next_retry_delay`, so the
  policy's own interval only paces retries after a lost worker.
- Tools: any exception but ToolError retries, up to the tool's `max_attempts`.
- Postgres writes: retried until they succeed (they are idempotent).
- Never retried: the error types in NON_RETRYABLE, whatever the activity.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from waypoint.types import RetrySpec, ToolSpec

# Errors a retry cannot heal: a wrong setting, an unknown name, a request the provider refused,
# a payload too large for Temporal, a bug in a scripted model.
NON_RETRYABLE = [
    "ConfigError",
    "UnknownAgent",
    "UnknownTool",
    "NotFound",
    "PayloadTooLarge",
    "ModelRequestRejected",
    "ScriptError",
]

# A worker killed mid-activity stops heartbeating; Temporal retries the attempt elsewhere after this.
HEARTBEAT_TIMEOUT = timedelta(seconds=2)
# Seconds between heartbeat calls; the SDK sends at most one per 0.8 x HEARTBEAT_TIMEOUT anyway.
HEARTBEAT_EVERY = 0.5
# Delay before re-running an attempt whose worker vanished (HTTP errors bring their own delay).
RECOVERY_INTERVAL = timedelta(milliseconds=200)

# Postgres writes are single short transactions: a short timeout means a worker killed mid-write
# costs seconds, not half a minute (record_step serializes concurrent attempts, so a retry
# overlapping a slow first attempt is safe).
STORE_TIMEOUT = timedelta(seconds=5)
# A workflow task on a worker that died is handed to another after this (Temporal's default is 10 s).
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=5)
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=0,
    non_retryable_error_types=NON_RETRYABLE,
)


def model_retry(spec: RetrySpec) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=RECOVERY_INTERVAL,
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=spec.max_interval_seconds),
        maximum_attempts=spec.max_attempts,
        non_retryable_error_types=NON_RETRYABLE,
    )


def tool_retry(spec: ToolSpec) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=RECOVERY_INTERVAL,
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=spec.max_attempts,
        non_retryable_error_types=NON_RETRYABLE,
    )


def backoff_seconds(spec: RetrySpec, attempt: int, jitter: float) -> float:
    """Exponential backoff for attempt `attempt` (1-based), scaled by `jitter` in [0.5, 1]."""
    base = spec.initial_interval_seconds * 2 ** (attempt - 1)
    return min(spec.max_interval_seconds, base) * jitter


# Memory and inline compaction help a run but must not hold it up: a few attempts, then go on.
MEMORY_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=3,
    non_retryable_error_types=NON_RETRYABLE,
)
