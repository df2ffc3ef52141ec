"""Agent versions (migration 0018): what each fingerprint a tenant's runs started with stands for.

A version is written when a run starts with it (insert-or-ignore: content-addressed, it never
changes), in the transaction that creates the run row; reads are tenant-scoped like every other,
so one tenant never learns what another's agents were.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import InvalidInput, NotFound
from waypoint.store.base import StoreBase, run_filter
from waypoint.store.schema import agent_versions, runs
from waypoint.versions import AgentVersion


async def insert_version(conn: AsyncConnection, tenant_id: str, version: AgentVersion) -> str:
    """Keep `version` for the tenant (once); its fingerprint."""
    fingerprint = version.fingerprint
    await conn.execute(
        insert(agent_versions)
        .values(
            tenant_id=tenant_id,
            fingerprint=fingerprint,
            agent=version.agent,
            instructions=version.instructions,
            tool_schemas=version.tools,
            models=version.models,
            mcp_tools=version.mcp_tools,
        )
        .on_conflict_do_nothing(index_elements=["tenant_id", "fingerprint"])
    )
    return fingerprint


def prefix_filter(column: Any, prefix: str) -> Any:
    """Rows whose fingerprint starts with `prefix` (checked hex by `checks.check_fingerprint`)."""
    return column.like(f"{prefix}%")


class VersionStore(StoreBase):
    async def agent_version(self, tenant_id: str, fingerprint: str) -> AgentVersion:
        """The tenant's agent version whose fingerprint is, or starts with, `fingerprint`;
        NotFound when none is, InvalidInput when the prefix fits several."""
        query = (
            select(agent_versions)
            .where(agent_versions.c.tenant_id == tenant_id, prefix_filter(agent_versions.c.fingerprint, fingerprint))
            .order_by(agent_versions.c.fingerprint)
            .limit(2)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        if not rows:
            raise NotFound(
                f"no agent version {fingerprint!r} for tenant {tenant_id!r}: "
                "`waypoint runs` shows each run's fingerprint, `waypoint agents` each agent's current one"
            )
        if len(rows) > 1:
            raise InvalidInput(f"fingerprint prefix {fingerprint!r} fits several agent versions: give more of it")
        return AgentVersion.of(rows[0])

    async def run_fingerprint(self, tenant_id: str, run_id: str) -> str | None:
        """The fingerprint of the version the run started with (None: it started before versions)."""
        async with self.engine.connect() as conn:
            return await conn.scalar(select(runs.c.agent_fingerprint).where(run_filter(tenant_id, run_id)))
