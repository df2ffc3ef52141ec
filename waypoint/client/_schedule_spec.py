"""A scheduled agent's spec (when it fires, what each fired run gets), every part checked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from waypoint.checks import (
    CATCHUP_MAX_SECONDS,
    CATCHUP_MIN_SECONDS,
    EVERY_MAX_SECONDS,
    EVERY_MIN_SECONDS,
    JITTER_MAX_SECONDS,
    check_budget,
    check_choice,
    check_cron,
    check_name,
    check_priority,
    check_seconds,
    check_time_zone,
    spoken_duration,
)
from waypoint.client._webhooks import Webhooks
from waypoint.errors import InvalidInput
from waypoint.names import ScheduleOverlap


def schedule_spec(
    webhooks: Webhooks,
    *,
    every: float | None,
    cron: str | None,
    tz: str,
    overlap: str,
    catchup_seconds: float,
    jitter_seconds: float,
    end_at: datetime | None,
    model: str | None,
    max_steps: int | None,
    priority: int | None,
    webhook: str | None,
) -> dict[str, Any]:
    """The schedule's spec, every part checked (InvalidInput naming the rule it breaks)."""
    if (every is None) == (cron is None):
        raise InvalidInput("give a schedule exactly one of every (seconds between runs) or cron (an expression)")
    if every is not None:
        check_seconds("every", every, EVERY_MIN_SECONDS, EVERY_MAX_SECONDS)
        if tz != "UTC":
            raise InvalidInput("a time zone applies to a cron expression: give cron with tz, or every without it")
    else:
        check_cron(cron or "")
    check_time_zone(tz)
    check_choice("overlap policy", overlap, ScheduleOverlap)
    check_seconds("the catch-up window", catchup_seconds, CATCHUP_MIN_SECONDS, CATCHUP_MAX_SECONDS)
    check_seconds("the jitter", jitter_seconds, 0, JITTER_MAX_SECONDS)
    if every is not None and jitter_seconds >= every:
        raise InvalidInput(
            f"the jitter ({spoken_duration(jitter_seconds)}) must be shorter than every ({spoken_duration(every)})"
        )
    if end_at is not None:
        if end_at.tzinfo is None:
            end_at = end_at.replace(tzinfo=UTC)
        if end_at <= datetime.now(UTC):
            raise InvalidInput(f"the end {end_at.isoformat()} is in the past: give a time ahead, or none")
    check_name("the model", model)
    check_budget({"max_steps": max_steps})
    check_priority(priority)
    webhooks.check_url(webhook)  # as the settings allow it
    return {
        "every": float(every) if every is not None else None,
        "cron": cron.strip() if cron is not None else None,
        "tz": tz,
        "overlap": str(ScheduleOverlap(overlap)),
        "catchup": float(catchup_seconds),
        "jitter": float(jitter_seconds),
        "end_at": end_at.astimezone(UTC).isoformat() if end_at is not None else None,
        "model": model,
        "max_steps": max_steps,
        "priority": priority,
        "webhook": webhook,
    }
