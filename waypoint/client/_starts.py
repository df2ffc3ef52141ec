"""Starting a run: checked once, claimed under an idempotency key, traced, handed to Temporal. Every
start (a new run, a fork, a rerun, a thread's next turn) ends in `Starts.launch`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from waypoint.access import Action
from waypoint.checks import (
    check_budget,
    check_count,
    check_idempotency_key,
    check_instructions,
    check_name,
    check_priority,
    check_start_time,
    check_text,
)
from waypoint.checks import new_run_id as make_run_id
from waypoint.client._catalog import Catalog
from waypoint.client._runs import Runs
from waypoint.client._scope import Scope, TemporalLink, run_target
from waypoint.client._webhooks import Webhooks
from waypoint.errors import Conflict, InvalidInput
from waypoint.store import RunStore
from waypoint.types import Budget, RunInput


@dataclass(frozen=True)
class Claim:
    """What an idempotency key answers a start: the run, and whether this start is the one to start it."""

    run_id: str
    created: bool


class StartedRun(str):
    """The run id a start answers (a str); `repeat` is True when an idempotency key answered an
    earlier start's run and nothing started (HTTP answers such a repeat 200, a new run 201)."""

    repeat: bool

    def __new__(cls, run_id: str, *, repeat: bool = False) -> StartedRun:
        started = super().__new__(cls, run_id)
        started.repeat = repeat
        return started


def assistant_fields(assistant: tuple[str, int] | None) -> dict[str, Any]:
    """RunInput's assistant fields: the (id, version) a run runs, checked; none for a plain run."""
    if assistant is None:
        return {}
    assistant_id, version = assistant
    return {
        "assistant_id": check_name("the assistant id", assistant_id),
        "assistant_version": check_count("the assistant version", version, high=2**31 - 1),
    }


def request_hash(request: Mapping[str, Any]) -> str:
    """The hash of a start's parameters (canonical JSON): a repeat of the key must send the same."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Starts:
    def __init__(
        self, store: RunStore, temporal: TemporalLink, scope: Scope, catalog: Catalog, webhooks: Webhooks, runs: Runs
    ):
        self._store = store
        self._temporal = temporal
        self._scope = scope
        self._catalog = catalog
        self._webhooks = webhooks
        self._runs = runs
        self._trace_ids: dict[str, str] = {}

    async def start_run(
        self,
        task: str,
        *,
        agent: str = "demo",
        tenant_id: str | None = None,
        model: str | None = None,
        max_steps: int | None = None,
        budget: Budget | None = None,
        run_id: str | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        start_at: datetime | float | None = None,
        after_seconds: float | None = None,
        after_run: str | None = None,
        webhook: str | None = None,
        instructions: str | None = None,
        assistant: tuple[str, int] | None = None,
    ) -> StartedRun:
        """Start a run and return its id (the Temporal workflow id, a `StartedRun`; `run_id` to choose
        it: one that exists already is a Conflict). `priority` 1 (first) to 5 (last), default 3: when workers are
        busy, Temporal hands them the tasks of higher-priority runs first (its sub-agent runs' too), and
        shares each priority between tenants by their weight in the limits file. With an
        `idempotency_key`, every repeat within `idempotency_retention_seconds` returns the first
        start's run without starting another (its `repeat` is True; the same key with other
        parameters is a Conflict).

        A delayed run (`start_at`: a datetime, UTC unless it has an offset, or epoch seconds; or
        `after_seconds`) exists at once with status `scheduled` and starts then (a durable timer:
        no worker needs to be up meanwhile); `after_run`: it is `queued` until that run ends, then
        goes on from that run's last step (a fork). Either can be cancelled before it starts.

        `webhook`: an http(s) URL that gets one signed POST of the run's final state when it ends
        (`waypoint.webhooks.verify` checks it in a receiver; `webhook_attempts` lists the attempts).

        `instructions`: the system prompt in place of the agent's own; `assistant`: the (assistant id,
        version) it runs, recorded on its row (the Agent Protocol passes it)."""
        async with self._scope.act(Action.START, tenant_id, run_target(run_id)) as tenant_id:
            if not check_text("the task", task).strip():
                raise InvalidInput("the task is empty: say what the agent should do")
            check_name("the agent", agent)
            check_name("the model", model)
            budget = budget or Budget()
            if max_steps is not None:
                budget = replace(budget, max_steps=max_steps)
            check_budget(asdict(budget))
            settings = self._scope.settings
            inp = RunInput(
                agent=agent,
                task=task,
                tenant_id=self._scope.scoped(tenant_id, run_id),
                model=model or settings.model,
                budget=budget,
                pin_model=bool(model or settings.model),
                priority=check_priority(priority),
                start_at=check_start_time(start_at, after_seconds),
                after_run=check_name("the run to wait for", after_run),
                webhook=self._webhooks.check_url(webhook),
                instructions=check_instructions(instructions),
                **assistant_fields(assistant),
            )
            check_idempotency_key(idempotency_key)
            await self._catalog.check_start(inp.agent, inp.model)
            if after_run is not None:
                await self._scope.check_tenant(after_run, inp.tenant_id)
            return await self.launch(run_id, inp, idempotency_key)

    async def launch(self, chosen: str | None, inp: RunInput, idempotency_key: str | None = None) -> StartedRun:
        """Start the run (under `chosen`, a caller's run id, else a new one) once it is checked; with
        an idempotency key, only if the key claims it, else answer the key's run."""
        # The request a key stands for: the whole input (a field added later is in it too) and the id asked for.
        request = {"input": asdict(inp), "run_id": chosen}
        claimed = self.idempotent(idempotency_key, request, run_id=chosen or make_run_id(), tenant_id=inp.tenant_id)
        async with claimed as claim:
            if claim.created:
                if chosen is not None:
                    await self.check_new_run_id(chosen, tenant_id=inp.tenant_id)
                gateway = await self._temporal()
                with self._traced(gateway.traced, claim.run_id, inp):
                    await gateway.start_run(claim.run_id, inp)
        return StartedRun(claim.run_id, repeat=not claim.created)

    @contextlib.asynccontextmanager
    async def idempotent(
        self, key: str | None, request: Mapping[str, Any], *, run_id: str, tenant_id: str | None = None
    ) -> AsyncIterator[Claim]:
        """Claim idempotency `key` for a start of `run_id` with these parameters (`request`, hashed):
        `created` says whether to start it; if not, the key's run answers (started by an earlier
        call). A failure inside gives the claim back, so a retry with the key can start the run. The
        same key with another `request` within the retention window is a Conflict naming its run.
        No key: every start is new.

            async with wp.idempotent(key, params, run_id=new_id) as claim:
                if claim.created:
                    ...  # start claim.run_id
        """
        if key is None:
            yield Claim(run_id, True)
            return
        check_idempotency_key(key)
        tenant = self._scope.scoped(tenant_id, run_id)
        found, created = await self._store.idempotency.claim_key(
            tenant, key, run_id, request_hash(request), self._scope.settings.idempotency_retention_seconds
        )
        if not created:
            yield Claim(found, False)
            return
        try:
            yield Claim(found, True)
        except BaseException:
            # Shielded: a start cancelled mid-way (its caller went away) still gives the key back.
            await asyncio.shield(self._store.idempotency.release_key(tenant, key, found))
            raise

    async def check_new_run_id(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """A Conflict when a run has this id already: its row is checked here (it outlives the
        workflow's history in Temporal), Temporal refuses a workflow id it holds when the run starts."""
        tenant = self._scope.scoped(tenant_id, run_id)
        owner = await self._store.idempotency.tenant_of_run(run_id)
        if owner == tenant:
            row = await self._store.get_run(tenant, run_id)
            raise Conflict(f"run {run_id} already exists ({row.status}): choose another run id, or leave it out")
        if owner is not None:  # another tenant's: taken all the same (one workflow id), nothing more said
            raise Conflict(f"run {run_id} already exists: choose another run id, or leave it out")

    @contextlib.contextmanager
    def _traced(self, traced: bool, run_id: str, inp: RunInput) -> Iterator[None]:
        """The root span of the run's trace, when this client propagates traces to the worker."""
        if not traced:
            yield
            return
        from waypoint import telemetry  # only starts need it: reads stay fast

        with telemetry.span("start_run", run_id=run_id, tenant=inp.tenant_id, agent=inp.agent) as root:
            self._trace_ids[run_id] = telemetry.trace_id(root) or ""
            yield

    def started_trace(self, run_id: str) -> str | None:
        """The trace id of a run this client started, known at once (the row has it a moment later)."""
        return self._trace_ids.get(run_id) or None

    async def trace_id(self, run_id: str, *, tenant_id: str | None = None) -> str | None:
        """The run's trace id: known at start when this client traced it, else stored on the run row."""
        await self._scope.check_tenant(run_id, tenant_id)
        if self._trace_ids.get(run_id):
            return self._trace_ids[run_id]
        return (await self._runs.run(run_id, tenant_id=tenant_id)).trace_id
