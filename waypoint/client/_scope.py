"""What every client service is built from besides the store: the Temporal link (connected on
first use) and the tenant scope (which tenant a call acts for, and whether a run is that tenant's)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from waypoint.access import NEEDS, Action, AuditEntry, Outcome, Target, current_actor
from waypoint.checks import check_name, check_tenant
from waypoint.config import Settings
from waypoint.errors import ConfigError, Forbidden, NotFound, Unavailable, WaypointError
from waypoint.store import RunStore

if TYPE_CHECKING:
    from temporalio.client import Client

    from waypoint.gateway.temporal import TemporalGateway


def database_url(settings: Settings) -> str:
    """The configured database, else the one of the embedded stack running in the state folder."""
    from waypoint.gateway.stack import running_stack

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


class TemporalLink:
    """The Temporal side, connected on first use (`waypoint serve` starts without it)."""

    def __init__(self, client: Client | None, settings: Settings):
        self._client = client
        self._gateway: TemporalGateway | None = None
        self._settings = settings

    async def __call__(self) -> TemporalGateway:
        if self._gateway is None:
            from waypoint.gateway.temporal import TemporalGateway, connect

            client = self._client or await connect(self._settings)
            self._client = client
            self._gateway = TemporalGateway(client, self._settings)
        return self._gateway

    @property
    def client(self) -> Client:
        if self._client is None:
            raise ConfigError("this Waypoint is not connected to Temporal yet: await wp.temporal() first")
        return self._client


AuditSink = Callable[[AuditEntry], Awaitable[object]]


async def _no_audit(entry: AuditEntry) -> None:
    return None


class Scope:
    """The tenant a call acts for, checked once for every service, and whether the current actor
    may act (`act`)."""

    def __init__(self, settings: Settings, store: RunStore, temporal: TemporalLink):
        self.settings = settings
        self._store = store
        self._temporal = temporal
        self.audit_sink: AuditSink = _no_audit  # the audit log sets itself here

    @asynccontextmanager
    async def act(self, action: Action, tenant_id: str | None, target: Target | None = None) -> AsyncIterator[str]:
        """The tenant `action` acts for, once the current actor may do it there; its outcome (done,
        refused, failed) is written to the audit log when the block ends.

            async with self._scope.act(Action.CANCEL, tenant_id, Target(TargetKind.RUN, run_id)) as tenant:
                ...
        """
        actor = current_actor()
        tenant = await self.allowed(action, tenant_id, target)
        try:
            yield tenant
        except Exception as failed:
            # Any failure is recorded: a WaypointError with its message, anything else (a driver's or
            # Temporal's error, whose text may quote what it was sent) by its type only.
            why = failed.message if isinstance(failed, WaypointError) else f"{type(failed).__name__} (internal)"
            await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.FAILED, why))
            raise
        await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.OK))

    async def allowed(self, action: Action, tenant_id: str | None, target: Target | None = None) -> str:
        """The tenant `action` acts for, once the current actor may do it there; else Forbidden, and
        the refusal written to the audit log. A read that needs a role (reading the audit log) checks
        with this: its refusals are audited, its reads are not (the log is not one entry a read)."""
        actor = current_actor()
        tenant = self.tenant(tenant_id)
        refusal = None
        if actor.tenant is not None and actor.tenant != tenant:
            refusal = f"{actor.id} acts for tenant {actor.tenant!r}, not {tenant!r}"
        elif not actor.role.allows(action):
            needed = NEEDS[action]
            refusal = (
                f"{action} needs the role {needed}; {actor.id} has the role {actor.role}: "
                f"ask an admin for a key or a sign-in with the role {needed}"
            )
        if refusal is not None:
            await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.REFUSED, refusal))
            raise Forbidden(refusal, details={"needs": NEEDS[action].value})
        return tenant

    def tenant(self, tenant_id: str | None = None) -> str:
        """The tenant a call acts for: the one given, else the configured one."""
        return self.settings.tenant if tenant_id is None else check_tenant(tenant_id)

    def scoped(self, tenant_id: str | None, *run_ids: str | None) -> str:
        """The tenant a call acts for, once the run ids it names are ids the store can hold."""
        for run_id in run_ids:
            check_name("the run id", run_id)
        return self.tenant(tenant_id)

    async def check_tenant(self, run_id: str, tenant_id: str | None) -> None:
        """Another tenant's run is "not found". A run so new that its row is not written yet
        is checked against the tenant Temporal holds for it."""
        tenant = self.scoped(tenant_id, run_id)
        try:
            await self._store.get_run(tenant, run_id)
            return
        except NotFound as missing:
            # Temporal is connected on first use (`connect(temporal=False)`, as `waypoint serve` does):
            # asked only now, so a run started elsewhere is found before its row is written, not
            # 404 until some other request happened to connect. Unreachable, the database is the
            # only witness.
            try:
                gateway = await self._temporal()
            except Unavailable:
                raise missing from None
            if await gateway.memo_tenant(run_id) != tenant:
                raise
