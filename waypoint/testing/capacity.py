"""A provider's capacity, as the fakes play it: at most `in_flight` chat calls at once and
`per_minute` calls in any sliding 60 seconds; a call beyond either is refused with HTTP 429 and a
`retry-after` (whole seconds until a slot frees, at least 1), as OpenAI does when a key is over
its limits. `latency` is how long every served call takes, so `in_flight / latency` calls a
second is the most the fake serves.

    fake = FakeOpenAI(responder, capacity=Capacity(in_flight=4, per_minute=600, latency=0.5))
    ...
    fake.served, fake.refused, fake.served_at   # counts, and when each served call was let in

The gate counts every chat call either way, so a benchmark reads throughput over time from
`served_at` (time.monotonic() of each admission) and the share of 429s from the two counts.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class Capacity:
    in_flight: int | None = None  # calls at once (None: no limit)
    per_minute: int | None = None  # calls admitted in any sliding 60 s (None: no limit)
    latency: float = 0.0  # seconds each served call takes before its answer

    def __post_init__(self) -> None:
        if (self.in_flight is not None and self.in_flight < 1) or (self.per_minute is not None and self.per_minute < 1):
            raise ValueError("a capacity's in_flight and per_minute are at least 1 (or None: no limit)")
        if self.latency < 0:
            raise ValueError("a capacity's latency is 0 or more seconds")

    @property
    def per_second(self) -> float:
        """The most calls a second this capacity serves, held up long enough (inf: no limit)."""
        rates = []
        if self.per_minute is not None:
            rates.append(self.per_minute / WINDOW_SECONDS)
        if self.in_flight is not None and self.latency > 0:
            rates.append(self.in_flight / self.latency)
        return min(rates, default=math.inf)


def rate_limited(retry_after: int, why: str) -> dict[str, Any]:
    """OpenAI's 429 body (`type` names the limit, as OpenAI's does: `requests`)."""
    message = f"Rate limit reached: {why}. Please try again in {retry_after}s."
    return {"error": {"message": message, "type": "requests", "param": None, "code": "rate_limit_exceeded"}}


class Gate:
    """Admits chat calls within a `Capacity` and counts them. `admit()` before a call: None when it
    may go on (then `release(ticket)` once it is answered), else (retry-after seconds, why)."""

    def __init__(self, capacity: Capacity | None = None) -> None:
        self.capacity = capacity or Capacity()
        self.served = 0
        self.refused = 0
        self.served_at: list[float] = []  # time.monotonic() of each admitted call, in order
        self.peak_in_flight = 0
        self._running: dict[int, float] = {}  # ticket -> admitted at
        self._window: deque[float] = deque()  # admissions in the last WINDOW_SECONDS
        self._tickets = 0
        self._lock = threading.Lock()

    def admit(self) -> tuple[int | None, tuple[int, str] | None]:
        """(ticket, None) for an admitted call, (None, (retry-after, why)) for a refused one."""
        cap = self.capacity
        with self._lock:
            now = time.monotonic()
            while self._window and self._window[0] <= now - WINDOW_SECONDS:
                self._window.popleft()
            waits: list[float] = []
            reasons: list[str] = []
            if cap.in_flight is not None and len(self._running) >= cap.in_flight:
                # With a fixed latency the first slot frees when the oldest call ends; without one, soon.
                oldest = min(self._running.values())
                waits.append(oldest + cap.latency - now if cap.latency else 0.0)
                reasons.append(f"{len(self._running)} requests in flight, limit {cap.in_flight}")
            if cap.per_minute is not None and len(self._window) >= cap.per_minute:
                waits.append(self._window[-cap.per_minute] + WINDOW_SECONDS - now)
                reasons.append(f"{len(self._window)} requests in the last minute, limit {cap.per_minute}")
            if waits:
                self.refused += 1
                return None, (max(1, math.ceil(max(waits))), "; ".join(reasons))
            self._tickets += 1
            self._running[self._tickets] = now
            self._window.append(now)
            self.served += 1
            self.served_at.append(now)
            self.peak_in_flight = max(self.peak_in_flight, len(self._running))
            return self._tickets, None

    def release(self, ticket: int) -> None:
        with self._lock:
            self._running.pop(ticket, None)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._running)
