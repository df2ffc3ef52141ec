"""A model call that waits for capacity waits here, in the workflow.

The shared limiter (waypoint/store/limits.py) answers a call it cannot grant at once with a
`CapacityWait` instead of a model turn; the activity returns at once. The run shows
`waiting_capacity` (with the key it waits for), and waits on a timer of the wait's `retry_after`
or a `capacity` signal, which the worker that frees a slot sends to the waiters that now fit;
then it asks again. A wait holds no activity slot and no worker thread, and costs the same few
history events however long it lasts: one timer and one signal, not a poll per second.

Two answers are not waits: an open circuit breaker on a model the agent can fail over from, and a
model the run failed over from that is healthy again. `CapacityRedirect` hands them to the
failover (workflows/failover.py), which moves the step to the next model, or back.

Runs from before waited in no line (the limiter did not exist), so they never see a wait; the
`capacity-wait-1` marker is written when a run first does.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.names import RunStatus, Signal, WaitReason
    from waypoint.types import CapacityWait


class CapacityRedirect(Exception):
    """Not a wait: the step's call goes to another model of the agent's plan (see failover.py)."""

    def __init__(self, wait: CapacityWait):
        super().__init__(f"{wait.reason}: {wait.key}")
        self.wait = wait


class CapacityWaits:
    """AgentRunWorkflow's waits for capacity; the workflow provides what is declared here."""

    _status: str
    _last_action: str | None
    _capacity_signals = 0  # `capacity` signals so far (set on the instance by the first one)

    @workflow.signal(name=Signal.CAPACITY)
    def _capacity_freed(self) -> None:
        self._capacity_signals += 1

    async def _set_status(self, status: RunStatus, detail: str | None = None) -> None:
        raise NotImplementedError

    async def _wait(self, condition: Callable[[], bool], timeout: float | None = None) -> None:
        raise NotImplementedError

    async def _wait_for_capacity(self, wait: CapacityWait, signals_seen: int, *, redirect: bool) -> None:
        """Wait as the limiter said (or pass a redirect up). `signals_seen`: the count of `capacity`
        signals before the call was made, so a signal that came with its answer is not missed."""
        if wait.reason == WaitReason.RECOVERED or (redirect and wait.reason == WaitReason.BREAKER):
            raise CapacityRedirect(wait)
        self._last_action = f"waiting for capacity: {wait.key} ({wait.reason}, #{wait.position} in line)"
        if self._status != RunStatus.WAITING_CAPACITY:
            await self._set_status(RunStatus.WAITING_CAPACITY, wait.key)
        await self._wait(lambda: self._capacity_signals > signals_seen, timeout=max(wait.retry_after, 0.001))
