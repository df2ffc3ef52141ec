"""One run as every surface shows it: its row (or, while its worker has not written it, the row its
start asked for), and `status()`, the row plus its live progress, which the HTTP API, the MCP server
and the CLI all show (Postgres answers when Temporal is down)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

from waypoint.checks import check_seq
from waypoint.client._limits import FleetLimits
from waypoint.client._scope import Scope, TemporalLink
from waypoint.client._stuck import Stuck
from waypoint.errors import InvalidInput, NotFound, WaypointError
from waypoint.names import FINISHED, STARTING, RunStatus
from waypoint.store import RunStore
from waypoint.store.base import not_found
from waypoint.store.budget import BudgetView
from waypoint.store.rows import RunRow
from waypoint.types import RunProgress


@dataclass(frozen=True)
class RunStatusView:
    """A run's status: its row (`row.shown_status` is `stuck` while it cannot make progress), its
    live progress from Temporal while it runs (None once it ended, while it is stuck, or when
    Temporal did not answer: `live_error` says why), and its tree's budget pool. `planned`: the run
    is so new that its worker has not written its row; `row` is what its start asked for."""

    row: RunRow
    live: RunProgress | None = None
    live_error: str | None = None
    budget: BudgetView | None = None
    planned: bool = False


class Runs:
    def __init__(self, store: RunStore, temporal: TemporalLink, scope: Scope, limits: FleetLimits, stuck: Stuck):
        self._store = store
        self._temporal = temporal
        self._scope = scope
        self._limits = limits
        self._stuck = stuck

    async def run(self, run_id: str, *, tenant_id: str | None = None, check_stuck: bool = False) -> RunRow:
        """The run's row; `check_stuck`: marked with why it is stuck, if it has not ended (Temporal is asked)."""
        found = await self._store.get_run(self._scope.scoped(tenant_id, run_id), run_id)
        row = (await self._limits.with_waits([found]))[0]
        return (await self._stuck.with_stuck([row]))[0] if check_stuck else row

    async def status(
        self, run_id: str, *, tenant_id: str | None = None, check_stuck: bool = True, planned: bool = False
    ) -> RunStatusView:
        """The run's row (`check_stuck`: marked stuck, as `run`) with, while it runs and is not stuck,
        its live progress; Temporal unreachable, Postgres still answers (`live_error` says why). With
        `planned`, a run whose row is not written yet is the row its start asked for (no budget)."""
        try:
            row = await self.run(run_id, tenant_id=tenant_id, check_stuck=check_stuck)
        except NotFound:
            if not planned:
                raise
            if not await self.starting(run_id, tenant_id=tenant_id):  # its worker wrote the row meanwhile
                return await self.status(run_id, tenant_id=tenant_id, check_stuck=check_stuck, planned=planned)
            why = await self._stuck.stuck(run_id, tenant_id=tenant_id)
            row = await self.run_or_planned(run_id, tenant_id=tenant_id)  # (or its row, written meanwhile)
            return RunStatusView(replace(row, stuck=why), planned=True)
        live, error = None, None
        if row.status not in FINISHED and not row.stuck:  # a stuck run answers no query
            try:
                live = await self.progress(run_id, tenant_id=tenant_id)
            except WaypointError as exc:  # Temporal unreachable, or the run unreadable
                error = str(exc)
        budget = await self._store.budget.run_budget(row.tenant_id, run_id)
        return RunStatusView(row, live, error, budget)

    async def progress(self, run_id: str, *, tenant_id: str | None = None) -> RunProgress:
        """The live state of a running run: step, status, pending approvals."""
        await self._scope.check_tenant(run_id, tenant_id)
        return await (await self._temporal()).progress(run_id)

    async def check_run(self, run_id: str, *, tenant_id: str | None = None) -> None:
        """NotFound unless the run is the tenant's (a run so new it has no row yet is asked of Temporal)."""
        await self._scope.check_tenant(run_id, tenant_id)

    async def check_position(self, run_id: str, after_seq: int, *, tenant_id: str | None = None) -> int:
        """Where a reader of the run's log resumes (a stream's Last-Event-ID): 0, or the seq of one of
        its events. NotFound unless the run is the tenant's; InvalidInput past its newest event, an
        id no stream sent (the log only grows, and an event is sent once it is written)."""
        await self._scope.check_tenant(run_id, tenant_id)
        check_seq("the position", after_seq)
        if after_seq == 0:
            return 0
        try:
            last = await self._store.streams.last_seq(self._scope.tenant(tenant_id), run_id)
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
        tenant = self._scope.scoped(tenant_id, run_id)
        row = await self.run_if_written(run_id, tenant_id=tenant)
        if row is not None:
            return row
        inp = await (await self._temporal()).start_input(run_id)
        if inp is None or inp.tenant_id != tenant:  # gone meanwhile, or never the tenant's
            return await self.run(run_id, tenant_id=tenant)
        status = RunStatus.QUEUED if inp.after_run else RunStatus.SCHEDULED if inp.start_at else STARTING
        return RunRow(
            run_id=run_id,
            tenant_id=tenant,
            agent=inp.agent,
            task=inp.task,
            model=inp.model or self._scope.settings.model or "",  # "": its agent's own
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
        tenant = self._scope.scoped(tenant_id, run_id)
        if await self._store.streams.run_exists(tenant, run_id):
            return False
        await self._scope.check_tenant(run_id, tenant)
        if await (await self._temporal()).ended_without_row(run_id) is not None:
            raise not_found(tenant, run_id)
        return True
