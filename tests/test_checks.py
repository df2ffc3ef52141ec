"""The rules of what the store can hold (`waypoint.checks`), at their edges."""

from __future__ import annotations

import re

import pytest

from waypoint.agents import Agent
from waypoint.checks import (
    BUDGET_MAX,
    CATCHUP_MAX_SECONDS,
    CATCHUP_MIN_SECONDS,
    INT_MAX,
    TEXT_MAX,
    check_budget,
    check_json,
    check_seconds,
    check_seq,
    check_start_time,
    check_text,
    parse_step,
    parse_when,
    spoken_duration,
)
from waypoint.errors import ConfigError, InvalidInput


def test_text_the_store_can_hold_passes_and_the_rest_names_what_to_remove():
    assert check_text("the task", "naïve \U0001f600 " + "x" * (TEXT_MAX - 8)) is not None  # astral: fine
    assert check_text("the reason", None) is None
    for bad, why in (("a\x00b", "NUL character (U+0000) at position 1"), ("\udb0c_", "lone surrogate (U+DB0C)")):
        with pytest.raises(InvalidInput, match=re.escape(f"the task has a {why}")):
            check_text("the task", bad)
    with pytest.raises(InvalidInput, match=f"keep it to {TEXT_MAX}"):
        check_text("the task", "x" * (TEXT_MAX + 1))
    with pytest.raises(InvalidInput, match="NUL"):
        check_json("the metadata", {"tags": ["ok", {"k": "v\x00"}]})
    with pytest.raises(InvalidInput, match="finite"):
        check_json("the metadata", {"score": float("nan")})


def test_numbers_stay_within_their_column_or_timer():
    assert check_seq("after_seq", INT_MAX) == INT_MAX and parse_step(str(INT_MAX)) == INT_MAX
    for bad in (lambda: check_seq("after_seq", INT_MAX + 1), lambda: parse_step("3000000000")):
        with pytest.raises(InvalidInput, match=str(INT_MAX)):
            bad()
    check_budget(dict(BUDGET_MAX))  # every limit at its maximum passes
    for key, value in [*((k, v + 1) for k, v in BUDGET_MAX.items()), ("deadline_seconds", float("inf"))]:
        with pytest.raises(InvalidInput, match="must be positive and at most"):
            check_budget({key: value})
    with pytest.raises(InvalidInput, match="max steps must be a whole number"):
        check_budget({"max_steps": 2.5})
    with pytest.raises(InvalidInput, match="thousand years"):
        parse_when("since", "99999999999w")
    with pytest.raises(ConfigError, match="agent 'big': deadline seconds must be positive and at most"):
        Agent(name="big", instructions="Wait.", deadline_seconds=1e12)  # an agent's own budget: when it registers


def test_lengths_of_time_in_error_texts_read_as_people_write_them():
    assert spoken_duration(CATCHUP_MAX_SECONDS) == "1 year"  # was "3.16224e+07 seconds"
    assert [spoken_duration(s) for s in (0.5, 1, 90, 3600, 86400 * 2, 10)] == [
        "0.5 seconds",
        "1 second",
        "1.5 minutes",
        "1 hour",
        "2 days",
        "10 seconds",
    ]
    with pytest.raises(InvalidInput) as caught:
        check_seconds("the catch-up window", 10**9, CATCHUP_MIN_SECONDS, CATCHUP_MAX_SECONDS)
    assert str(caught.value) == "the catch-up window must be from 10 seconds to 1 year, got 1000000000"
    with pytest.raises(InvalidInput, match="the delay 2 years is more than a year"):
        check_start_time(None, 2 * 365 * 86400)
