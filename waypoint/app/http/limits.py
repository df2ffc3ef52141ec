"""Rate limits of the HTTP API, per API key: requests a second and live streams held open.

    WAYPOINT_HTTP_REQUESTS_PER_SECOND=5   a token bucket per key: 5 a second, a burst of 10
                                          (twice the rate, at least 1)
    WAYPOINT_HTTP_OPEN_STREAMS=3          SSE streams one key may hold open at once

Over either: 429 `rate_limited` or `too_many_streams`, with `Retry-After` (whole seconds, at least
1) and a message naming the setting. A key is counted once it is authenticated (an unknown key is
a 401 and fills no bucket, so there is one bucket per valid key at most); the viewer's session
counts as the key it was made with, and with auth off (`waypoint dev`) all requests share one
bucket. The counts live in this API process, not shared: behind a balancer, N API processes let a
key through N times as fast. Unset, nothing is counted.

Every SSE route takes its slot through `auth.OpenStream` (before it starts anything, so a POST
that creates a run and streams it is refused before the run exists) and hands it to
`streams.sse_response`, whose response gives it back when the stream ends, however it ends.

What asks for no key is not limited either: /healthz, /docs, /openapi.json, the viewer's login
page and its static assets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from waypoint.app.http.problems import HttpError

Clock = Callable[[], float]
Key = int | str | None
"""Whom a limit counts: an API key's id, a signed-in user's (`user:<subject>`, single sign-on), or
None with auth off (all requests, one bucket)."""

STREAM_RETRY_SECONDS = 5  # when a stream slot frees is unknown: a live run's stream lasts as long as the run


@dataclass
class TokenBucket:
    rate: float
    burst: float
    tokens: float
    stamp: float

    def take(self, now: float) -> float:
        """Take a token: 0.0 when there was one, else the seconds until there is."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class StreamSlot:
    """One live stream of a key: `release` gives its place back (once; later calls do nothing).
    `streaming`: a response holds it now, and releases it when it ends."""

    def __init__(self, slots: dict[Key, int] | None = None, key: Key = None):
        self._slots = slots
        self._key = key
        self.streaming = False

    def release(self) -> None:
        if self._slots is None:
            return
        left = self._slots.get(self._key, 0) - 1
        if left > 0:
            self._slots[self._key] = left
        else:
            self._slots.pop(self._key, None)
        self._slots = None


class HttpLimits:
    """The API process's buckets and stream counts (one event loop: no lock needed)."""

    def __init__(self, requests_per_second: float | None, open_streams: int | None, clock: Clock = time.monotonic):
        self.rate = requests_per_second
        self.open_streams = open_streams
        self.clock = clock
        self.buckets: dict[Key, TokenBucket] = {}
        self.streams: dict[Key, int] = {}

    def spend(self, key: Key) -> None:
        """Count one request of `key`, or refuse it (429) when its bucket is empty."""
        if self.rate is None:
            return
        now = self.clock()
        bucket = self.buckets.get(key)
        if bucket is None:
            burst = max(1.0, 2 * self.rate)  # below 0.5 a second, twice the rate is not one whole request
            bucket = self.buckets[key] = TokenBucket(self.rate, burst, burst, now)
        wait = bucket.take(now)
        if wait:
            seconds = retry_seconds(wait)
            raise HttpError(
                429,
                "rate_limited",
                f"this API key is over {self.rate:g} requests a second (a burst of {bucket.burst:g}; "
                f"WAYPOINT_HTTP_REQUESTS_PER_SECOND): retry after {seconds}s",
                {"Retry-After": str(seconds)},
            )

    def open_stream(self, key: Key) -> StreamSlot:
        """A stream slot of `key`, or a refusal (429) when it holds `open_streams` already."""
        if self.open_streams is None:
            return StreamSlot()
        held = self.streams.get(key, 0)
        if held >= self.open_streams:
            raise HttpError(
                429,
                "too_many_streams",
                f"this API key holds {held} live streams open, the most it may (WAYPOINT_HTTP_OPEN_STREAMS): "
                f"close one, or retry after {STREAM_RETRY_SECONDS}s",
                {"Retry-After": str(STREAM_RETRY_SECONDS)},
            )
        self.streams[key] = held + 1
        return StreamSlot(self.streams, key)


def retry_seconds(wait: float) -> int:
    return max(1, math.ceil(wait))
