"""The fake OpenAI server's capacity mode (waypoint/testing/capacity.py): calls beyond its calls in
flight or its requests a minute get OpenAI's 429 with a `retry-after` Waypoint reads, and it counts
what it served and refused."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import timedelta

import openai
import pytest

from waypoint.retry import retry_after_header
from waypoint.testing.capacity import Capacity
from waypoint.testing.fake_openai import FakeOpenAI, Turn, main

pytestmark = pytest.mark.timeout(60)
MESSAGES = [{"role": "user", "content": "hi"}]


def always_hi(body: dict, n: int) -> Turn:
    return Turn(content=f"hi {n}")


@contextlib.contextmanager
def serve(capacity: Capacity) -> Iterator[tuple[FakeOpenAI, openai.OpenAI]]:
    fake = FakeOpenAI(always_hi, capacity=capacity).start()
    try:
        yield fake, openai.OpenAI(base_url=fake.base_url, api_key="fake", max_retries=0)
    finally:
        fake.stop()


def refusal(sdk: openai.OpenAI) -> openai.RateLimitError:
    with pytest.raises(openai.RateLimitError) as caught:
        sdk.chat.completions.create(model="fake-model", messages=MESSAGES)  # type: ignore[arg-type]
    return caught.value


def test_a_call_beyond_the_calls_in_flight_waits_for_the_first_to_end():
    with serve(Capacity(in_flight=1, latency=2.0)) as (fake, sdk):
        call = sdk.chat.completions.create
        first = threading.Thread(target=lambda: call(model="fake-model", messages=MESSAGES))  # type: ignore[arg-type]
        first.start()
        while fake.gate.in_flight() < 1 and first.is_alive():
            threading.Event().wait(0.01)
        refused = refusal(sdk)
        first.join()
        after = sdk.chat.completions.create(model="fake-model", messages=MESSAGES)  # type: ignore[arg-type]

        # The slot frees when the 2 s call ends: retry-after counts down to it, in whole seconds.
        assert refused.response.headers["retry-after"] in {"1", "2"}
        assert retry_after_header(refused.response.headers) in {timedelta(seconds=s) for s in (1, 2)}
        assert refused.code == "rate_limit_exceeded" and refused.type == "requests"
        assert "1 requests in flight, limit 1" in refused.message
        assert after.choices[0].message.content == "hi 2"  # the refused call never reached the responder
        assert (fake.served, fake.refused, fake.gate.peak_in_flight) == (2, 1, 1)
        assert len(fake.served_at) == 2 and fake.served_at[0] <= fake.served_at[1]
        assert len(fake.seen) == 2


def test_a_call_beyond_the_requests_a_minute_waits_for_the_oldest_to_age_out():
    with serve(Capacity(per_minute=3)) as (fake, sdk):
        answers = [sdk.chat.completions.create(model="fake-model", messages=MESSAGES) for _ in range(3)]  # type: ignore[arg-type]
        refused = refusal(sdk)
        again = refusal(sdk)

        assert [a.choices[0].message.content for a in answers] == ["hi 1", "hi 2", "hi 3"]
        # The first of the three leaves the window 60 s after it came in.
        assert 50 <= int(refused.response.headers["retry-after"]) <= 60
        assert "3 requests in the last minute, limit 3" in again.message
        assert (fake.served, fake.refused) == (3, 2)


def test_embeddings_and_a_fake_without_capacity_are_never_refused():
    with serve(Capacity()) as (fake, sdk):
        for _ in range(5):
            sdk.chat.completions.create(model="fake-model", messages=MESSAGES)  # type: ignore[arg-type]
        assert (fake.served, fake.refused) == (5, 0)
    with serve(Capacity(in_flight=1, per_minute=1)) as (fake, sdk):
        sdk.chat.completions.create(model="fake-model", messages=MESSAGES)  # type: ignore[arg-type]
        sdk.embeddings.create(model="fake-embed", input=["a", "b"])
        assert (fake.served, fake.refused, len(fake.embedding_requests)) == (1, 0, 1)


def test_capacity_rates_and_bad_values():
    assert Capacity(in_flight=4, per_minute=600, latency=0.5).per_second == 8.0
    assert Capacity(in_flight=4, per_minute=120, latency=0.5).per_second == 2.0
    with pytest.raises(ValueError, match="at least 1"):
        Capacity(in_flight=0)


def test_the_command_line_refuses_a_bad_capacity_in_one_line(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--port", "0", "--in-flight", "0"])
    assert ended.value.code == 1
    assert capsys.readouterr().err.strip().startswith("error: a capacity's in_flight")


def test_a_burst_answers_every_chat_call_with_its_status_until_it_ends() -> None:
    fake = FakeOpenAI(always_hi).start()
    sdk = openai.OpenAI(base_url=fake.base_url, api_key="fake", max_retries=0)
    try:
        fake.burst(429, 30.0, retry_after=2)
        refused = refusal(sdk)
        assert retry_after_header(refused.response.headers) == timedelta(seconds=2)
        fake.burst(503, 30.0)  # a later burst replaces the first
        with pytest.raises(openai.InternalServerError) as caught:
            sdk.chat.completions.create(model="fake-model", messages=MESSAGES)  # type: ignore[arg-type]
        assert caught.value.status_code == 503 and "retry-after" not in caught.value.response.headers
        fake.burst(503, 0.0)  # over at once
        answer = sdk.chat.completions.create(model="fake-model", messages=MESSAGES)  # type: ignore[arg-type]
        # The burst's answers never reached the responder: the first call it saw is this one.
        assert answer.choices[0].message.content == "hi 1"
        assert fake.burst_answers == {429: 1, 503: 1} and len(fake.seen) == 1
    finally:
        fake.stop()
