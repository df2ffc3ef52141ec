"""What every client service is built from besides the store: the Temporal link (connected on
first use) and the tenant scope (which tenant a call acts for, and whether a run is that tenant's)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from waypoint.access import NEEDS, Action, Actor, AuditEntry, Outcome, Target, TargetKind, current_actor
from waypoint.checks import check_name, check_tenant
from waypoint.config import Settings
from waypoint.errors import ConfigError, Forbidden, NotFound, Unavailable, WaypointError
from waypoint.store import RunStore
from waypoint.store.base import not_found

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

_ACTING: ContextVar[bool] = ContextVar("waypoint_acting", default=False)  # inside a Scope.act block


def other_tenant(actor: Actor, tenant: str) -> Forbidden:
    return Forbidden(f"{actor.id} acts for tenant {actor.tenant!r}, not {tenant!r}: use a key of {tenant!r}")


def refused(actor: Actor, action: Action, tenant: str, target: Target | None = None) -> WaypointError | None:
    """Why `actor` may not do `action` for `tenant` (None: it may): the role it needs, or its tenant
    (a run of a tenant it does not act for is "not found", as another tenant's run always is)."""
    needed = NEEDS[action]
    if actor.tenant is not None and actor.tenant != tenant:
        if target is not None and target.kind == TargetKind.RUN:
            return not_found(tenant, target.id)
        return other_tenant(actor, tenant)
    if not actor.role.allows(action):
        return Forbidden(
            f"{action} needs the role {needed}; {actor.id} has the role {actor.role}: "
            f"ask an admin for a key or a sign-in with the role {needed}",
            details={"needs": needed.value},
        )
    return None


async def _no_audit(entry: AuditEntry) -> None:
    return None


def run_target(run_id: str | None) -> Target | None:
    """The audit log's target for an action on run `run_id` (None: a run not named yet)."""
    return Target(TargetKind.RUN, run_id) if run_id is not None else None


def thread_target(thread_id: str | None) -> Target | None:
    return Target(TargetKind.THREAD, thread_id) if thread_id is not None else None


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
        refused, failed) is written to the audit log when the block ends. An action inside another
        (a thread's turn starts a run, a batch reruns runs) is checked the same way and written
        once, as the outer one.

            async with self._scope.act(Action.CANCEL, tenant_id, Target(TargetKind.RUN, run_id)) as tenant:
                ...
        """
        actor = current_actor()
        tenant = self._chosen(tenant_id)
        refusal = refused(actor, action, tenant, target)
        outer = not _ACTING.get()
        if refusal is not None:
            if outer:
                await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.REFUSED, refusal.message))
            raise refusal
        if not outer:
            yield tenant
            return
        token = _ACTING.set(True)
        try:
            yield tenant
        except Forbidden as inner:  # an action inside it was refused
            await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.REFUSED, inner.message))
            raise
        except Exception as failed:
            # Any failure is recorded: a WaypointError with its message, anything else (a driver's or
            # Temporal's error, whose text may quote what it was sent) by its type only.
            why = failed.message if isinstance(failed, WaypointError) else f"{type(failed).__name__} (internal)"
            await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.FAILED, why))
            raise
        finally:
            _ACTING.reset(token)
        await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.OK))

    async def allowed(self, action: Action, tenant_id: str | None, target: Target | None = None) -> str:
        """The tenant `action` acts for, once the current actor may do it there; else Forbidden, and
        the refusal written to the audit log. A read that needs a role (reading the audit log) checks
        with this: its refusals are audited, its reads are not (the log is not one entry a read)."""
        actor = current_actor()
        tenant = self._chosen(tenant_id)
        refusal = refused(actor, action, tenant, target)
        if refusal is not None:
            await self.audit_sink(AuditEntry(actor, action, tenant, target, Outcome.REFUSED, refusal.message))
            raise refusal
        return tenant

    def on_run(self, action: Action, tenant_id: str | None, run_id: str) -> AbstractAsyncContextManager[str]:
        """`act` on one run: `async with self._scope.on_run(Action.PAUSE, tenant_id, run_id) as tenant_id:`."""
        # The id is checked inside the block (by the action's own reads), so a malformed one is still
        # an audit entry: failed, with the id made storable.
        return self.act(action, tenant_id, Target(TargetKind.RUN, run_id))

    def _chosen(self, tenant_id: str | None) -> str:
        """The tenant given, else the current actor's (a key's), else the configured one."""
        if tenant_id is not None:
            return check_tenant(tenant_id)
        return current_actor().tenant or self.settings.tenant

    def tenant(self, tenant_id: str | None = None) -> str:
        """The tenant a call acts for: the one given, else the current actor's, else the configured
        one. Forbidden when the current actor acts for another tenant (a key of tenant A never reads
        B's runs)."""
        tenant = self._chosen(tenant_id)
        actor = current_actor()
        if actor.tenant is not None and actor.tenant != tenant:
            raise other_tenant(actor, tenant)
        return tenant

    def scoped(self, tenant_id: str | None, *run_ids: str | None) -> str:
        """The tenant a call acts for, once the run ids it names are ids the store can hold. A run
        named for a tenant the current actor does not act for is "not found", as another tenant's
        run always is."""
        for run_id in run_ids:
            check_name("the run id", run_id)
        actor, tenant = current_actor(), self._chosen(tenant_id)
        named = [r for r in run_ids if r is not None]
        if actor.tenant is not None and actor.tenant != tenant and named:
            raise not_found(tenant, named[0])
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
