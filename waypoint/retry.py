"""Retry and timeout rules of every activity and workflow, in one place.

Imported by workflow code, so it may use only temporalio and the standard library.

- Model calls: HTTP 408/409/429/5xx, timeouts and dropped connections retry; so does an
  HTTP 200 whose body is not a chat completion, up to MALFORMED_ATTEMPTS. The activity
  computes the delay itself (the provider's Retry-After or, from Google, the `retryDelay` of
  the error's RetryInfo (`retry_info_delay`); else exponential backoff with jitter) and hands
  it over as `next_retry_delay`, so the policy's own interval only paces retries after a lost
  worker. Other 4xx answers never retry: the same request cannot succeed later.
  `classify_model_failure` holds these rules.
- Tools: any exception but ToolError retries, up to the tool's `max_attempts`.
- Postgres writes: retried until they succeed (they are idempotent).
- start_run: like a write, but bounded: an unexpected failure (a bug in an agent's definition) is
  tried START_ATTEMPTS times, anything else (an outage, an MCP server that hangs) at most
  START_RETRY's attempts; then the run ends `failed` with the reason.
- Memory and inline compaction: a few attempts, then the run goes on without them.
- Webhooks: each delivery is a workflow of its own (workflows/webhooks.py), so the run's workflow
  ends at once. A POST with no answer, a timeout, HTTP 429 or 5xx is retried with exponential
  backoff (1, 2, 4 s ... capped at WEBHOOK_MAX_INTERVAL) until the retry window ends (setting
  `webhook_retry_window_seconds`, default 24 h: the activity's schedule-to-close timeout); another
  4xx, a redirect or a refused address is not. Then the delivery is on the dead-letter list.
  Whatever happens, the run's own outcome stays as it was. (Runs from before patch webhook-2
  posted from their own workflow: WEBHOOK_ATTEMPTS attempts, about half a minute.)
- Never retried: the error types in NON_RETRYABLE (`waypoint.errors`), whatever the activity.
- Failover (an agent with several models): a model call that still fails after `failover_after`
  attempts with an error in FAILOVER_ERRORS (what a retry may heal, or a model this worker cannot
  call), or that times out, goes to the agent's next model; the last model keeps the full policy.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.common import RetryPolicy

from waypoint.errors import (
    ConfigError,
    MalformedAnswer,
    ModelError,
    ModelRequestRejected,
    ModelUnavailable,
    non_retryable_types,
)
from waypoint.types import RetrySpec, ToolSpec

NON_RETRYABLE = non_retryable_types()

# --- timeouts ----------------------------------------------------------------------------------

# A worker killed mid-activity stops heartbeating; Temporal retries the attempt elsewhere after this.
HEARTBEAT_TIMEOUT = timedelta(seconds=2)
# The longest gap between two heartbeat calls of a running activity, whatever its heartbeat timeout:
# a beat that paced itself by a long timeout alone would leave a dead worker unnoticed for long.
HEARTBEAT_MAX_GAP = 1.0
# After a worker dies, its sticky queue holds the next workflow task of each of its runs until this
# passes, then the task goes to the normal queue, where any worker takes it (Temporal's default is
# 10 s: a kill between two steps cost that much, though a new worker was up in 1-2 s). A live
# worker starts a sticky task in milliseconds, so a short wait costs nothing but a cache miss.
STICKY_QUEUE_TIMEOUT = timedelta(seconds=1)
# Delay before re-running an attempt whose worker vanished (HTTP errors bring their own delay).
RECOVERY_INTERVAL = timedelta(milliseconds=200)
# Postgres writes are single short statements: a short timeout means a worker killed mid-write
# costs seconds, not half a minute (record_step settles overlapping attempts, so a retry
# overlapping a slow first attempt is safe).
STORE_TIMEOUT = timedelta(seconds=5)
# start_run writes like the store, but may first list the tools of the agent's MCP servers, which
# starts stdio servers (MCPServer.connect_timeout, at most 100 s, in parallel); it heartbeats.
START_TIMEOUT = timedelta(seconds=120)
# A workflow task on a worker that died is handed to another after this (Temporal's default is 10 s).
WORKFLOW_TASK_TIMEOUT = timedelta(seconds=5)
# How long a client waits for a run to take a message (pause, cancel, send...) or to answer a
# query of its live state: a run that cannot make progress, or whose worker is gone, answers with
# what is wrong instead of hanging.
ACTION_WAIT = timedelta(seconds=10)
# A tool the plan does not know (it cannot happen unless an agent changed mid-run) gets this.
DEFAULT_TOOL_TIMEOUT_SECONDS = 60.0
# The longest timer a workflow sets (protobuf's Duration holds 10,000 years): a longer wait, for a
# deadline a run in flight may carry from before the API bounded it, is cut to this.
LONGEST_TIMER_SECONDS = 315_576_000_000
# Memory is best-effort: without a memory worker polling, a step waits this long, then goes on.
MEMORY_SCHEDULE_TIMEOUT = timedelta(seconds=10)
MEMORY_TIMEOUT = timedelta(seconds=60)
# A compaction pass: choosing runs, and one run's summary (which may take as long as a model call).
SELECT_RUNS_TIMEOUT = timedelta(seconds=60)
COMPACT_TIMEOUT = timedelta(minutes=10)
# The tool ledger rides out a database outage this long (heartbeating), so an outage does not
# spend the tool's own attempts and the model is never told a tool failed because Postgres blinked.
LEDGER_PATIENCE_SECONDS = 60.0


def heartbeat_every(timeout: timedelta | None) -> float:
    """Seconds between heartbeat calls of an activity with heartbeat timeout `timeout`: a quarter of it,
    so a beat or two may be late without the attempt being given up, and never more than
    HEARTBEAT_MAX_GAP. (Temporal's client sends at most one per 0.8 x the timeout; the calls between
    only refresh what it sends.)"""
    if timeout is None or timeout <= timedelta(0):
        return HEARTBEAT_MAX_GAP
    return min(timeout.total_seconds() / 4, HEARTBEAT_MAX_GAP)


def inline_compaction_timeout(spec: RetrySpec) -> timedelta:
    """An inline compaction may call the model once for the summary, and read and write a little."""
    return timedelta(seconds=spec.timeout_seconds * 2)


# --- retry policies ----------------------------------------------------------------------------

STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=0,
    non_retryable_error_types=NON_RETRYABLE,
)

# A start that fails for a reason Waypoint does not know is tried this often (`activities.boundary.gives_up`).
START_ATTEMPTS = 3
# Any other start failure that retrying may heal (Postgres down) is retried for about three minutes.
START_RETRY = replace(STORE_RETRY, maximum_attempts=24)

# Memory and inline compaction help a run but must not hold it up: a few attempts, then go on.
MEMORY_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=3,
    non_retryable_error_types=NON_RETRYABLE,
)

# A webhook POST: a short timeout per attempt, WEBHOOK_ATTEMPTS attempts 1, 2, 4, 8, 16 s apart.
WEBHOOK_TIMEOUT_SECONDS = 10.0
WEBHOOK_ACTIVITY_TIMEOUT = timedelta(seconds=WEBHOOK_TIMEOUT_SECONDS + 5)  # resolving and recording too
WEBHOOK_ATTEMPTS = 6
WEBHOOK_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=WEBHOOK_ATTEMPTS,
    non_retryable_error_types=NON_RETRYABLE,
)

# A webhook delivery (workflows/webhooks.py): attempts 1, 2, 4, 8 ... s apart, at most an hour apart,
# for as long as the delivery's retry window lasts (its schedule-to-close timeout): no attempt cap.
WEBHOOK_MAX_INTERVAL = timedelta(hours=1)
WEBHOOK_DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=WEBHOOK_MAX_INTERVAL,
    maximum_attempts=0,
    non_retryable_error_types=NON_RETRYABLE,
)


def webhook_backoff(attempt: int) -> timedelta:
    """How long WEBHOOK_DELIVERY_RETRY waits after failed attempt `attempt` (from 1) before the next."""
    policy = WEBHOOK_DELIVERY_RETRY
    assert policy.maximum_interval is not None
    seconds = policy.initial_interval.total_seconds() * policy.backoff_coefficient ** min(attempt - 1, 64)
    return min(timedelta(seconds=seconds), policy.maximum_interval)


# A compaction pass is retried by the next scheduled one: a few attempts per activity are enough.
PASS_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=3,
    non_retryable_error_types=NON_RETRYABLE,
)


# An experiment's own steps (its plan, a case's input and scores, the summary) are short reads and
# idempotent writes in Postgres: retried through an outage; an unexpected failure gives up after
# EXPERIMENT_ATTEMPTS (`activities.boundary.gives_up`), the case is then left without a result.
EXPERIMENT_ATTEMPTS = 3
EXPERIMENT_RETRY = STORE_RETRY
# A judge's verdict is a model call: retried on 429/5xx/timeouts like one (the error brings its
# delay), JUDGE_ATTEMPTS in all; then the case is errored and the experiment goes on.
JUDGE_ATTEMPTS = 5
JUDGE_TIMEOUT = timedelta(seconds=180)


def _recovering(max_interval: timedelta, max_attempts: int) -> RetryPolicy:
    """A policy whose own interval only paces retries after a lost worker (errors bring their delay)."""
    return RetryPolicy(
        initial_interval=RECOVERY_INTERVAL,
        backoff_coefficient=2.0,
        maximum_interval=max_interval,
        maximum_attempts=max_attempts,
        non_retryable_error_types=NON_RETRYABLE,
    )


def model_retry(spec: RetrySpec) -> RetryPolicy:
    return _recovering(timedelta(seconds=spec.max_interval_seconds), spec.max_attempts)


def failover_retry(spec: RetrySpec, failover_after: int) -> RetryPolicy:
    """The policy of a model that is not the last of its agent's list: `failover_after` attempts, then the
    workflow moves the step to the next model (fewer when the agent's own spec allows fewer)."""
    attempts = min(failover_after, spec.max_attempts) if spec.max_attempts > 0 else failover_after
    return replace(model_retry(spec), maximum_attempts=attempts)


JUDGE_SPEC = RetrySpec(max_attempts=JUDGE_ATTEMPTS, max_interval_seconds=30.0, timeout_seconds=120.0)


def tool_retry(spec: ToolSpec) -> RetryPolicy:
    return _recovering(timedelta(seconds=10), spec.max_attempts)


def backoff_seconds(spec: RetrySpec, attempt: int, jitter: float) -> float:
    """Exponential backoff for attempt `attempt` (1-based), scaled by `jitter` in [0.5, 1]."""
    base = spec.initial_interval_seconds * 2 ** (attempt - 1)
    return min(spec.max_interval_seconds, base) * jitter


# --- what a failed model call means ------------------------------------------------------------

# The failures of a model call that hand the step to the agent's next model once its attempts are
# spent: a provider that is down or overloaded, answers that are not completions, and a model this
# worker cannot call (no SDK, no key: a ConfigError, at its first attempt). A rejected request (4xx)
# does not: the next model would get the same request, so the run fails at once, as without failover.
FAILOVER_ERRORS = frozenset({ModelUnavailable.__name__, MalformedAnswer.__name__, ConfigError.__name__})

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})  # and any other 5xx, such as Anthropic's 529
# A provider that answers 200 with something that is not a completion (an HTML error page from a
# proxy, a truncated body) may recover, but not often: this many attempts, then the run fails.
MALFORMED_ATTEMPTS = 3
# How much of an unusable answer an error message quotes.
QUOTE_CHARS = 200


def retry_info_delay(body: object) -> timedelta | None:
    """The delay a Google RPC error body asks for: the `retryDelay` ("7s", "0.5s") of its
    `google.rpc.RetryInfo` detail, as Gemini sends with 429 RESOURCE_EXHAUSTED; None without one."""
    error = body.get("error", body) if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                try:
                    return timedelta(seconds=max(0.0, float(delay[:-1])))
                except ValueError:
                    return None
            if isinstance(delay, dict):  # the protobuf JSON of a Duration, as some proxies send it
                return timedelta(seconds=float(delay.get("seconds", 0)) + float(delay.get("nanos", 0)) / 1e9)
    return None


def retry_after_header(headers: Any, *, now: datetime | None = None) -> timedelta | None:
    """The delay a provider's answer asks for: `retry-after-ms` or `retry-after` (seconds); else,
    when its rate-limit headers say a budget is spent, when that budget resets (OpenAI's
    `x-ratelimit-remaining-*: 0` with `x-ratelimit-reset-*` like "6m0s"; Anthropic's
    `anthropic-ratelimit-*-remaining: 0` with `anthropic-ratelimit-*-reset`, a time). The later reset
    of the spent budgets wins. `now` (Anthropic's resets are times): the activity's clock by default."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = get(name)
        if value:
            try:
                return timedelta(seconds=float(value) * scale)
            except ValueError:
                continue
    return _spent_budget_reset(get, now)


_BUDGETS = ("requests", "tokens", "input-tokens", "output-tokens")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _spent_budget_reset(get: Any, now: datetime | None) -> timedelta | None:
    waits: list[timedelta] = []
    for budget in _BUDGETS:
        if get(f"x-ratelimit-remaining-{budget}") == "0":
            text = get(f"x-ratelimit-reset-{budget}") or ""
            parts = _DURATION_PART.findall(text)
            if parts and "".join(n + u for n, u in parts) == text.strip():
                waits.append(timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)))
        if get(f"anthropic-ratelimit-{budget}-remaining") == "0":
            try:
                at = datetime.fromisoformat((get(f"anthropic-ratelimit-{budget}-reset") or "").replace("Z", "+00:00"))
            except ValueError:
                continue
            waits.append(max(at - (now or datetime.now(UTC)), timedelta(0)))
    return max(waits) if waits else None


def classify_model_failure(
    *,
    endpoint: str,
    attempt: int,
    spec: RetrySpec,
    jitter: float,
    status: int | None = None,
    message: str = "",
    retry_after: timedelta | None = None,
    timed_out: bool = False,
    unreachable: bool = False,
    malformed: str | None = None,
) -> ModelError:
    """The error a failed model call becomes, with the delay before the next attempt.

    `status`: the HTTP status of an error answer; `timed_out` / `unreachable`: no answer;
    `malformed`: the body of a 200 answer that is not a chat completion (quoted, truncated)."""
    backoff = timedelta(seconds=backoff_seconds(spec, attempt, jitter))
    if malformed is not None:
        quoted = " ".join(malformed.split())[:QUOTE_CHARS] or "an empty body"
        error: ModelError = MalformedAnswer(
            f"the model endpoint {endpoint} answered HTTP 200 with something that is not a chat completion "
            f"(attempt {attempt} of at most {MALFORMED_ATTEMPTS}): {quoted}",
            retry_after=backoff,
            details={"status": 200},
        )
        if attempt >= MALFORMED_ATTEMPTS:
            error.retryable = False  # type: ignore[misc]  # this instance only
        return error
    if status is not None:
        text = f"model endpoint {endpoint} answered HTTP {status}: {message}"
        if status not in RETRYABLE_STATUS and status < 500:
            return ModelRequestRejected(text, details={"status": status})
        return ModelUnavailable(text, retry_after=retry_after or backoff, details={"status": status})
    if timed_out:
        return ModelUnavailable(f"model call to {endpoint} timed out: {message}", retry_after=backoff)
    if unreachable:
        return ModelUnavailable(f"cannot reach the model endpoint {endpoint}: {message}", retry_after=backoff)
    return ModelUnavailable(f"model call to {endpoint} failed: {message}", retry_after=backoff)


JUDGE_RETRY = model_retry(JUDGE_SPEC)
