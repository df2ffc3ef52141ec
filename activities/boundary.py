"""What every activity shares with Temporal: the error boundary, heartbeats, the attempt number.

`@boundary` wraps an activity: a `WaypointError` leaves it as an `ApplicationError` whose type
is the error's class name, non-retryable unless the error is retryable, with its delay and
details, and marked BENIGN, so the worker logs it as one structured line (run, step, attempt,
reason) instead of a traceback. Anything else is a bug: Temporal logs its traceback and
retries it by the activity's policy, except in an activity marked `@gives_up(attempts)`, which
logs the traceback once and gives up after that many attempts (see `gives_up`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from waypoint.errors import WaypointError
from waypoint.retry import heartbeat_every
from waypoint.store.db import database_error

log = logging.getLogger("waypoint.activity")

P = ParamSpec("P")
R = TypeVar("R")


def application_error(exc: WaypointError) -> ApplicationError:
    """The one translation of a Waypoint error into Temporal's failure."""
    return ApplicationError(
        str(exc),
        *([exc.details] if exc.details else []),
        type=type(exc).__name__,
        non_retryable=not exc.retryable,
        next_retry_delay=exc.retry_after if exc.retryable else None,
        category=ApplicationErrorCategory.BENIGN,
    )


def expected_failure(exc: WaypointError, arg: Any) -> None:
    """One structured line for a failure Waypoint expects (a 429, a 400, an unknown agent)."""
    info = activity.info()
    step = getattr(arg, "step", None)
    retry = "will retry" if exc.retryable else "not retried"
    log.warning(
        "%s failed: run=%s step=%s attempt=%s error=%s (%s): %s",
        info.activity_type,
        info.workflow_id,
        step,
        info.attempt,
        type(exc).__name__,
        retry,
        exc,
        extra={
            "waypoint_run_id": info.workflow_id,
            "waypoint_step": step,
            "waypoint_attempt": info.attempt,
            "waypoint_error": type(exc).__name__,
        },
    )


def boundary(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate an activity (below `@activity.defn`) so Waypoint errors cross into Temporal as
    ApplicationErrors the retry policies understand."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except WaypointError as exc:
            expected_failure(exc, args[-1] if args else None)
            raise application_error(exc) from None

    return wrapper


def gives_up(attempts: int) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Decorate an activity (below `@boundary`) that no retry can heal once it fails for a reason
    Waypoint does not know (start_run: a bug in an agent's definition, a value Postgres refuses).
    A database failure becomes its Waypoint error (an outage retries, a refused value does not);
    anything else is logged with its traceback on the first attempt only, then as one line per
    attempt, and after `attempts` attempts it is not retried, so the run ends with the reason
    instead of failing forever."""

    def decorate(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return await fn(*args, **kwargs)
            except WaypointError:
                raise
            except Exception as exc:
                known = database_error(exc)
                if known is not None:
                    raise known from None
                info = activity.info()
                last = info.attempt >= attempts
                log.warning(
                    "%s failed unexpectedly: run=%s attempt=%s of %s error=%s (%s): %s",
                    info.activity_type,
                    info.workflow_id,
                    info.attempt,
                    attempts,
                    type(exc).__name__,
                    "not retried" if last else "will retry",
                    exc,
                    exc_info=exc if info.attempt == 1 else None,
                    extra={
                        "waypoint_run_id": info.workflow_id,
                        "waypoint_attempt": info.attempt,
                        "waypoint_error": type(exc).__name__,
                    },
                )
                raise ApplicationError(
                    f"{type(exc).__name__}: {exc} (after {info.attempt} attempt(s))" if last else str(exc),
                    type=type(exc).__name__,
                    non_retryable=last,
                    category=ApplicationErrorCategory.BENIGN,
                ) from None

        return wrapper

    return decorate


def attempt() -> int:
    """Temporal's attempt number of the running activity (1 outside one)."""
    return activity.info().attempt if activity.in_activity() else 1


# Set while a `heartbeating` block beats for the running activity: a block inside it adds no second beat.
_beating: contextvars.ContextVar[bool] = contextvars.ContextVar("waypoint_heartbeating", default=False)


@contextlib.asynccontextmanager
async def heartbeating(*details: Any, every: float | None = None) -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs: a killed worker stops heartbeating, and
    Temporal retries the attempt elsewhere after the heartbeat timeout instead of waiting out the
    whole start-to-close timeout.

    `every`: seconds between beats; by default a quarter of the activity's heartbeat timeout and at
    most one second (`retry.heartbeat_every`). The details are sent as they are at each beat, so a
    mutable one (a dict of progress) carries its latest state. A block inside another one of the same
    activity beats nothing itself: the outer beat, with its details, goes on."""
    info = activity.info()
    if info.is_local or _beating.get():  # a local activity lives in its workflow task: nothing to heartbeat
        yield
        return
    pace = every if every is not None else heartbeat_every(info.heartbeat_timeout)

    async def beat() -> None:
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(pace)

    token = _beating.set(True)
    try:
        async with alongside(beat()):
            yield
    finally:
        _beating.reset(token)


@contextlib.asynccontextmanager
async def alongside(work: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run `work` in the background while the block runs, and cancel it once the block ends."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
