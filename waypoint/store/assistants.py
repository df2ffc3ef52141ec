"""Agent Protocol assistants: a tenant's configured agents and every version of each.

An assistant names an agent of the catalog (`graph_id`) and the config and context its runs start
with. Each update writes a new version (versions are never changed); `assistants.version` is the
one runs use, the newest unless `set_latest` chose an older one. Ids are one namespace across
tenants: another tenant's id is "not found" on reads and a Conflict on create, never a way in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.store.base import StoreBase
from waypoint.store.schema import assistant_versions, assistants

_FIELDS = ("graph_id", "config", "context", "metadata", "name", "description")


@dataclass(frozen=True)
class AssistantRow:
    """An Agent Protocol assistant at one version: an agent of the catalog (`graph_id`) with config
    and context for its runs. A catalog agent is an assistant too (`builtin`: version 1, read-only)."""

    assistant_id: str
    graph_id: str
    name: str
    version: int
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    tenant_id: str | None = None  # None: a catalog agent, everyone's
    created_at: datetime | None = None
    updated_at: datetime | None = None
    builtin: bool = False


def _not_found(assistant_id: str) -> NotFound:
    return NotFound(f"no assistant {assistant_id!r}: POST /assistants/search lists them")


def _current() -> Select[Any]:
    """Each assistant joined with its current version's config and context."""
    v = assistant_versions
    return select(assistants, v.c.config, v.c.context).join(
        v, (v.c.assistant_id == assistants.c.assistant_id) & (v.c.version == assistants.c.version)
    )


def _row(found: Any) -> AssistantRow:
    return AssistantRow(
        assistant_id=found["assistant_id"],
        graph_id=found["graph_id"],
        name=found["name"],
        version=found["version"],
        config=found["config"] or {},
        context=found["context"] or {},
        metadata=found["metadata"] or {},
        description=found["description"],
        tenant_id=found.get("tenant_id"),
        created_at=found["created_at"],
        updated_at=found.get("updated_at", found["created_at"]),
    )


class AssistantStore(StoreBase):
    async def create_assistant(
        self, tenant_id: str, assistant_id: str, values: dict[str, Any], *, if_exists: str = "raise"
    ) -> AssistantRow:
        """A new assistant at version 1 (`values`: graph_id, config, context, metadata, name,
        description); an existing id is a Conflict, or with `if_exists="do_nothing"` that assistant."""
        async with self.engine.begin() as conn:
            head = {k: values[k] for k in ("graph_id", "name", "description", "metadata")}
            made = (
                await conn.execute(
                    insert(assistants)
                    .values(assistant_id=assistant_id, tenant_id=tenant_id, version=1, **head)
                    .on_conflict_do_nothing(index_elements=["assistant_id"])
                    .returning(assistants.c.assistant_id)
                )
            ).first()
            if made is None:
                mine = select(assistants.c.tenant_id).where(assistants.c.assistant_id == assistant_id)
                owner = await conn.scalar(mine)
                if if_exists != "do_nothing" or owner != tenant_id:
                    raise Conflict(
                        f"assistant {assistant_id!r} exists already: pick another id, or pass if_exists=do_nothing"
                    )
            else:
                await conn.execute(assistant_versions.insert().values(assistant_id=assistant_id, version=1, **values))
            return await self._assistant(conn, tenant_id, assistant_id)

    async def get_assistant(self, tenant_id: str, assistant_id: str, version: int | None = None) -> AssistantRow:
        """The assistant at its current version, or at `version`."""
        async with self.engine.connect() as conn:
            row = await self._assistant(conn, tenant_id, assistant_id)
            if version is None or version == row.version:
                return row
            return await self._version(conn, row, version)

    async def _assistant(self, conn: AsyncConnection, tenant_id: str, assistant_id: str) -> AssistantRow:
        mine = _current().where(assistants.c.assistant_id == assistant_id, assistants.c.tenant_id == tenant_id)
        found = (await conn.execute(mine)).mappings().first()
        if found is None:
            raise _not_found(assistant_id)
        return _row(found)

    async def _version(self, conn: AsyncConnection, row: AssistantRow, version: int) -> AssistantRow:
        v = assistant_versions
        query = select(v).where(v.c.assistant_id == row.assistant_id, v.c.version == version)
        found = (await conn.execute(query)).mappings().first()
        if found is None:
            raise NotFound(
                f"assistant {row.assistant_id!r} has no version {version}: "
                f"POST /assistants/{row.assistant_id}/versions lists them"
            )
        return _row({**found, "tenant_id": row.tenant_id})

    async def search_assistants(
        self,
        tenant_id: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[AssistantRow]:
        """The tenant's assistants, newest first: of `graph_id`, whose name holds `name` (any case),
        whose metadata contains `metadata`."""
        if limit < 1 or offset < 0:
            raise InvalidInput("limit must be 1 or more and offset 0 or more")
        query = self._filtered(_current(), tenant_id, graph_id, name, metadata)
        query = query.order_by(assistants.c.created_at.desc(), assistants.c.assistant_id).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            return [_row(r) for r in (await conn.execute(query)).mappings()]

    async def count_assistants(
        self,
        tenant_id: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        query = self._filtered(select(func.count()).select_from(assistants), tenant_id, graph_id, name, metadata)
        async with self.engine.connect() as conn:
            return int(await conn.scalar(query) or 0)

    @staticmethod
    def _filtered(
        query: Select[Any], tenant_id: str, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
    ) -> Select[Any]:
        query = query.where(assistants.c.tenant_id == tenant_id)
        if graph_id:
            query = query.where(assistants.c.graph_id == graph_id)
        if name:
            query = query.where(func.strpos(func.lower(assistants.c.name), name.lower()) > 0)
        if metadata:
            query = query.where(assistants.c.metadata.contains(metadata))
        return query

    async def update_assistant(self, tenant_id: str, assistant_id: str, changes: dict[str, Any]) -> AssistantRow:
        """A new version: the current one with `changes` (None: kept; metadata merged), made current."""
        async with self.engine.begin() as conn:
            locked = select(assistants.c.version).where(
                assistants.c.assistant_id == assistant_id, assistants.c.tenant_id == tenant_id
            )
            if await conn.scalar(locked.with_for_update()) is None:
                raise _not_found(assistant_id)
            row = await self._assistant(conn, tenant_id, assistant_id)
            values = {k: getattr(row, k) for k in _FIELDS}
            values.update({k: v for k, v in changes.items() if v is not None and k != "metadata"})
            values["metadata"] = {**row.metadata, **(changes.get("metadata") or {})}
            newest = await conn.scalar(
                select(func.max(assistant_versions.c.version)).where(assistant_versions.c.assistant_id == assistant_id)
            )
            version = int(newest or 0) + 1
            await conn.execute(assistant_versions.insert().values(assistant_id=assistant_id, version=version, **values))
            head = {k: values[k] for k in ("name", "description", "metadata")}
            await conn.execute(
                update(assistants)
                .where(assistants.c.assistant_id == assistant_id)
                .values(version=version, updated_at=func.now(), **head)
            )
            return await self._assistant(conn, tenant_id, assistant_id)

    async def list_assistant_versions(
        self,
        tenant_id: str,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[AssistantRow]:
        """Every version of the assistant, newest first."""
        v = assistant_versions
        async with self.engine.connect() as conn:
            row = await self._assistant(conn, tenant_id, assistant_id)
            query = select(v).where(v.c.assistant_id == assistant_id)
            if metadata:
                query = query.where(v.c.metadata.contains(metadata))
            query = query.order_by(v.c.version.desc()).limit(limit).offset(offset)
            return [_row({**r, "tenant_id": row.tenant_id}) for r in (await conn.execute(query)).mappings()]

    async def set_latest_assistant(self, tenant_id: str, assistant_id: str, version: int) -> AssistantRow:
        """Make `version` the one runs use (its name, description and metadata become the assistant's)."""
        async with self.engine.begin() as conn:
            row = await self._assistant(conn, tenant_id, assistant_id)
            chosen = await self._version(conn, row, version)
            await conn.execute(
                update(assistants)
                .where(assistants.c.assistant_id == assistant_id)
                .values(
                    version=version,
                    updated_at=func.now(),
                    name=chosen.name,
                    description=chosen.description,
                    metadata=chosen.metadata,
                )
            )
            return await self._assistant(conn, tenant_id, assistant_id)

    async def delete_assistant(self, tenant_id: str, assistant_id: str) -> None:
        """Forget the assistant and its versions (runs keep the id and version they ran)."""
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(assistants)
                .where(assistants.c.assistant_id == assistant_id, assistants.c.tenant_id == tenant_id)
                .returning(assistants.c.assistant_id)
            )
            if gone.first() is None:
                raise _not_found(assistant_id)
