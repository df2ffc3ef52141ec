"""`wp.schedules`: scheduled agents on Temporal Schedules, tenant-scoped and validated here for
every surface (CLI `waypoint cron`, HTTP `/v1/schedules`, MCP, the viewer, the Agent Protocol's crons).

    s = await wp.schedules.create(agent="triage", task="Triage new tickets", cron="0 9 * * mon-fri", tz="Europe/Paris")
    await wp.schedules.trigger(s.schedule_id)        # fire now, as Temporal would
    runs = await wp.runs(schedule_id=s.schedule_id)  # each fire is an ordinary run

A schedule is a row in Postgres (the tenant's record, which scopes it) and a Temporal Schedule of
the same id (its state: paused, next fire times). Create writes the row, then the Schedule, and
takes the row back if Temporal refuses; delete removes the Schedule, then the row. So there is
never a half-made schedule a tenant can see, and another tenant's schedule is NotFound.

`catchup_seconds` (default 60): after an outage (Temporal down, the schedule paused by no one),
fire times missed within the last minute still fire; older ones are dropped. Temporal's own
default is a year, which after a long outage fires a backlog of stale agent runs.
"""

from __future__ import annotations

import asyncio
import builtins
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from waypoint.access import Action, Target, TargetKind
from waypoint.checks import (
    check_count,
    check_name,
    check_text,
    new_schedule_id,
)
from waypoint.client._catalog import Catalog
from waypoint.client._schedule_spec import schedule_spec
from waypoint.client._scope import Scope, TemporalLink
from waypoint.client._webhooks import Webhooks
from waypoint.errors import InvalidInput, NotFound
from waypoint.names import ScheduleOverlap
from waypoint.store import RunStore
from waypoint.store.schedules import ScheduleRow

if TYPE_CHECKING:
    from waypoint.gateway.agent_schedules import ScheduleGateway

CATCHUP_DEFAULT_SECONDS = 60.0
RECENT_RUNS = 5  # fired runs a schedule lists
DESCRIBES_AT_ONCE = 16  # Temporal calls a listing makes at a time
_UNSET: Any = object()  # update(): "leave as it is", where None means "clear"


def schedule_target(schedule_id: str | None) -> Target | None:
    return Target(TargetKind.SCHEDULE, schedule_id) if schedule_id is not None else None


class Schedules:
    def __init__(self, store: RunStore, temporal: TemporalLink, scope: Scope, catalog: Catalog, webhooks: Webhooks):
        self._store = store
        self._temporal = temporal
        self._scope = scope
        self._catalog = catalog
        self._webhooks = webhooks

    async def _gateway(self) -> ScheduleGateway:
        from waypoint.gateway.agent_schedules import ScheduleGateway

        return ScheduleGateway((await self._temporal()).client, self._scope.settings)

    def _tenant(self, tenant_id: str | None, schedule_id: str | None = None) -> str:
        check_name("the schedule id", schedule_id)
        return self._scope.tenant(tenant_id)

    async def create(
        self,
        *,
        agent: str,
        task: str,
        every: float | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        overlap: str = ScheduleOverlap.SKIP,
        catchup_seconds: float = CATCHUP_DEFAULT_SECONDS,
        jitter_seconds: float = 0,
        end_at: datetime | None = None,
        model: str | None = None,
        max_steps: int | None = None,
        priority: int | None = None,
        webhook: str | None = None,
        thread_id: str | None = None,
        schedule_id: str | None = None,
        paused: bool = False,
        tenant_id: str | None = None,
    ) -> ScheduleRow:
        """A new scheduled agent: `agent` runs `task` every `every` seconds, or on `cron` (five
        fields or @daily, in time zone `tz`). `overlap` (a ScheduleOverlap) says what a fire does
        while the last fired run still runs; `catchup_seconds`, how late a missed fire may still
        fire after an outage; `jitter_seconds`, a random delay up to this much per fire; `end_at`,
        no fire after it. Each fired run gets `model`, `max_steps`, `priority`, `webhook` and,
        with `thread_id`, joins that thread. `paused` creates it paused."""
        async with self._scope.act(Action.SCHEDULE_WRITE, tenant_id, schedule_target(schedule_id)) as tenant_id:
            tenant = self._tenant(tenant_id, schedule_id)
            check_name("the agent", agent)
            if not check_text("the task", task).strip():
                raise InvalidInput("the task is empty: say what the agent should do")
            check_name("the thread id", thread_id)
            spec = schedule_spec(
                self._webhooks,
                every=every,
                cron=cron,
                tz=tz,
                overlap=overlap,
                catchup_seconds=catchup_seconds,
                jitter_seconds=jitter_seconds,
                end_at=end_at,
                model=model,
                max_steps=max_steps,
                priority=priority,
                webhook=webhook,
            )
            await self._catalog.check_start(agent, model or self._scope.settings.model)
            if thread_id is not None:
                await self._store.threads.get_thread(tenant, thread_id)  # the tenant's own thread
            gateway = await self._gateway()  # Temporal is reachable before anything is written
            row = await self._store.schedules.create_schedule(
                tenant, schedule_id or new_schedule_id(), agent=agent, task=task, thread_id=thread_id, spec=spec
            )
            try:
                await gateway.create(row, paused=paused)
            except BaseException:
                await self._store.schedules.delete_schedule(tenant, row.schedule_id)  # no half-made schedule
                raise
            return await self._live(gateway, row)

    async def _live(self, gateway: ScheduleGateway, row: ScheduleRow) -> ScheduleRow:
        """The row with what Temporal says now and the last runs it fired. A row whose Schedule
        Temporal lost (deleted by hand) says so in its note."""
        try:
            live = await gateway.live(row.schedule_id)
        except NotFound:
            row = replace(row, paused=True, note="Temporal has no such Schedule: delete this one and create it again")
        else:
            # Temporal lists the times a paused Schedule would fire at; it fires at none of them.
            row = replace(row, paused=live.paused, note=live.note, next_runs=[] if live.paused else live.next_runs)
        recent = await self._store.schedules.scheduled_runs(row.tenant_id, [row.schedule_id], per=RECENT_RUNS)
        return replace(row, recent=recent[row.schedule_id])

    async def get(self, schedule_id: str, *, tenant_id: str | None = None) -> ScheduleRow:
        tenant = self._tenant(tenant_id, schedule_id)
        row = await self._store.schedules.get_schedule(tenant, schedule_id)
        return await self._live(await self._gateway(), row)

    async def list(
        self,
        *,
        tenant_id: str | None = None,
        agent: str | None = None,
        thread_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[ScheduleRow]:
        """The tenant's schedules, newest first, each with its live state and last runs."""
        tenant = self._tenant(tenant_id)
        check_name("the agent", agent)
        check_name("the thread id", thread_id)
        check_count("the limit", limit, high=500)
        check_count("the offset", offset, low=0, high=10**6)
        rows = await self._store.schedules.list_schedules(
            tenant, agent=agent, thread_id=thread_id, limit=limit, offset=offset
        )
        if not rows:
            return []
        gateway = await self._gateway()
        gate = asyncio.Semaphore(DESCRIBES_AT_ONCE)

        async def live(row: ScheduleRow) -> ScheduleRow:
            async with gate:
                return await self._live(gateway, row)

        return list(await asyncio.gather(*(live(r) for r in rows)))

    async def pause(self, schedule_id: str, *, note: str | None = None, tenant_id: str | None = None) -> ScheduleRow:
        """Stop firing until resumed (a run already fired goes on); `note` says why."""
        async with self._scope.act(Action.SCHEDULE_WRITE, tenant_id, schedule_target(schedule_id)) as tenant_id:
            tenant = self._tenant(tenant_id, schedule_id)
            check_text("the note", note, high=1000)
            row = await self._store.schedules.get_schedule(tenant, schedule_id)
            gateway = await self._gateway()
            await gateway.pause(schedule_id, note)
            return await self._live(gateway, row)

    async def resume(self, schedule_id: str, *, note: str | None = None, tenant_id: str | None = None) -> ScheduleRow:
        async with self._scope.act(Action.SCHEDULE_WRITE, tenant_id, schedule_target(schedule_id)) as tenant_id:
            tenant = self._tenant(tenant_id, schedule_id)
            check_text("the note", note, high=1000)
            row = await self._store.schedules.get_schedule(tenant, schedule_id)
            gateway = await self._gateway()
            await gateway.resume(schedule_id, note)
            return await self._live(gateway, row)

    async def trigger(self, schedule_id: str, *, tenant_id: str | None = None) -> ScheduleRow:
        """Fire now, paused or not, under the schedule's overlap policy (a skip policy fires nothing
        while the last fired run still runs). The fired run appears in `recent` once it starts."""
        async with self._scope.act(Action.SCHEDULE_WRITE, tenant_id, schedule_target(schedule_id)) as tenant_id:
            tenant = self._tenant(tenant_id, schedule_id)
            row = await self._store.schedules.get_schedule(tenant, schedule_id)
            gateway = await self._gateway()
            await gateway.trigger(row)
            return await self._live(gateway, row)

    async def update(
        self,
        schedule_id: str,
        *,
        task: str | None = None,
        every: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        overlap: str | None = None,
        catchup_seconds: float | None = None,
        jitter_seconds: float | None = None,
        end_at: datetime | None = _UNSET,
        model: str | None = _UNSET,
        max_steps: int | None = _UNSET,
        priority: int | None = _UNSET,
        webhook: str | None = _UNSET,
        tenant_id: str | None = None,
    ) -> ScheduleRow:
        """Change a schedule; what is not given stays. Giving `every` replaces a cron and giving
        `cron` replaces an interval; `end_at`, `model`, `max_steps`, `priority` and `webhook`
        are cleared with None. Paused stays paused."""
        async with self._scope.act(Action.SCHEDULE_WRITE, tenant_id, schedule_target(schedule_id)) as tenant_id:
            tenant = self._tenant(tenant_id, schedule_id)
            row = await self._store.schedules.get_schedule(tenant, schedule_id)
            if task is not None and not check_text("the task", task).strip():
                raise InvalidInput("the task is empty: say what the agent should do")
            if every is not None and cron is not None:
                raise InvalidInput(
                    "give a schedule exactly one of every (seconds between runs) or cron (an expression)"
                )
            old = row.spec
            keep_cron = cron is None and every is None
            given: dict[str, Any] = {
                "end_at": end_at,
                "model": model,
                "max_steps": max_steps,
                "priority": priority,
                "webhook": webhook,
            }
            kept: dict[str, Any] = {k: (old.get(k) if v is _UNSET else v) for k, v in given.items()}
            old_end = kept["end_at"]
            spec = schedule_spec(
                self._webhooks,
                every=every if every is not None else (old.get("every") if keep_cron else None),
                cron=cron if cron is not None else (old.get("cron") if keep_cron else None),
                tz=tz if tz is not None else ("UTC" if every is not None else old.get("tz", "UTC")),
                overlap=overlap or old.get("overlap", ScheduleOverlap.SKIP),
                catchup_seconds=catchup_seconds if catchup_seconds is not None else old["catchup"],
                jitter_seconds=jitter_seconds if jitter_seconds is not None else old.get("jitter", 0),
                end_at=datetime.fromisoformat(old_end) if isinstance(old_end, str) else old_end,
                model=kept["model"],
                max_steps=kept["max_steps"],
                priority=kept["priority"],
                webhook=kept["webhook"],
            )
            if spec["model"] != old.get("model"):
                await self._catalog.check_start(row.agent, spec["model"] or self._scope.settings.model)
            gateway = await self._gateway()
            changed = replace(row, task=task if task is not None else row.task, spec=spec)
            await gateway.update(changed)
            row = await self._store.schedules.update_schedule(tenant, schedule_id, task=changed.task, spec=spec)
            return await self._live(gateway, row)

    async def delete(self, schedule_id: str, *, tenant_id: str | None = None) -> None:
        """Delete the schedule: Temporal's Schedule, then the row. The runs it fired stay (with
        their schedule id); a run still running goes on."""
        async with self._scope.act(Action.SCHEDULE_WRITE, tenant_id, schedule_target(schedule_id)) as tenant_id:
            tenant = self._tenant(tenant_id, schedule_id)
            await self._store.schedules.get_schedule(tenant, schedule_id)  # the tenant's, or NotFound
            await (await self._gateway()).delete(schedule_id)
            await self._store.schedules.delete_schedule(tenant, schedule_id)


__all__ = ["CATCHUP_DEFAULT_SECONDS", "Schedules"]
