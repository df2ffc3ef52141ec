"""`Waypoint`: the runtime's public face. It builds one service per capability from the store, the
Temporal link and the tenant scope, and forwards today's method names to them; it holds no logic.

    async with await Waypoint.connect(Settings()) as wp:
        run_id = await wp.start_run("Summarize the notes", agent="demo")
        result = await wp.result(run_id)
        for line in await wp.timeline(run_id):
            print(line.step, line.action, line.tools)

Reads go to Postgres through `waypoint.store.RunStore` (the same calls the HTTP API makes);
starting, messaging and replaying runs go to Temporal (`waypoint.gateway.temporal`, connected on
first use). Every method takes `tenant_id`, default the configured tenant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.client._assistants import Assistants
from waypoint.client._audit import Audit
from waypoint.client._catalog import Catalog
from waypoint.client._compaction import Compaction
from waypoint.client._deploy import Deploys
from waypoint.client._evals import Evals
from waypoint.client._keys import Keys
from waypoint.client._limits import FleetLimits, FleetStats
from waypoint.client._listing import Listing
from waypoint.client._live import Live
from waypoint.client._log import RunLog
from waypoint.client._memory import EpisodicMemory
from waypoint.client._records import Records
from waypoint.client._runs import Runs
from waypoint.client._schedules import Schedules
from waypoint.client._scope import Scope, TemporalLink, database_url
from waypoint.client._starts import Starts
from waypoint.client._stuck import Stuck
from waypoint.client._threads import Threads
from waypoint.client._travel import Travel
from waypoint.client._turns import Turns
from waypoint.client._webhooks import Webhooks
from waypoint.config import Settings
from waypoint.store import RunStore
from waypoint.store.db import engine_for

if TYPE_CHECKING:
    from temporalio.client import Client

    from waypoint.gateway.temporal import TemporalGateway


class Waypoint:
    def __init__(self, client: Client | None, engine: AsyncEngine, settings: Settings):
        self.engine = engine
        self.settings = settings
        self._store = store = RunStore(engine)  # private: every surface reads and writes through the client
        self._temporal = temporal = TemporalLink(client, settings)
        self._scope = scope = Scope(settings, store, temporal)
        self.audit = audit = Audit(store.audit, scope)
        scope.audit_sink = audit.record  # every audited action's outcome is appended to the tenant's log
        self.limits = limits = FleetLimits(store, settings)
        self.keys = Keys(store.keys, scope)
        self.webhooks = webhooks = Webhooks(store.webhooks, temporal, scope)
        stuck = Stuck(temporal, scope)
        catalog = Catalog(store, scope)
        runs = Runs(store, temporal, scope, limits, stuck)
        starts = Starts(store, temporal, scope, catalog, webhooks, runs)
        live = Live(store, temporal, scope, stuck, runs, catalog)
        travel = Travel(store, scope, catalog, starts, webhooks, live)
        records = Records(store, temporal, scope)
        self.threads = Threads(store.threads, scope, Turns(store, scope, starts, travel, live), live, records)
        self.schedules = Schedules(store, temporal, scope, catalog, webhooks)
        self.assistants = Assistants(store.assistants, scope, catalog)
        self.evals = Evals(store, temporal, scope, catalog)
        listing, log = Listing(store, scope, limits, stuck), RunLog(store, scope)
        deploys, compaction = Deploys(temporal, scope), Compaction(store, temporal, scope, runs)
        memory = EpisodicMemory(temporal, scope, runs)

        # Today's method names, each the method of the service that owns it (see each for its doc).
        self.tenant = scope.tenant
        # the catalog and starting runs
        self.agents, self.agent, self.agent_version = catalog.agents, catalog.agent, catalog.agent_version
        self.check_start = catalog.check_start
        self.start_run, self.idempotent = starts.start_run, starts.idempotent
        self.check_new_run_id = starts.check_new_run_id
        self.started_trace, self.trace_id = starts.started_trace, starts.trace_id
        self.fork, self.rerun, self.rerun_batch = travel.fork, travel.rerun, travel.rerun_batch
        # webhooks of runs
        self.check_webhook, self.webhook_secret = webhooks.check_url, webhooks.secret
        self.webhook_attempts, self.webhook_summary = webhooks.run_attempts, webhooks.summary
        # one run: its row, its status view, whether it is still starting or stuck
        self.run, self.status, self.progress = runs.run, runs.status, runs.progress
        self.check_run, self.check_position = runs.check_run, runs.check_position
        self.run_if_written, self.run_or_planned = runs.run_if_written, runs.run_or_planned
        self.starting = runs.starting
        self.stuck, self.with_stuck = stuck.stuck, stuck.with_stuck
        # a running run
        self.pause, self.resume, self.cancel, self.send = live.pause, live.resume, live.cancel, live.send
        self.approve, self.deny, self.result = live.approve, live.deny, live.result
        # reads (Postgres)
        self.runs, self.runs_page = listing.runs, listing.runs_page
        self.timeline, self.waterfall, self.state, self.diff = log.timeline, log.waterfall, log.state, log.diff
        self.events, self.tail, self.last_seq, self.listen = log.events, log.tail, log.last_seq, log.listen
        self.effects, self.export, self.compare = log.effects, log.export, log.compare
        self.tree, self.budget, self.children, self.lineage = log.tree, log.budget, log.children, log.lineage
        self.verify, self.verify_all, self.delete = records.verify, records.verify_all, records.delete
        # deploying new code
        self.replay, self.check_deploy = deploys.replay, deploys.check_deploy
        self.set_current_deployment, self.deployment = deploys.set_current_deployment, deploys.deployment
        # compaction
        self.apply_compaction_schedule = compaction.apply_compaction_schedule
        self.compaction_schedule, self.compact = compaction.compaction_schedule, compaction.compact
        self.compactions = compaction.compactions
        # episodic memory (served by the memory worker, reached through Temporal)
        self.memory_search, self.memory_show = memory.memory_search, memory.memory_show
        self.memory_forget = memory.memory_forget

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
        return await self._temporal()

    @property
    def client(self) -> Client:
        return self._temporal.client

    async def fleet_stats(self, period: str = "24h", *, tenant_id: str | None = None) -> FleetStats:
        """The fleet over `period` (1h, 6h, 24h, 7d, 30d): runs by status over time, steps a minute, model
        calls and 429s per model key, runs waiting, cost per day and agent, the slowest and costliest
        runs (`wp.limits.stats`: model keys are the fleet's, every other figure the tenant's)."""
        return await self.limits.stats(period, self.tenant(tenant_id))
