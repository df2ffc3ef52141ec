"""Temporal's side of fleet flow control: a model call's slot in the shared limiter.

`call_model` asks `Capacity.take` before its call goes out. Granted, it holds the lease while the
call runs (renewed in the background, so a worker that dies gives it back within
`limit_lease_seconds`) and gives it back after, waking by signal the runs whose waits now fit.
Refused, the activity returns with the wait (`ModelTurn.wait`): the workflow waits on a timer and a
`capacity` signal, holding no activity slot and no worker thread. Only the calls next in line (the
first `in_flight` of the key's line) stand by in their activity for up to STANDBY_SECONDS, woken by
a Postgres notification, so that a slot given back is taken at once.

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
from waypoint.activities.boundary import alongside
from waypoint.agents import Agent
from waypoint.checks import DEFAULT_PRIORITY
from waypoint.config import Settings
from waypoint.errors import ModelError
from waypoint.names import Signal, WaitReason
from waypoint.store import RunStore
from waypoint.store.limits import CAPACITY_CHANNEL, CapacityAsk, Lease, stands_by
from waypoint.store.listen import Listener
from waypoint.types import CallModelInput, CapacityWait, ModelTurn

log = logging.getLogger("waypoint.limits")

THROTTLED = (429, 529)  # too many requests; Anthropic's overloaded
# A call next in line waits this long in its activity before it hands the wait to the workflow, and
# asks again at least this often meanwhile (a notification usually comes first).
STANDBY_SECONDS = 2.0
STANDBY_SLICE = 1.0  # with notifications; a worker without them asks every 0.25 s


class Capacity:
    def __init__(self, store: RunStore, settings: Settings):
        self.store = store
        self.settings = settings
        self.limits = settings.limits
        self._listener: Listener | None = None
        self._fits: dict[str, asyncio.Event] = {}  # per call standing by: set when a release says it fits

    def on(self, agent: Agent) -> bool:
        return self.limits.enabled or bool(agent.fallback_models)

    def counts_tokens(self, inp: CallModelInput, agent: Agent) -> bool:
        """Whether the call's key limits tokens a minute (so it asks once its size is known)."""
        entry = self.limits.model_key(inp.model, agent.provider_key_env)[1]
        return entry is not None and entry.tokens_per_minute is not None

    def key(self, inp: CallModelInput, agent: Agent) -> str:
        return self.limits.model_key(inp.model, agent.provider_key_env)[0]

    async def take(self, inp: CallModelInput, agent: Agent, tokens: int) -> Lease | CapacityWait:
        """The call's slot, or its wait. A run that failed over steps back first to an earlier model
        that is healthy again (a `recovered` wait names it)."""
        if inp.prefer:
            keys = {self.limits.model_key(m, agent.provider_key_env)[0]: m for m in inp.prefer}
            back = await self.store.limiter.recovered(list(keys), self.limits.breaker)
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
            attempt=activity.info().attempt,
        )
        taken = await self._ask(ask)
        if isinstance(taken, CapacityWait) and stands_by(taken, self.limits):
            taken = await self._stand_by(ask, taken)
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
            log.debug(
                "capacity wait: run=%s step=%s key=%s reason=%s position=%s retry_after=%.3g",
                inp.run_id,
                inp.step,
                taken.key,
                taken.reason,
                taken.position,
                taken.retry_after,
            )
        return taken

    async def _ask(self, ask: CapacityAsk) -> Lease | CapacityWait:
        return await self.store.limiter.acquire(
            ask, self.limits, self.settings.limit_lease_seconds, standby_seconds=STANDBY_SECONDS
        )

    async def _stand_by(self, ask: CapacityAsk, wait: CapacityWait) -> Lease | CapacityWait:
        """A call next in line stands by in its activity for up to STANDBY_SECONDS, asking again as
        soon as the release of a slot says it fits (a Postgres notification naming it), so a freed
        slot is taken in milliseconds, not after a signal, a workflow task and a new activity. It
        heartbeats meanwhile; past that, or once it is no longer next, the workflow waits."""
        listening = await self._listening()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STANDBY_SECONDS
        taken: Lease | CapacityWait = wait
        while isinstance(taken, CapacityWait) and stands_by(taken, self.limits) and loop.time() < deadline:
            pause = min(STANDBY_SLICE if listening else 0.25, taken.retry_after, deadline - loop.time())
            event = self._fits.setdefault(ask.lease_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(pause, 0.001)):  # keeps a cancel that lands as it fits
                    await event.wait()
            self._fits.pop(ask.lease_id, None)
            activity.heartbeat()
            taken = await self._ask(ask)
        return taken

    async def _listening(self) -> bool:
        """Listen for given-back slots (one connection per worker process, opened on first need)."""
        if self._listener is None:
            url = self.store.engine.url.render_as_string(hide_password=False)
            try:
                self._listener = await Listener(url, {CAPACITY_CHANNEL: self._given_back}).start()
            except Exception as exc:  # no notifications: standing by polls instead
                log.warning("no capacity notifications: %s: %s", type(exc).__name__, exc)
                return False
        return True

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None

    def _given_back(self, payload: str) -> None:
        """A release says which calls now fit: those standing by here ask again."""
        _key, _, lease_ids = payload.partition(" ")
        for lease_id in lease_ids.split(","):
            event = self._fits.get(lease_id)
            if event is not None:
                event.set()

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
                    await self.store.limiter.renew(lease, self.settings.limit_lease_seconds)
                except Exception as exc:  # Postgres away for a moment: the next beat tries again
                    log.warning("lease %s not renewed: %s: %s", lease.lease_id, type(exc).__name__, exc)

        async with alongside(renew()):
            yield

    async def give_back(self, lease: Lease, turn: ModelTurn | None) -> None:
        """Release the slot with what the call used, and wake the runs that now fit."""
        used = turn.usage.input_tokens + turn.usage.output_tokens if turn is not None else None
        woken = await self.store.limiter.release(lease, self.limits, used)
        await wake(woken)

    async def outcome(self, key: str, error: ModelError | None) -> None:
        """Put the call's outcome on its key's health; a throttle with a retry-after cools it down."""
        throttled = error is not None and error.status in THROTTLED
        if throttled:
            telemetry.metrics().throttled.add(1, {"waypoint.model_key": key})
        if error is not None and not error.retryable:
            return  # a rejected request says nothing of the provider's health
        await self.store.limiter.key_outcome(
            key, failed=error is not None, throttled=throttled, breaker=self.limits.breaker
        )
        if throttled and error is not None and error.retry_after is not None:
            seconds = error.retry_after.total_seconds()
            why = f"{error.status} from the provider: retry after {seconds:g} s"
            await self.store.limiter.cool_down(key, seconds, why)
            log.info("model key %s cooling down for %.3g s after a %s", key, seconds, error.status)


async def wake(run_ids: list[str]) -> None:
    """Signal the runs whose capacity waits now fit; a run that ended meanwhile is skipped."""
    if not run_ids:
        return
    client = activity.client()

    async def signal(run_id: str) -> None:
        with contextlib.suppress(Exception):  # ended, or not there: its timer is the backstop anyway
            await client.get_workflow_handle(run_id).signal(Signal.CAPACITY)

    await asyncio.gather(*(signal(r) for r in run_ids))
