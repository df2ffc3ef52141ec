"""A 429 names when to come back in a provider's own headers: `retry-after` first, else the reset of
the rate-limit budget its headers say is spent. That delay paces the run's retry and the shared
cooldown of its model key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from waypoint.retry import retry_after_header

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def test_retry_after_comes_first() -> None:
    headers = {"retry-after": "3", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "9s"}
    assert retry_after_header(headers, now=NOW) == timedelta(seconds=3)
    assert retry_after_header({"retry-after-ms": "250"}, now=NOW) == timedelta(milliseconds=250)


def test_openai_spent_budgets_reset_in_a_duration() -> None:
    headers = {
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1m30.5s",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "20ms",
    }
    assert retry_after_header(headers, now=NOW) == timedelta(seconds=90.5)  # the later reset wins
    # A budget not spent says nothing; a reset in a form we do not know is not guessed at.
    assert retry_after_header({"x-ratelimit-remaining-requests": "7", "x-ratelimit-reset-requests": "9s"}) is None
    assert retry_after_header({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}) is None


def test_anthropic_spent_budgets_reset_at_a_time() -> None:
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2026-12-01T12:00:12Z",
        "anthropic-ratelimit-input-tokens-remaining": "1000",
        "anthropic-ratelimit-input-tokens-reset": "2026-12-01T12:05:00Z",
    }
    assert retry_after_header(headers, now=NOW) == timedelta(seconds=12)
    passed = {"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": "2026-12-01T11:59:00Z"}
    assert retry_after_header(passed, now=NOW) == timedelta(0)
    assert retry_after_header({}, now=NOW) is None
