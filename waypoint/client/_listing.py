"""Listing the tenant's runs: a page of them (what the HTTP API, the viewer and the CLI list),
each unfinished one marked stuck if it is and each waiting one with its place in line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from waypoint.checks import NAME_MAX, check_choice, check_count, check_fingerprint, check_name, check_text, parse_when
from waypoint.client._limits import FleetLimits
from waypoint.client._scope import Scope
from waypoint.client._stuck import Stuck
from waypoint.errors import InvalidInput, NotFound
from waypoint.names import RunSort, RunStatus
from waypoint.store import RunStore
from waypoint.store.reads import RunsPage
from waypoint.store.rows import RunRow


class Listing:
    def __init__(self, store: RunStore, scope: Scope, limits: FleetLimits, stuck: Stuck):
        self._store = store
        self._scope = scope
        self._limits = limits
        self._stuck = stuck

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
        tenant = self._scope.scoped(tenant_id, *(run_ids or []))
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
            # an unknown schedule is named, not an empty page
            await self._store.schedules.get_schedule(tenant, schedule_id)
        if batch_id is not None and not page.runs and not await self._store.has_batch(tenant, batch_id):
            raise NotFound(
                f"no batch {batch_id!r} for tenant {tenant!r}: `waypoint rerun --select ...` prints its batch's id"
            )
        return replace(page, runs=await self._limits.with_waits(await self._stuck.with_stuck(page.runs)))
