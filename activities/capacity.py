"""Temporal's side of fleet flow control: a model call's slot in the shared limiter.

`call_model` asks `Capacity.take` before its call goes out. Granted, it holds the lease while the
call runs (renewed in the background, so a worker that dies gives it back within
`limit_lease_seconds`) and gives it back after, waking by signal the runs whose waits now fit.
Refused, the activity returns at once with the wait (`ModelTurn.wait`): the workflow waits on a
timer and a `capacity` signal, holding no activity slot and no worker thread.

Each call's outcome also goes on its key's health: a 429 or 529 with a retry-after pauses every
call on the key (a shared cooldown); retryable failures in a row open its circuit breaker. Flow
control is on for every call when a limits file is set, and for the calls of agents with fallback
models (whose failover reads the breaker, and steps back to a model that recovered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from opentelemetry import trace
from temporalio import activity

from waypoint import telemetry
from waypoint.agents import Agent
from waypoint.checks import DEFAULT_PRIORITY
from waypoint.config import Settings
from waypoint.errors import ModelError
from waypoint.names import Signal, WaitReason
from waypoint.store import RunStore
from waypoint.store.limits import CapacityAsk, Lease
from waypoint.types import CallModelInput, CapacityWait, ModelTurn

log = logging.getLogger("waypoint.limits")

THROTTLED = (429, 529)  # too many requests; Anthropic's overloaded


class Capacity:
    def __init__(self, store: RunStore, settings: Settings):
        self.store = store
        self.settings = settings
        self.limits = settings.limits

    def on(self, agent: Agent) -> bool:
        return self.limits.enabled or bool(agent.fallback_models)

    def key(self, inp: CallModelInput, agent: Agent) -> str:
        return self.limits.model_key(inp.model, agent.provider_key_env)[0]

    async def take(self, inp: CallModelInput, agent: Agent, tokens: int) -> Lease | CapacityWait:
        """The call's slot, or its wait. A run that failed over steps back first to an earlier model
        that is healthy again (a `recovered` wait names it)."""
        if inp.prefer:
            keys = {self.limits.model_key(m, agent.provider_key_env)[0]: m for m in inp.prefer}
            back = await self.store.recovered(list(keys), self.limits.breaker)
            if back is not None:
                return CapacityWait(key=keys[back], reason=WaitReason.RECOVERED, position=0, retry_after=0.0)
        ask = CapacityAsk(
            run_id=inp.run_id,
            step=inp.step,
            tenant_id=inp.tenant_id,
            model_key=self.key(inp, agent),
            priority=inp.priority or DEFAULT_PRIORITY,
            tokens=tokens,
            breaker=inp.can_fail_over,
        )
        taken = await self.store.acquire(ask, self.limits, self.settings.limit_lease_seconds)
        if isinstance(taken, CapacityWait):
            found = telemetry.metrics()
            found.capacity_waits.add(1, {"waypoint.model_key": taken.key, "waypoint.wait_reason": taken.reason})
            found.capacity_waiting.set(taken.position, {"waypoint.model_key": taken.key})
            # The run's trace shows the wait on this attempt's activity span.
            trace.get_current_span().add_event(
                "waypoint.capacity_wait",
                {
                    "waypoint.model_key": taken.key,
                    "waypoint.wait_reason": str(taken.reason),
                    "waypoint.wait_position": taken.position,
                    "waypoint.retry_after_s": taken.retry_after,
                },
            )
            log.info(
                "capacity wait: run=%s step=%s key=%s reason=%s position=%s retry_after=%.3g",
                inp.run_id,
                inp.step,
                taken.key,
                taken.reason,
                taken.position,
                taken.retry_after,
            )
        return taken

    @contextlib.asynccontextmanager
    async def holding(self, lease: Lease) -> AsyncIterator[None]:
        """Renew the lease while the call runs; a renewal that fails is retried at the next beat
        (the lease outlives two missed beats)."""
        if lease.key is None:
            yield
            return
        every = self.settings.limit_lease_seconds / 3

        async def renew() -> None:
            while True:
                await asyncio.sleep(every)
                try:
                    await self.store.renew(lease, self.settings.limit_lease_seconds)
                except Exception as exc:  # Postgres away for a moment: the next beat tries again
                    log.warning("lease %s not renewed: %s: %s", lease.lease_id, type(exc).__name__, exc)

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def give_back(self, lease: Lease, turn: ModelTurn | None) -> None:
        """Release the slot with what the call used, and wake the runs that now fit."""
        used = turn.usage.input_tokens + turn.usage.output_tokens if turn is not None else None
        woken = await self.store.release(lease, self.limits, used)
        await wake(woken)

    async def outcome(self, key: str, error: ModelError | None) -> None:
        """Put the call's outcome on its key's health; a throttle with a retry-after cools it down."""
        throttled = error is not None and error.status in THROTTLED
        if throttled:
            telemetry.metrics().throttled.add(1, {"waypoint.model_key": key})
        if error is not None and not error.retryable:
            return  # a rejected request says nothing of the provider's health
        await self.store.key_outcome(key, failed=error is not None, throttled=throttled, breaker=self.limits.breaker)
        if throttled and error is not None and error.retry_after is not None:
            seconds = error.retry_after.total_seconds()
            await self.store.cool_down(key, seconds, f"{error.status} from the provider: retry after {seconds:g} s")
            log.info("model key %s cooling down for %.3g s after a %s", key, seconds, error.status)


async def wake(run_ids: list[str]) -> None:
    """Signal the runs whose capacity waits now fit; a run that ended meanwhile is skipped."""
    if not run_ids:
        return
    client = activity.client()
    for run_id in run_ids:
        with contextlib.suppress(Exception):  # ended, or not there: its timer is the backstop anyway
            await client.get_workflow_handle(run_id).signal(Signal.CAPACITY)
