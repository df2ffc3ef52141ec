"""The Python API: start runs on Temporal, read them from Postgres. Every value it returns is typed.

    async with await Waypoint.connect(Settings()) as wp:
        run_id = await wp.start_run("Summarize the notes", agent="demo")
        result = await wp.result(run_id)
        for line in await wp.timeline(run_id):
            print(line.step, line.action, line.tools)

Reads go to Postgres through `waypoint.store.RunStore` (the same calls the HTTP API makes);
starting, messaging and replaying runs go to Temporal (`waypoint.app.temporal`, connected on
first use). Every method takes `tenant_id`, default the configured tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.app.client_assistants import Assistants
from waypoint.app.client_evals import Evals
from waypoint.app.client_keys import Keys
from waypoint.app.client_limits import FleetLimits, FleetStats
from waypoint.app.client_schedules import Schedules
from waypoint.app.client_threads import Threads
from waypoint.app.client_webhooks import Webhooks
from waypoint.app.deploy import FINISHED_DEFAULT, FINISHED_MAX, DeployCheck
from waypoint.checks import (
    NAME_MAX,
    check_budget,
    check_choice,
    check_count,
    check_deployment_version,
    check_edited_input,
    check_fingerprint,
    check_idempotency_key,
    check_instructions,
    check_name,
    check_priority,
    check_seq,
    check_start_time,
    check_tenant,
    check_text,
    check_webhook,
    parse_selection,
    parse_when,
)
from waypoint.checks import new_run_id as make_run_id
from waypoint.compaction_types import CompactionReport
from waypoint.config import Settings
from waypoint.errors import ConfigError, Conflict, InvalidInput, Mismatch, NotFound, Unavailable, WaypointError
from waypoint.models.spec import KEY_VARIABLES, Provider, check_extra, parse_model_spec
from waypoint.names import (
    FINISHED,
    STARTING,
    EventKind,
    LineageKind,
    MemoryOp,
    MemoryView,
    RunSort,
    RunStatus,
    ToolMode,
    Update,
)
from waypoint.store import RunStore
from waypoint.store.base import not_found
from waypoint.store.budget import BudgetView
from waypoint.store.db import engine_for
from waypoint.store.ledger import Effect
from waypoint.store.listen import Handler, Listener
from waypoint.store.reads import RunsPage
from waypoint.store.rows import (
    AssistantRow,
    BatchItem,
    BatchReport,
    CompactionRow,
    EventRow,
    LineageLink,
    RunComparison,
    RunRow,
    ScheduleRow,
    StateDiff,
    StepLine,
    StepState,
    ThreadRow,
    ThreadRun,
    Verdict,
    WebhookAttempt,
    WebhookDelivery,
    WebhookSecret,
    as_json,
)
from waypoint.store.streams import DELTAS_CHANNEL, EVENTS_CHANNEL
from waypoint.store.trees import RunTree, tree_totals
from waypoint.store.webhooks import delivery_summary
from waypoint.types import (
    AgentInfo,
    Budget,
    Decision,
    ForkOrigin,
    M,
    Memory,
    MemoryRequest,
    PendingApproval,
    RunInput,
    RunProgress,
    RunResult,
)
from waypoint.versions import AgentVersion
from waypoint.waterfall import Waterfall
from waypoint.waterfall import derive as derive_waterfall

if TYPE_CHECKING:
    from temporalio.client import Client

    from waypoint.app.invariants import VerifyAllReport
    from waypoint.app.schedule import ScheduleInfo
    from waypoint.app.temporal import TemporalGateway


def database_url(settings: Settings) -> str:
    """The configured database, else the one of the embedded stack running in the state folder."""
    from waypoint.app.embedded import running_stack

    if settings.database_url:
        return settings.database_url
    stack = running_stack(Path(settings.state_dir))
    if stack is None or not stack.database_url:
        # Named whole: a process started elsewhere (an MCP client starts `waypoint mcp` in its own
        # folder, with a minimal environment) looks for a relative state folder there.
        raise ConfigError(
            f"no database: no `waypoint dev` runs in the state folder {Path(settings.state_dir).resolve()}: "
            "start it, set WAYPOINT_STATE_DIR to the absolute path of the folder where it runs, "
            "or set WAYPOINT_DATABASE_URL"
        )
    return stack.database_url


# A runs page asks Temporal whether each unfinished run is stuck: at most this many calls at a time,
# however long the page (a listing of 500 live runs must not open 500 calls at once).
STUCK_CHECKS_AT_ONCE = 16


@dataclass(frozen=True)
class ReplayOutcome:
    execution: str  # Temporal's run id of one execution (continue-as-new makes several)
    error: str | None  # the determinism error, or None when it replays


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


VERIFY_ALL_MAX = 100_000  # runs one `verify_all` call checks at most (`limit`)


def _assistant_fields(assistant: tuple[str, int] | None) -> dict[str, Any]:
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


class Waypoint:
    def __init__(self, client: Client | None, engine: AsyncEngine, settings: Settings):
        self._client = client
        self._gateway: TemporalGateway | None = None
        self.engine = engine
        self._store = RunStore(engine)  # private: every surface reads and writes through the client
        self.settings = settings
        self.threads = Threads(self._store, self._scoped)
        self.keys = Keys(self._store)
        self.limits = FleetLimits(self._store, settings)
        self.schedules = Schedules(self._store, self)
        self.assistants = Assistants(self._store, self, self._scoped)
        self.evals = Evals(self._store, self)
        self.webhooks = Webhooks(self._store, self)
        self._trace_ids: dict[str, str] = {}
        self._stuck_seen: set[str] = set()  # runs this process reported stuck (the gauge went to 1)

    @classmethod
    async def connect(cls, settings: Settings, *, temporal: bool = True) -> Waypoint:
        """Connect to Postgres and, unless `temporal=False` (then on first use), to Temporal."""
        engine = engine_for(settings, database_url(settings))
        wp = cls(None, engine, settings)
        if temporal:
            try:
                await wp.temporal()
            except BaseException:
                await engine.dispose()
                raise
        return wp

    async def __aenter__(self) -> Waypoint:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.engine.dispose()

    async def temporal(self) -> TemporalGateway:
        """The Temporal side, connected on first use."""
        if self._gateway is None:
            from waypoint.app.temporal import TemporalGateway, connect

            client = self._client or await connect(self.settings)
            self._client = client
            self._gateway = TemporalGateway(client, self.settings)
        return self._gateway

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ConfigError("this Waypoint is not connected to Temporal yet: await wp.temporal() first")
        return self._client

    def tenant(self, tenant_id: str | None = None) -> str:
        """The tenant a call acts for: the one given, else the configured one."""
        return self.settings.tenant if tenant_id is None else check_tenant(tenant_id)

    def _scoped(self, tenant_id: str | None, *run_ids: str | None) -> str:
        """The tenant a call acts for, once the run ids it names are ids the store can hold."""
        for run_id in run_ids:
            check_name("the run id", run_id)
        return self.tenant(tenant_id)

    # --- starting runs ------------------------------------------------------------------------------

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
        if not check_text("the task", task).strip():
            raise InvalidInput("the task is empty: say what the agent should do")
        check_name("the agent", agent)
        check_name("the model", model)
        budget = budget or Budget()
        if max_steps is not None:
            budget = replace(budget, max_steps=max_steps)
        check_budget(asdict(budget))
        inp = RunInput(
            agent=agent,
            task=task,
            tenant_id=self._scoped(tenant_id, run_id),
            model=model or self.settings.model,
            budget=budget,
            pin_model=bool(model or self.settings.model),
            priority=check_priority(priority),
            start_at=check_start_time(start_at, after_seconds),
            after_run=check_name("the run to wait for", after_run),
            webhook=self.check_webhook(webhook),
            instructions=check_instructions(instructions),
            **_assistant_fields(assistant),
        )
        check_idempotency_key(idempotency_key)
        await self.check_start(inp.agent, inp.model)
        if after_run is not None:
            await self._check_tenant(after_run, inp.tenant_id)
        return await self._start(run_id, inp, idempotency_key)

    def check_webhook(self, url: str | None) -> str | None:
        """A run's webhook URL as the settings allow it (`checks.check_webhook`), or InvalidInput."""
        return check_webhook(url, allow_private=self.settings.webhook_allow_private)

    async def webhook_secret(self, *, rotate: bool = False, tenant_id: str | None = None) -> WebhookSecret:
        """The tenant's webhook signing secret, made on first use; `rotate=True` replaces it (posts
        signed from then on use the new one: give it to the receivers, which may accept both a while)."""
        return await self._store.webhook_secret(self.tenant(tenant_id), rotate=rotate)

    async def webhook_attempts(self, run_id: str, *, tenant_id: str | None = None) -> list[WebhookAttempt]:
        """Every attempt to post the run to its webhook, oldest first (empty: none yet, or no webhook);
        its deliveries (and redeliveries) are `wp.webhooks.list(run_id=...)`."""
        return await self._store.webhook_attempts(self._scoped(tenant_id, run_id), run_id)

    async def webhook_summary(self, run_id: str, *, tenant_id: str | None = None) -> str:
        """One line on how the run's webhook fared: its newest delivery (delivered, pending and when
        next, or failed), or for runs from before deliveries its attempts."""
        tenant = self._scoped(tenant_id, run_id)
        deliveries = await self._store.webhook_deliveries(tenant, run_id=run_id, limit=1)
        attempts = [] if deliveries else await self._store.webhook_attempts(tenant, run_id)
        return delivery_summary(attempts, deliveries)

    async def agents(self) -> list[AgentInfo]:
        """The agents the workers of this deployment's task queue serve (the catalog they register)."""
        return await self._store.agents(self.settings.task_queue)

    async def agent(self, name: str) -> AgentInfo:
        """One agent of the catalog; NotFound naming the ones there are."""
        return await self._store.agent(self.settings.task_queue, check_text("the agent", name))

    async def agent_version(self, fingerprint: str, *, tenant_id: str | None = None) -> AgentVersion:
        """The agent version a run of the tenant started with, by its fingerprint or a prefix of it
        (`RunRow.agent_fingerprint`): instructions, tool schemas, models, MCP tool names. NotFound
        when the tenant has none such (another tenant's versions are not found either)."""
        fingerprint = check_fingerprint(fingerprint)
        if not fingerprint:
            raise InvalidInput("give the agent version's fingerprint (4 to 64 hex digits)")
        return await self._store.agent_version(self.tenant(tenant_id), fingerprint)

    async def check_start(self, agent: str, model: str | None) -> None:
        """Refuse a run that cannot start before anything starts (and before it gets an id): an agent
        no worker serves, a model spec that names no adapter, a model its worker cannot call."""
        info = await self._store.agent(self.settings.task_queue, agent)
        spec = parse_model_spec(model or info.model)
        if spec.provider == Provider.SCRIPTED and Provider.SCRIPTED not in info.providers:
            raise InvalidInput(f"agent {agent!r} has no scripted turns: pick a model with --model openai:<name>")
        if spec.provider != Provider.SCRIPTED and spec.provider not in info.providers:
            check_extra(spec.provider)  # this process lacks the SDK: the worker may too
            variable = info.settings.get("provider_key_env") or KEY_VARIABLES[spec.provider][0]
            raise ConfigError(
                f"the worker that serves agent {agent!r} ({info.worker}) has no {variable} for {spec.provider}: "
                "models: export it where the worker runs, then restart the worker"
            )

    async def fork(
        self,
        run_id: str,
        step: int,
        *,
        message: str | None = None,
        model: str | None = None,
        memory: str = MemoryView.THEN,
        tenant_id: str | None = None,
        new_run_id: str | None = None,
        priority: int | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
        budget: Budget | None = None,
        instructions: str | None = None,
        assistant: tuple[str, int] | None = None,
        message_only: bool = False,
    ) -> StartedRun:
        """Start a new run from the state of `run_id` at `step` (plus an optional user message).
        The parent is untouched; the new run records it and the fork step. `memory` (a MemoryView)
        is what it recalls from long-term memory: by default memory as it was at that step, never
        the parent's later episodes. It keeps the parent's priority unless given one.
        `idempotency_key` as for `start_run`; it has a webhook only if given one (`webhook`, as for
        `start_run`); `budget`, `instructions` (its own, in place of those it inherits) and `assistant`
        as for `start_run`. `message_only`: the fork only adds `message` to the state, as a new
        checkpoint at `step` (the Agent Protocol's update_state): it takes no step, calls no model,
        and ends `completed`; a later fork of it goes on from there."""
        if message_only and not (message or "").strip():
            raise InvalidInput("a fork that only adds a message needs the message: give its text")
        check_choice("memory", memory, MemoryView)
        self.check_webhook(webhook)
        check_instructions(instructions)
        if budget is not None:
            check_budget(asdict(budget))
        check_seq("the step", step)
        check_text("the message", message)
        check_name("the model", model)
        check_priority(priority)
        check_idempotency_key(idempotency_key)
        tenant = self._scoped(tenant_id, run_id, new_run_id)
        await self._store.owner_of_step(tenant, run_id, step)  # the run and the step exist
        parent = await self._store.get_run(tenant, run_id)
        await self.check_start(parent.agent, model or parent.model)
        inp = RunInput(
            agent=parent.agent,
            task=message if message is not None else parent.task,  # a thread's next turn is its own task
            tenant_id=tenant,
            model=model,
            fork=ForkOrigin(
                run_id=run_id, step=step, message=message, memory=MemoryView(memory), message_only=message_only
            ),
            pin_model=model is not None,
            priority=priority or parent.priority,
            webhook=webhook,
            # A message-only fork's budget allows no step of its own (its steps go on from the fork
            # step): a worker from before message_only ends it there too, if with `max_steps`.
            budget=Budget(max_steps=step) if message_only and budget is None else budget,
            instructions=instructions,
            **_assistant_fields(assistant),
        )
        return await self._start(new_run_id, inp, idempotency_key)

    async def rerun(
        self,
        run_id: str,
        *,
        from_step: int = 0,
        model: str | None = None,
        agent: str | None = None,
        tools: str = ToolMode.RECORDED,
        instructions: str | None = None,
        memory: str = MemoryView.THEN,
        batch_id: str | None = None,
        tenant_id: str | None = None,
        new_run_id: str | None = None,
        rerun_children: bool = False,
        priority: int | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
    ) -> StartedRun:
        """Run `run_id` again from its state at `from_step` with another model, agent or
        `instructions` (the system prompt, in place of the agent's own), as a new run (lineage kind
        `rerun`). With `tools="recorded"` a tool call matching the original's at the same step and
        position gets the recorded result without running; `"live"` runs every tool. `memory` (a
        MemoryView) is what it recalls from long-term memory: `"then"` memory as it was when the
        original reached `from_step` (its start, from step 0), `"now"` as it is now; neither ever
        recalls the original's episodes after `from_step` (its final answer among them), `"all"`
        does. A sub-agent call is a recorded tool call too, answered from its recorded answer;
        `rerun_children=True` starts its sub-agent runs again instead, as the rerun's own children
        (`tools="live"` always does). The original is untouched; `compare(run_id, new_id)` shows what
        changed. It keeps the original's priority unless given one. `idempotency_key` as for
        `start_run`; it has a webhook only if given one (`webhook`, as for `start_run`)."""
        check_choice("tool mode", tools, ToolMode)
        check_idempotency_key(idempotency_key)
        check_choice("memory", memory, MemoryView)
        check_instructions(instructions)
        self.check_webhook(webhook)
        check_seq("the step", from_step)
        check_name("the model", model)
        check_name("the agent", agent)
        check_priority(priority)
        tenant = self._scoped(tenant_id, run_id, new_run_id)
        await self._store.owner_of_step(tenant, run_id, from_step)  # the run and the step exist
        source = await self._store.get_run(tenant, run_id)
        agent = agent or source.agent
        pin_model = model is not None  # else the source's model, with its agent's failover list
        model = model or (source.model if agent == source.agent else None)
        await self.check_start(agent, model)
        inp = RunInput(
            agent=agent,
            task=source.task,
            tenant_id=tenant,
            model=model,
            pin_model=pin_model,
            priority=priority or source.priority,
            webhook=webhook,
            fork=ForkOrigin(
                run_id=run_id,
                step=from_step,
                kind=LineageKind.RERUN,
                tools=ToolMode(tools),
                batch_id=batch_id,
                instructions=instructions,
                memory=MemoryView(memory),
                rerun_children=rerun_children,
            ),
        )
        return await self._start(new_run_id, inp, idempotency_key)

    async def rerun_batch(
        self,
        select: str,
        *,
        limit: int = 20,
        concurrency: int = 4,
        from_step: int = 0,
        model: str | None = None,
        agent: str | None = None,
        tools: str = ToolMode.RECORDED,
        instructions: str | None = None,
        memory: str = MemoryView.THEN,
        tenant_id: str | None = None,
        on_done: Callable[[BatchItem], None] | None = None,
        rerun_children: bool = False,
        priority: int | None = None,
    ) -> BatchReport:
        """Rerun the tenant's runs that `select` picks (`status=completed agent=X since=7d`, newest
        first, reruns left out, at most `limit`) with the same change, `concurrency` at a time; wait
        for each and compare it with its source. Every rerun is an ordinary run tagged with the
        batch id (`runs(batch_id=...)`); `memory`, `rerun_children` and `priority` as for `rerun`."""
        check_count("the limit", limit)
        check_priority(priority)
        check_count("the concurrency", concurrency, high=100)
        check_choice("tool mode", tools, ToolMode)
        check_choice("memory", memory, MemoryView)
        check_instructions(instructions)
        check_seq("the step", from_step)
        check_name("the model", model)
        check_name("the agent", agent)
        chosen = parse_selection(check_text("the selection", select))
        if "status" in chosen:
            check_choice("status", str(chosen["status"]), RunStatus)
        since = datetime.now(UTC) - timedelta(seconds=int(chosen["since"])) if "since" in chosen else None
        tenant = self.tenant(tenant_id)
        sources = await self._store.list_runs(
            tenant,
            limit=limit,
            status=str(chosen["status"]) if "status" in chosen else None,
            agent=str(chosen["agent"]) if "agent" in chosen else None,
            since=since,
            originals=True,
        )
        if not sources:
            raise NotFound(f"no run matches {select!r}: list runs with `waypoint runs`")
        batch_id = f"batch-{uuid.uuid4().hex[:12]}"
        gate = asyncio.Semaphore(concurrency)

        async def one(source: RunRow) -> BatchItem:
            async with gate:
                try:
                    new_id = await self.rerun(
                        source.run_id,
                        from_step=from_step,
                        model=model,
                        agent=agent,
                        tools=tools,
                        instructions=instructions,
                        memory=memory,
                        batch_id=batch_id,
                        tenant_id=tenant,
                        rerun_children=rerun_children,
                        priority=priority,
                    )
                except WaypointError as exc:
                    item = BatchItem(source.run_id, None, error=str(exc))
                else:
                    result = await self.result(new_id, tenant_id=tenant)
                    found = await self._store.compare(tenant, source.run_id, new_id)
                    item = BatchItem(
                        source.run_id,
                        new_id,
                        status=result.status,
                        diverged=found.diverged,
                        first_divergence=found.first_divergence,
                        steps_delta=found.steps_delta,
                        tokens_delta=found.input_tokens_delta + found.output_tokens_delta,
                        cost_delta_usd=found.cost_delta_usd,
                        not_recorded=found.not_recorded_b,
                    )
            if on_done is not None:
                on_done(item)
            return item

        items = await asyncio.gather(*(one(s) for s in sources))
        return BatchReport(batch_id, list(items))

    async def _start(self, chosen: str | None, inp: RunInput, idempotency_key: str | None = None) -> StartedRun:
        """Start the run (under `chosen`, a caller's run id, else a new one) once it is checked; with
        an idempotency key, only if the key claims it, else answer the key's run."""
        # The request a key stands for: the whole input (a field added later is in it too) and the id asked for.
        request = {"input": asdict(inp), "run_id": chosen}
        claimed = self.idempotent(idempotency_key, request, run_id=chosen or make_run_id(), tenant_id=inp.tenant_id)
        async with claimed as claim:
            if claim.created:
                if chosen is not None:
                    await self.check_new_run_id(chosen, tenant_id=inp.tenant_id)
                gateway = await self.temporal()
                with self._traced_start(gateway.traced, claim.run_id, inp):
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
        tenant = self._scoped(tenant_id, run_id)
        found, created = await self._store.claim_key(
            tenant, key, run_id, request_hash(request), self.settings.idempotency_retention_seconds
        )
        if not created:
            yield Claim(found, False)
            return
        try:
            yield Claim(found, True)
        except BaseException:
            # Shielded: a start cancelled mid-way (its caller went away) still gives the key back.
            await asyncio.shield(self._store.release_key(tenant, key, found))
            raise

    async def check_new_run_id(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """A Conflict when a run has this id already: its row is checked here (it outlives the
        workflow's history in Temporal), Temporal refuses a workflow id it holds when the run starts."""
        tenant = self._scoped(tenant_id, run_id)
        owner = await self._store.tenant_of_run(run_id)
        if owner == tenant:
            row = await self._store.get_run(tenant, run_id)
            raise Conflict(f"run {run_id} already exists ({row.status}): choose another run id, or leave it out")
        if owner is not None:  # another tenant's: taken all the same (one workflow id), nothing more said
            raise Conflict(f"run {run_id} already exists: choose another run id, or leave it out")

    @contextlib.contextmanager
    def _traced_start(self, traced: bool, run_id: str, inp: RunInput) -> Iterator[None]:
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
        await self._check_tenant(run_id, tenant_id)
        if self._trace_ids.get(run_id):
            return self._trace_ids[run_id]
        return (await self.run(run_id, tenant_id=tenant_id)).trace_id

    async def check_run(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """NotFound unless the run is the tenant's (a run so new it has no row yet is asked of Temporal)."""
        await self._check_tenant(run_id, tenant_id)

    async def check_position(self, run_id: str, after_seq: int, *, tenant_id: str | None = None) -> int:
        """Where a reader of the run's log resumes (a stream's Last-Event-ID): 0, or the seq of one of
        its events. NotFound unless the run is the tenant's; InvalidInput past its newest event, an
        id no stream sent (the log only grows, and an event is sent once it is written)."""
        await self._check_tenant(run_id, tenant_id)
        check_seq("the position", after_seq)
        if after_seq == 0:
            return 0
        try:
            last = await self._store.last_seq(self.tenant(tenant_id), run_id)
        except NotFound:
            last = 0  # a run so new that its row is not written: its log is empty
        if after_seq > last:
            raise InvalidInput(
                f"event {after_seq} is past the end of run {run_id}'s log, whose last event is {last}: "
                "resume after an id the stream sent, or from the start"
            )
        return after_seq

    async def run_if_written(self, run_id: str, *, tenant_id: str | None = None) -> RunRow | None:
        """The run's row, or None while the run is so new that its worker has not written it; NotFound
        if it is not the tenant's. A row written between the two reads is read again, never a 404."""
        try:
            return await self.run(run_id, tenant_id=tenant_id)
        except NotFound:
            if await self.starting(run_id, tenant_id=tenant_id):
                return None
            return await self.run(run_id, tenant_id=tenant_id)

    async def run_or_planned(self, run_id: str, *, tenant_id: str | None = None) -> RunRow:
        """The run's row; while the run is so new that its worker has not written it, the row its
        start asked for, from the input Temporal holds: status `queued` (it waits for another run),
        `scheduled` (a delayed run) or `starting`, its agent, model and assistant, no steps. NotFound
        if it is not the tenant's."""
        tenant = self._scoped(tenant_id, run_id)
        row = await self.run_if_written(run_id, tenant_id=tenant)
        if row is not None:
            return row
        inp = await (await self.temporal()).start_input(run_id)
        if inp is None or inp.tenant_id != tenant:  # gone meanwhile, or never the tenant's
            return await self.run(run_id, tenant_id=tenant)
        status = RunStatus.QUEUED if inp.after_run else RunStatus.SCHEDULED if inp.start_at else STARTING
        return RunRow(
            run_id=run_id,
            tenant_id=tenant,
            agent=inp.agent,
            task=inp.task,
            model=inp.model or self.settings.model or "",  # "": its agent's own
            status=status,
            steps=0,
            max_steps=0,  # (no checkpoint yet: a thread does not fork it)
            priority=inp.priority,
            start_at=datetime.fromtimestamp(inp.start_at, UTC) if inp.start_at else None,
            after_run_id=inp.after_run,
            webhook=inp.webhook,
            assistant_id=inp.assistant_id,
            assistant_version=inp.assistant_version,
        )

    async def starting(self, run_id: str, *, tenant_id: str | None = None) -> bool:
        """Whether the run is the tenant's and so new that its row is not written yet (Temporal runs
        it); False once it has a row, NotFound if it is not the tenant's or is gone."""
        tenant = self._scoped(tenant_id, run_id)
        if await self._store.run_exists(tenant, run_id):
            return False
        await self._check_tenant(run_id, tenant)
        if await (await self.temporal()).ended_without_row(run_id) is not None:
            raise not_found(tenant, run_id)
        return True

    async def _check_tenant(self, run_id: str, tenant_id: str | None) -> None:
        """Another tenant's run is "not found". A run so new that its row is not written yet
        is checked against the tenant Temporal holds for it."""
        tenant = self._scoped(tenant_id, run_id)
        try:
            await self._store.get_run(tenant, run_id)
            return
        except NotFound as missing:
            # Temporal is connected on first use (`connect(temporal=False)`, as `waypoint serve` does):
            # asked only now, so a run started elsewhere is found before its row is written, not
            # 404 until some other request happened to connect. Unreachable, the database is the
            # only witness.
            try:
                gateway = await self.temporal()
            except Unavailable:
                raise missing from None
            if await gateway.memo_tenant(run_id) != tenant:
                raise

    # --- a running run -------------------------------------------------------------------------------

    async def progress(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """The live state of a running run: step, status, pending approvals."""
        await self._check_tenant(run_id, tenant_id)
        return await (await self.temporal()).progress(run_id)

    async def _update(self, run_id: str, name: Update, arg: object, tenant_id: str | None) -> RunProgress:
        """Deliver a message; a run that is stuck (its workflow task keeps failing) takes none, and
        says why at once, but a cancel ends it anyway (see `cancel`)."""
        await self._check_tenant(run_id, tenant_id)
        gateway = await self.temporal()
        why = await gateway.stuck(run_id)
        if why is not None:
            if name == Update.CANCEL:
                return await self._cancel_stuck(run_id, arg if isinstance(arg, str) else None, why, tenant_id)
            raise Conflict(
                f"run {run_id} is stuck: {why}. It takes no {name} until a worker can run it again; "
                f"`waypoint cancel {run_id}` ends it (its workflow is terminated), then it can be deleted"
            )
        return await gateway.update(run_id, name, arg)

    async def _cancel_stuck(self, run_id: str, reason: str | None, why: str, tenant_id: str | None) -> RunProgress:
        """A stuck run cannot run its own cancel: its workflow is terminated, and its row (if it has
        one) ends `cancelled` with the reason and why it was stuck."""
        tenant = self.tenant(tenant_id)
        error = f"{reason or 'cancelled by a user'} (while stuck: {why}; its workflow was terminated)"
        await (await self.temporal()).terminate(run_id, error)
        self._gauge_stuck(run_id, tenant, None)
        try:
            row = await self._store.finish_run(tenant, run_id, RunStatus.CANCELLED, None, error)
        except NotFound:  # stuck before its row was written: Temporal keeps the reason
            return RunProgress(step=0, status=RunStatus.CANCELLED)
        return RunProgress(
            step=row.steps,
            status=row.status,
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cost_usd=row.cost_usd,
        )

    async def stuck(self, run_id: str, *, tenant_id: str | None = None) -> str | None:
        """Why the run cannot make progress (its workflow task keeps failing, with the last
        failure), or None. Derived from Temporal at each call, never stored."""
        await self._check_tenant(run_id, tenant_id)
        return await self._stuck(run_id, self.tenant(tenant_id))

    async def _stuck(self, run_id: str, tenant: str) -> str | None:
        try:
            why = await (await self.temporal()).stuck(run_id)
        except WaypointError:  # Temporal unreachable: Postgres still answers, without this
            return None
        self._gauge_stuck(run_id, tenant, why)
        return why

    def _gauge_stuck(self, run_id: str, tenant: str, why: str | None) -> None:
        """`waypoint.run.stuck`: 1 for a run seen stuck, back to 0 when it is not (a point per run
        this process saw stuck, not per run it read)."""
        from waypoint import telemetry  # only a look at a live run needs it

        if why or run_id in self._stuck_seen:
            telemetry.metrics().stuck.set(1 if why else 0, {"waypoint.run_id": run_id, "waypoint.tenant": tenant})
            (self._stuck_seen.add if why else self._stuck_seen.discard)(run_id)

    async def with_stuck(self, rows: Sequence[RunRow]) -> list[RunRow]:
        """The rows, each unfinished one marked with why it is stuck if it is (one Temporal call
        per unfinished run, STUCK_CHECKS_AT_ONCE at a time; none when every run has ended)."""
        live = [r for r in rows if r.status not in FINISHED]
        gate = asyncio.Semaphore(STUCK_CHECKS_AT_ONCE)

        async def check(row: RunRow) -> str | None:
            async with gate:
                return await self._stuck(row.run_id, row.tenant_id)

        found = await asyncio.gather(*(check(r) for r in live))
        marked = {r.run_id: why for r, why in zip(live, found, strict=True) if why}
        return [replace(r, stuck=marked[r.run_id]) if r.run_id in marked else r for r in rows]

    async def pause(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """Pause before the next step (the current one finishes); its live sub-agent runs pause too.
        A run whose step waits on its sub-agent runs is `paused` at once (its tree holds still)."""
        progress = await self._update(run_id, Update.PAUSE, None, tenant_id)
        await self._below(run_id, Update.PAUSE, tenant_id)
        return progress

    async def resume(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """Go on after a pause; its paused sub-agent runs go on too."""
        progress = await self._update(run_id, Update.RESUME, None, tenant_id)
        await self._below(run_id, Update.RESUME, tenant_id)
        return progress

    async def _below(self, run_id: str, name: Update, tenant_id: str | None) -> None:
        """Deliver a pause or a resume to the live runs below `run_id` in its tree (a workflow cannot
        send an update to another, and Temporal's parent-close policy covers only the parent's end).
        A run that has just ended, or is already in that state, is passed over. A resume goes to every
        live run below, not only those shown `paused`: one paused while it waited for approval still
        shows that wait, and refuses the resume only if it is not paused."""
        for row in await self._store.live_below(self._scoped(tenant_id, run_id), run_id):
            if name == Update.PAUSE and row.status == RunStatus.PAUSED:
                continue
            with contextlib.suppress(Conflict, InvalidInput, NotFound):
                await self._update(row.run_id, name, None, tenant_id)

    async def cancel(self, run_id: str, reason: str | None = None, *, tenant_id: str | None = None) -> RunProgress:
        """End the run and its sub-agent runs with status `cancelled`: no model or tool call starts
        after it, a model call in flight is cancelled, tools in flight finish, and the step gets a
        `step_cancelled` event naming what was in flight (workflows/cancels.py); a stuck run's
        workflow is terminated and its row marked cancelled. Answers once the cancel is accepted."""
        return await self._update(run_id, Update.CANCEL, check_text("the reason", reason), tenant_id)

    async def send(self, run_id: str, text: str, *, tenant_id: str | None = None) -> RunProgress:
        """Add a user message, read by the run's next model call."""
        if not check_text("the message", text).strip():
            raise InvalidInput("the message is empty: send some text")
        return await self._update(run_id, Update.SEND, text, tenant_id)

    async def approve(
        self,
        run_id: str,
        call_id: str | None = None,
        reason: str | None = None,
        *,
        edited_input: dict[str, Any] | None = None,
        answer: str | None = None,
        tenant_id: str | None = None,
    ) -> RunProgress:
        """Let a tool call that waits for approval run: the run's own, or (given the id of a run
        above it) that of the one run of its tree that waits. `edited_input`: the arguments the tool
        runs with instead of the model's (checked against its schema); `answer`: the answer to an
        `ask_human` call (its result). Both are recorded with the decision."""
        target = await self._waiting_run(run_id, call_id, tenant_id)
        chosen = decision(call_id, reason)
        if edited_input is not None or answer is not None:
            check_text("the answer", answer)
            pending = await self._pending(target, call_id, tenant_id)
            if pending is not None:
                edited_input = await self._check_answer(target, pending, edited_input, answer, tenant_id)
            chosen = replace(chosen, edited_input=edited_input, answer=answer)
        return await self._update(target, Update.APPROVE, chosen, tenant_id)

    async def _pending(self, run_id: str, call_id: str | None, tenant_id: str | None) -> PendingApproval | None:
        """The call a decision is about, if it waits (the update itself says why when none does)."""
        waiting = (await self.progress(run_id, tenant_id=tenant_id)).pending_approvals
        if call_id is None:
            return waiting[0] if len(waiting) == 1 else None
        return next((p for p in waiting if p.call_id == call_id), None)

    async def _check_answer(
        self,
        run_id: str,
        pending: PendingApproval,
        edited_input: dict[str, Any] | None,
        answer: str | None,
        tenant_id: str | None,
    ) -> dict[str, Any] | None:
        what = f"call {pending.call_id} ({pending.tool})"
        if pending.asks_human:
            if edited_input is not None or answer is None:
                raise Mismatch(f"{what} asks a question: it expects an answer (text), not an edited input")
            return None
        if answer is not None:
            raise Mismatch(
                f"{what} waits for an approval, not an answer: approve it (optionally with an edited input) or deny it"
            )
        row = await self.run(run_id, tenant_id=tenant_id)
        try:
            tools = (await self.agent(row.agent)).tools
        except NotFound:  # an agent no worker serves now: its run checks the arguments when the tool runs
            tools = []
        schema = next((t.parameters for t in tools if t.name == pending.tool), None)
        return check_edited_input(pending.tool, schema, edited_input)

    async def deny(
        self, run_id: str, call_id: str | None = None, reason: str | None = None, *, tenant_id: str | None = None
    ) -> RunProgress:
        """Refuse a waiting tool call; the model is told, with the reason. As `approve`, the id of a
        run above the waiting one reaches it."""
        target = await self._waiting_run(run_id, call_id, tenant_id)
        return await self._update(target, Update.DENY, decision(call_id, reason), tenant_id)

    async def _waiting_run(self, run_id: str, call_id: str | None, tenant_id: str | None) -> str:
        """The run whose call a decision given for `run_id` is about: `run_id` itself, unless it is not
        waiting and exactly one run below it is (or one whose pending calls include `call_id`)."""
        tenant = self._scoped(tenant_id, run_id)
        waiting = await self._store.waiting_below(tenant, run_id)
        if not waiting:  # (a run still starting has no row yet: its own update answers)
            return run_id
        row = await self._store.get_run(tenant, run_id)
        if call_id is not None:
            for below in waiting:
                progress = await (await self.temporal()).progress(below.run_id)
                if any(p.call_id == call_id for p in progress.pending_approvals):
                    return below.run_id
            return run_id  # its own call, or its own update says there is no such call
        if row.status not in FINISHED and (await (await self.temporal()).progress(run_id)).pending_approvals:
            return run_id
        if len(waiting) > 1:
            names = ", ".join(w.run_id for w in waiting)
            raise Conflict(f"{len(waiting)} runs below {run_id} wait for approval ({names}): name one of them")
        return waiting[0].run_id

    @overload
    async def result(self, run_id: str, *, tenant_id: str | None = None) -> RunResult: ...

    @overload
    async def result(self, run_id: str, output_type: type[M], *, tenant_id: str | None = None) -> M: ...

    async def result(
        self, run_id: str, output_type: type[M] | None = None, *, tenant_id: str | None = None
    ) -> RunResult | M:
        """Wait for a run to end. A failed run returns its result with status `failed` and the error.
        A typed run's answer is its `output_json`; given its pydantic `output_type`, the answer is
        returned as an instance of it (Conflict when the run ended without one: the reason is in it)."""
        await self._check_tenant(run_id, tenant_id)
        result = await (await self.temporal()).result(run_id)
        if result is None or result.output_stored:  # the whole answer (or its parsed JSON) is in Postgres
            result = (await self.run(run_id, tenant_id=tenant_id)).result()
        return result if output_type is None else result.output_as(output_type)

    # --- reads (Postgres) ----------------------------------------------------------------------------

    async def runs(
        self,
        *,
        tenant_id: str | None = None,
        limit: int = 20,
        status: str | None = None,
        agent: str | None = None,
        before: tuple[datetime, str] | None = None,
        batch_id: str | None = None,
        text: str | None = None,
        roots: bool = False,
        schedule_id: str | None = None,
        fingerprint: str | None = None,
    ) -> list[RunRow]:
        """Newest first; `before` is the (created_at, run_id) of the last run of the previous page;
        `batch_id`: the reruns of one batch; `text` keeps the runs whose task contains it; `roots`
        leaves sub-agent runs out; `schedule_id`: the runs one schedule fired; `fingerprint`: the
        runs that started with an agent version whose fingerprint starts with it."""
        page = await self.runs_page(
            tenant_id=tenant_id,
            limit=limit,
            status=status,
            agent=agent,
            before=before,
            batch_id=batch_id,
            text=text,
            roots=roots,
            schedule_id=schedule_id,
            fingerprint=fingerprint,
        )
        return page.runs

    async def runs_page(
        self,
        *,
        tenant_id: str | None = None,
        limit: int = 20,
        status: str | None = None,
        agent: str | None = None,
        text: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        sort: str = RunSort.NEWEST,
        cursor: str | None = None,
        before: tuple[datetime, str] | None = None,
        batch_id: str | None = None,
        run_ids: Sequence[str] | None = None,
        roots: bool = False,
        schedule_id: str | None = None,
        fingerprint: str | None = None,
    ) -> RunsPage:
        """A page of runs and the cursor of the next (what the HTTP API and the viewer list).
        `since`/`until`: created at or after / before, an age back from now (`1h`, `7d`), an ISO
        date or a datetime; `sort`: a RunSort; `cursor`: the previous page's `next_cursor`;
        `run_ids`: only these runs; `roots`: no sub-agent runs; `schedule_id`: the runs one schedule
        fired (NotFound unless the schedule is the tenant's or one of its runs names it);
        `fingerprint`: the runs that started with an agent version whose fingerprint starts with it
        (4 to 64 hex digits)."""
        check_count("the limit", limit)
        if status is not None:
            check_choice("status", status, RunStatus)
        check_choice("sort", sort, RunSort)
        if run_ids is not None and len(run_ids) > 500:
            raise InvalidInput(f"{len(run_ids)} run ids: ask for at most 500 at a time")
        check_name("the agent", agent)
        check_text("the text", text, high=NAME_MAX)
        check_name("the cursor", cursor)
        check_name("the batch id", batch_id)
        check_name("the schedule id", schedule_id)
        fingerprint = check_fingerprint(fingerprint)
        tenant = self._scoped(tenant_id, *(run_ids or []))
        page = await self._store.runs_page(
            tenant,
            limit=limit,
            status=status,
            agent=agent,
            text=text,
            since=parse_when("since", since) if isinstance(since, str) else since,
            until=parse_when("until", until) if isinstance(until, str) else until,
            sort=RunSort(sort),
            cursor=cursor,
            before=before,
            batch_id=batch_id,
            run_ids=run_ids,
            roots=roots,
            schedule_id=schedule_id,
            fingerprint=fingerprint,
        )
        if schedule_id is not None and not page.runs and cursor is None and before is None:
            await self._store.get_schedule(tenant, schedule_id)  # an unknown schedule is named, not an empty page
        if batch_id is not None and not page.runs and not await self._store.has_batch(tenant, batch_id):
            raise NotFound(
                f"no batch {batch_id!r} for tenant {tenant!r}: `waypoint rerun --select ...` prints its batch's id"
            )
        return replace(page, runs=await self.limits.with_waits(await self.with_stuck(page.runs)))

    async def run(self, run_id: str, *, tenant_id: str | None = None, check_stuck: bool = False) -> RunRow:
        """The run's row; `check_stuck`: marked with why it is stuck, if it has not ended (Temporal is asked)."""
        row = (await self.limits.with_waits([await self._store.get_run(self._scoped(tenant_id, run_id), run_id)]))[0]
        return (await self.with_stuck([row]))[0] if check_stuck else row

    async def timeline(
        self, run_id: str, *, tenant_id: str | None = None, after_step: int = 0, limit: int | None = None
    ) -> list[StepLine]:
        """Steps after `after_step` (keyset pagination), from the `run_steps` view."""
        if limit is not None:
            check_count("the limit", limit)
        check_count("after_step", after_step, low=0, high=10**9)
        return await self._store.timeline(self._scoped(tenant_id, run_id), run_id, after_step=after_step, limit=limit)

    async def waterfall(self, run_id: str, *, tenant_id: str | None = None, after_step: int = 0) -> Waterfall:
        """The run as a waterfall: its steps after `after_step`, each with bars for its model call
        (failed attempts, retry waits), tool calls, approval and capacity waits, compactions and
        sub-agent runs, and its tokens, cost and context; a live run's step in flight last."""
        check_count("after_step", after_step, low=0, high=10**9)
        source = await self._store.waterfall_source(self._scoped(tenant_id, run_id), run_id, after_step=after_step)
        return derive_waterfall(source)

    async def state(self, run_id: str, step: int, *, tenant_id: str | None = None) -> StepState:
        """The state (working memory) at `step`, with the step's events."""
        return await self._store.state_at(self._scoped(tenant_id, run_id), run_id, check_seq("the step", step))

    async def diff(self, run_id: str, a: int, b: int, *, tenant_id: str | None = None) -> StateDiff:
        check_seq("step a", a)
        check_seq("step b", b)
        return await self._store.diff(self._scoped(tenant_id, run_id), run_id, a, b)

    async def events(
        self,
        run_id: str,
        *,
        kinds: list[str] | None = None,
        since_step: int = 0,
        after_seq: int = 0,
        limit: int | None = None,
        tenant_id: str | None = None,
        step: int | None = None,
    ) -> list[EventRow]:
        """Events in log order (of one `step`, or from `since_step` on); `after_seq` (keyset
        pagination) is the last seq seen."""
        for kind in kinds or []:
            check_choice("event kind", kind, EventKind)
        if limit is not None:
            check_count("the limit", limit, high=1_000_000)
        check_count("since_step", since_step, low=0, high=10**9)
        check_seq("after_seq", after_seq)
        if step is not None:
            check_seq("the step", step)
        return await self._store.events(
            self._scoped(tenant_id, run_id),
            run_id,
            kinds=kinds,
            since_step=since_step,
            step=step,
            after_seq=after_seq,
            limit=limit,
        )

    async def tail(
        self, run_id: str, *, after_seq: int = 0, limit: int = 500, tenant_id: str | None = None
    ) -> list[EventRow]:
        """A stream's read of the log: the events after `after_seq` (with their tools' outputs), at
        most `limit`; NotFound unless the run is the tenant's (or, past seq 0, when it has no more)."""
        return await self._store.tail(self._scoped(tenant_id, run_id), run_id, after_seq=after_seq, limit=limit)

    async def last_seq(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """The seq of the run's newest event (0 before the first); NotFound unless the run is the tenant's."""
        return await self._store.last_seq(self._scoped(tenant_id, run_id), run_id)

    async def listen(
        self, *, on_events: Handler, on_deltas: Handler, on_reconnect: Callable[[], None] | None = None
    ) -> Listener:
        """Hear each commit to a run's log and each batch of model deltas as Postgres announces them
        (one connection of its own; `close()` it)."""
        url = self.engine.url.render_as_string(hide_password=False)
        handlers = {EVENTS_CHANNEL: on_events, DELTAS_CHANNEL: on_deltas}
        return await Listener(url, handlers, on_reconnect=on_reconnect).start()

    async def effects(self, run_id: str, *, tenant_id: str | None = None) -> list[Effect]:
        """The run's tool calls with side effects, as the ledger recorded them."""
        return await self._store.effects(self._scoped(tenant_id, run_id), run_id)

    def export(self, run_id: str, *, tenant_id: str | None = None) -> AsyncIterator[str]:
        """The full transcript as JSON lines (streamed)."""
        return self._store.export(self._scoped(tenant_id, run_id), run_id)

    async def compare(self, run_a: str, run_b: str, *, tenant_id: str | None = None) -> RunComparison:
        """Two runs of the tenant step by step: tool calls, answers, tokens, cost, model time, outcome."""
        return await self._store.compare(self._scoped(tenant_id, run_a, run_b), run_a, run_b)

    async def fleet_stats(self, period: str = "24h", *, tenant_id: str | None = None) -> FleetStats:
        """The fleet over `period` (1h, 6h, 24h, 7d, 30d): runs by status over time, steps a minute, model
        calls and 429s per model key, runs waiting, cost per day and agent, the slowest and costliest
        runs (`wp.limits.stats`: model keys are the fleet's, every other figure the tenant's)."""
        return await self.limits.stats(period, self.tenant(tenant_id))

    async def tree(self, run_id: str, *, tenant_id: str | None = None) -> RunTree:
        """The run and every sub-agent run below it, depth first in call order, with the tree's totals
        and the budget pool of the whole tree it belongs to (None: no budget)."""
        tenant = self._scoped(tenant_id, run_id)
        nodes = await self._store.tree(tenant, run_id)
        return RunTree(nodes=nodes, totals=tree_totals(nodes), budget=await self._store.run_budget(tenant, run_id))

    async def budget(self, run_id: str, *, tenant_id: str | None = None) -> BudgetView | None:
        """The budget pool of the run's tree: per measure (tokens, cost, steps) its limit, what the tree
        spent, what its model calls in flight hold, and what is left; None when the tree has no budget."""
        tenant = self._scoped(tenant_id, run_id)
        await self._store.get_run(tenant, run_id)  # an unknown run is NotFound, not "no budget"
        return await self._store.run_budget(tenant, run_id)

    async def children(self, run_id: str, *, tenant_id: str | None = None) -> list[RunRow]:
        """The sub-agent runs this run started itself, in call order."""
        return await self._store.children(self._scoped(tenant_id, run_id), run_id)

    async def lineage(self, run_id: str, *, tenant_id: str | None = None) -> list[LineageLink]:
        return await self._store.lineage(self._scoped(tenant_id, run_id), run_id)

    async def verify(self, run_id: str, *, tenant_id: str | None = None) -> Verdict:
        """Recompute the run's hash chain and checkpoint hashes, and those of every sub-agent run below
        it (`Verdict.below`); check that each sub-agent answer in a caller's ledger is its child's."""
        return await self._store.verify_tree(self._scoped(tenant_id, run_id), run_id)

    async def verify_all(
        self,
        since: datetime | str | None = None,
        *,
        limit: int | None = None,
        tenant_id: str | None = None,
        settle_seconds: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> VerifyAllReport:
        """Check every run of the tenant created since `since` (a datetime, an age such as `2h`, or an
        ISO time; every run without), oldest first, at most `limit`: its Postgres mirror against its
        Temporal history (every completed model and tool activity has its event), its hash chain and
        checkpoints, its status against its workflow's, and that no tool effect is recorded twice.
        `progress(done, total)` is called as runs are checked. See `waypoint.app.invariants`."""
        from waypoint.app.invariants import SETTLE_SECONDS, VerifyAll

        tenant = self.tenant(tenant_id)
        when = parse_when("since", since) if isinstance(since, str) else since
        if limit is not None:
            check_count("limit", limit, high=VERIFY_ALL_MAX)
        check = VerifyAll(
            self._store,
            await self.temporal(),
            tenant,
            settle_seconds=SETTLE_SECONDS if settle_seconds is None else settle_seconds,
            progress=progress,
        )
        return await check.run(when, limit)

    async def delete(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """Remove a finished run and every trace of it: its episodes in long-term memory, its spans in
        the local span file, then its rows (the only way rows leave the append-only log). In that
        order, so a delete cut half-way (a crash, an unreachable memory worker) finishes when run again:
        the run's row is the last thing to go."""
        tenant = self._scoped(tenant_id, run_id)
        for node in reversed((await self._store.tree(tenant, run_id))[1:]):  # its sub-agent runs first
            await self._delete_one(tenant, node.run.run_id)
        await self._delete_one(tenant, run_id)

    async def _delete_one(self, tenant: str, run_id: str) -> None:
        run = await self._store.deletable(tenant, run_id)
        if self.settings.memory and await self._has_episodes(run):
            await (await self.temporal()).memory(MemoryRequest(MemoryOp.FORGET, tenant, run_id=run_id))
        if run.trace_id:
            from waypoint.telemetry.spanfile import remove_trace, span_file

            remove_trace(span_file(self.settings.state_dir), run.trace_id)
        await self._store.delete_run(tenant, run_id)

    async def _has_episodes(self, run: RunRow) -> bool:
        """Whether long-term memory may hold episodes of the run: its steps were stored (by the run,
        or by a compaction pass), or it ran with memory (its memory tools write episodes too)."""
        if run.remembered_step > (run.fork_step or 0):
            return True
        plan = await self._store.recorded_plan(run.tenant_id, run.run_id)
        return plan is not None and plan.memory_queue is not None

    async def replay(
        self, run_id: str, *, tenant_id: str | None = None, workflows: Sequence[type] | None = None
    ) -> list[ReplayOutcome]:
        """Replay every execution of the run (continue-as-new included) against the current workflow code."""
        await self._check_tenant(run_id, tenant_id)
        if workflows is None:
            from waypoint.workflows.agent_run import AgentRunWorkflow

            workflows = (AgentRunWorkflow,)
        outcomes = await (await self.temporal()).replay(run_id, workflows)
        return [ReplayOutcome(execution, error) for execution, error in outcomes]

    # --- deploying new code --------------------------------------------------------------------------

    async def check_deploy(
        self,
        *,
        finished: int = FINISHED_DEFAULT,
        since: str | datetime | None = None,
        workflows: Mapping[str, Sequence[type]] | None = None,
        full_sandbox: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> DeployCheck:
        """The deploy gate: replay the Temporal histories of every open execution of Waypoint's
        workflows on its task queues, and of the last `finished` closed ones (most recently closed
        first; only those closed since `since`, an age such as `24h` or an ISO time), against the
        workflow code installed here (`workflows`: task queue -> workflow classes, default what this
        code's workers register). Run it with the code about to be deployed; every tenant's runs count.
        `full_sandbox`: replay in the workers' own sandbox, Waypoint's modules imported afresh for each
        history (about 7x slower; the default passes them through, see `TemporalGateway.replayer`).
        `progress(replayed, listed)` follows a long check."""
        check_count("finished", finished, low=0, high=FINISHED_MAX)
        when = parse_when("since", since) if isinstance(since, str) else since
        if workflows is None:
            from waypoint.app.worker import deployed_workflows

            workflows = deployed_workflows(self.settings)
        classes = list(dict.fromkeys(cls for group in workflows.values() for cls in group))
        return await (await self.temporal()).check_deploy(
            classes, list(workflows), finished=finished, since=when, full_sandbox=full_sandbox, progress=progress
        )

    async def set_current_deployment(self, deployment: str, build_id: str | None = None) -> str | None:
        """Make version `build_id` of the Worker Deployment `deployment` current (default: the build id
        of the code installed here, which `waypoint worker --deployment` uses when given none): new
        runs go to its workers, and open runs too at their next workflow task unless they are pinned.
        Returns the build id it replaced (None: there was no current version)."""
        if build_id is None:
            from waypoint.app.worker import build_id as local_build_id

            build_id = local_build_id()
        deployment, build_id = check_deployment_version(deployment, build_id)
        return await (await self.temporal()).set_current_version(deployment, build_id)

    async def deployment(self, deployment: str) -> tuple[str | None, list[str]]:
        """The current build id of the Worker Deployment (None: none yet) and the build ids of its versions."""
        check_deployment_version(deployment, "any")
        return await (await self.temporal()).deployment_versions(deployment)

    # --- compaction ----------------------------------------------------------------------------------

    async def apply_compaction_schedule(self) -> str:
        """Create or update the compaction Schedule; "created", "updated" or "unchanged"."""
        from waypoint.app.schedule import apply_schedule

        return await apply_schedule((await self.temporal()).client, self.settings)

    async def compaction_schedule(self) -> ScheduleInfo:
        """The compaction Schedule and the outcome of its last passes."""
        from waypoint.app.schedule import describe_schedule

        return await describe_schedule((await self.temporal()).client, self.settings)

    async def compact(self, run_id: str | None = None, *, tenant_id: str | None = None) -> CompactionReport:
        """Run a compaction pass now (of one run, or of the tenant's runs past the threshold) and wait."""
        from waypoint.app.schedule import compact_now

        tenant = self._scoped(tenant_id, run_id)
        if run_id is not None:
            await self.run(run_id, tenant_id=tenant)  # an unknown run is named before Temporal is asked
        return await compact_now((await self.temporal()).client, self.settings, run_id=run_id, tenant_id=tenant)

    async def compactions(
        self, run_id: str | None = None, *, tenant_id: str | None = None, limit: int = 20
    ) -> list[CompactionRow]:
        return await self._store.compactions(self._scoped(tenant_id, run_id), run_id=run_id, limit=limit)

    # --- episodic memory (served by the memory worker, reached through Temporal) --------------------

    async def memory_search(
        self,
        query: str,
        *,
        k: int = 5,
        agent: str | None = None,
        run_id: str | None = None,
        tenant_id: str | None = None,
    ) -> list[Memory]:
        """Episodes of this tenant most relevant to `query` (optionally of one agent or run)."""
        if not check_text("the query", query).strip():
            raise InvalidInput("the query is empty: say what to search for")
        check_count("k", k, high=100)
        check_name("the agent", agent)
        req = MemoryRequest(
            op=MemoryOp.SEARCH, tenant_id=self._scoped(tenant_id, run_id), query=query, k=k, agent=agent, run_id=run_id
        )
        return (await (await self.temporal()).memory(req)).memories

    async def memory_show(self, run_id: str, *, tenant_id: str | None = None) -> list[Memory]:
        """Every episode a run left in long-term memory."""
        tenant = self._scoped(tenant_id, run_id)
        await self.run(run_id, tenant_id=tenant)  # another tenant's run is "not found"
        return (await (await self.temporal()).memory(MemoryRequest(MemoryOp.SHOW, tenant, run_id=run_id))).memories

    async def memory_forget(self, run_id: str, *, tenant_id: str | None = None) -> int:
        """Delete a run's episodes (this tenant's only), whether or not the run's row still exists;
        returns how many went."""
        tenant = self._scoped(tenant_id, run_id)
        request = MemoryRequest(MemoryOp.FORGET, tenant, run_id=run_id)
        deleted = (await (await self.temporal()).memory(request)).deleted
        if deleted == 0:
            await self.run(run_id, tenant_id=tenant)  # neither episodes nor a run: say so
        return deleted


def decision(call_id: str | None, reason: str | None) -> Decision:
    """An approval or a denial, its call id and reason checked (the run records both)."""
    return Decision(call_id=check_name("the call id", call_id), reason=check_text("the reason", reason))


__all__ = [
    "ReplayOutcome",
    "StartedRun",
    "Waypoint",
    "database_url",
    # the typed rows the client hands out, and their JSON: a surface takes them from here, not from the store
    "AssistantRow",
    "EventRow",
    "Listener",
    "RunRow",
    "ScheduleRow",
    "StepState",
    "ThreadRow",
    "ThreadRun",
    "WebhookDelivery",
    "as_json",
]
