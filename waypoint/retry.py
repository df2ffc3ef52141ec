"""Retry rules of every activity, in one place.

Imported by workflow code, so it may use only temporalio and the stdlib.
Non-retryable error types are ApplicationError `type`s raised by activities.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

# Errors a retry cannot heal: a wrong setting, an unknown name, a request the provider refused.
NON_RETRYABLE = ["ConfigError", "UnknownAgent", "UnknownTool", "NotFound"]

MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=10,
    non_retryable_error_types=NON_RETRYABLE,
)

TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=3,
    non_retryable_error_types=NON_RETRYABLE,
)

# Postgres writes: an outage heals, so keep trying (idempotent writes make this safe).
STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=0,
    non_retryable_error_types=NON_RETRYABLE,
)

MODEL_TIMEOUT = timedelta(minutes=5)
TOOL_TIMEOUT = timedelta(minutes=5)
STORE_TIMEOUT = timedelta(seconds=30)
