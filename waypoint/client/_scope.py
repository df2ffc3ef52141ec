"""What every client service is built from besides the store: the Temporal link (connected on
first use) and the tenant scope (which tenant a call acts for, and whether a run is that tenant's)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from waypoint.checks import check_name, check_tenant
from waypoint.config import Settings
from waypoint.errors import ConfigError, NotFound, Unavailable
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


class Scope:
    """The tenant a call acts for, checked once for every service."""

    def __init__(self, settings: Settings, store: RunStore, temporal: TemporalLink):
        self.settings = settings
        self._store = store
        self._temporal = temporal

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
