"""API keys of the HTTP API: minted here, stored as their SHA-256, resolved to a tenant.

A key is `wp_` plus 32 random bytes (URL-safe base64); it is shown once, when it is created.
The table keeps its hash and its first characters (to tell keys apart in listings), so a
database dump reveals no usable key.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.access import Role
from waypoint.checks import BIGINT_MAX, check_count, check_tenant
from waypoint.errors import InvalidInput, NotFound
from waypoint.store.base import StoreBase
from waypoint.store.rows import row_of
from waypoint.store.schema import api_keys

KEY_PREFIX = "wp_"
SHOWN_CHARS = 10  # "wp_" and 7 characters: enough to tell keys apart, far too few to guess one


@dataclass(frozen=True)
class ApiKeyRow:
    """One API key as listings show it (never the key itself: only its first characters)."""

    id: int
    prefix: str
    tenant_id: str
    name: str | None
    created_at: datetime
    revoked_at: datetime | None = None
    role: Role = Role.ADMIN  # what the key may do (waypoint.access); keys made before roles are admin

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> ApiKeyRow:
        return row_of(cls, row, role=Role)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys(StoreBase):
    async def create_key(
        self, tenant_id: str, name: str | None = None, *, role: Role = Role.ADMIN
    ) -> tuple[str, ApiKeyRow]:
        """A new key for `tenant_id` with `role`: (the key itself, shown this once; its row)."""
        check_tenant(tenant_id)
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    api_keys.insert()
                    .values(
                        key_hash=key_hash(key),
                        prefix=key[:SHOWN_CHARS],
                        tenant_id=tenant_id,
                        name=name,
                        role=Role(role).value,
                    )
                    .returning(*api_keys.c)
                )
            ).mappings()
            return key, ApiKeyRow.of(row.one())

    async def tenant_of_key(self, key: str) -> str | None:
        """The tenant of a valid key; None for an unknown or revoked one."""
        row = await self.valid_key(key)
        return row.tenant_id if row is not None else None

    async def valid_key(self, key: str) -> ApiKeyRow | None:
        """The row of a valid key; None for an unknown or revoked one."""
        if not key.startswith(KEY_PREFIX):
            return None
        query = select(api_keys).where(api_keys.c.key_hash == key_hash(key), api_keys.c.revoked_at.is_(None))
        async with self.engine.connect() as conn:
            found = (await conn.execute(query)).mappings().first()
        return ApiKeyRow.of(found) if found is not None else None

    async def tenant_of_key_id(self, key_id: int) -> str | None:
        """The tenant of key `key_id` while it is valid; None once it is revoked (or was never made).
        The viewer's session cookie names its key by id and is checked with this on every request."""
        query = select(api_keys.c.tenant_id).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        async with self.engine.connect() as conn:
            tenant: str | None = await conn.scalar(query)
        return tenant

    async def valid_key_id(self, key_id: int) -> ApiKeyRow | None:
        """Key `key_id`'s row while it is valid (its tenant and role); None once it is revoked."""
        query = select(api_keys).where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        async with self.engine.connect() as conn:
            found = (await conn.execute(query)).mappings().first()
        return ApiKeyRow.of(found) if found is not None else None

    async def key_tenants(self) -> set[str]:
        """The tenants some live API key belongs to."""
        query = select(api_keys.c.tenant_id).where(api_keys.c.revoked_at.is_(None)).distinct()
        async with self.engine.connect() as conn:
            return set(await conn.scalars(query))

    async def list_keys(self, tenant_id: str | None = None) -> list[ApiKeyRow]:
        """Every key (of one tenant, if given), oldest first; revoked ones too."""
        query = select(api_keys).order_by(api_keys.c.id)
        if tenant_id is not None:
            query = query.where(api_keys.c.tenant_id == tenant_id)
        async with self.engine.connect() as conn:
            return [ApiKeyRow.of(r) for r in (await conn.execute(query)).mappings()]

    async def find_key(self, key_ref: str) -> ApiKeyRow:
        """The key named by its id or the prefix `keys list` shows (revoked or not)."""
        async with self.engine.connect() as conn:
            return ApiKeyRow.of(await _one_key(conn, key_ref))

    async def revoke_key(self, key_ref: str) -> ApiKeyRow:
        """Revoke a key by its id or the prefix `keys list` shows; requests with it get 401 at once."""
        return await self._change_key(key_ref, revoked_at=func.coalesce(api_keys.c.revoked_at, func.now()))

    async def set_key_role(self, key_ref: str, role: Role) -> ApiKeyRow:
        """Give a key (by its id or prefix) another role; its next request has it."""
        return await self._change_key(key_ref, role=Role(role).value)

    async def _change_key(self, key_ref: str, **values: Any) -> ApiKeyRow:
        async with self.engine.begin() as conn:
            found = await _one_key(conn, key_ref)
            row = (
                await conn.execute(
                    update(api_keys).where(api_keys.c.id == found["id"]).values(**values).returning(*api_keys.c)
                )
            ).mappings()
            return ApiKeyRow.of(row.one())


async def _one_key(conn: AsyncConnection, key_ref: str) -> RowMapping:
    """The row of the one key `key_ref` names: its id, or the prefix (wp_...) listings show."""
    ref = key_ref.strip()
    if ref.isascii() and ref.isdigit():
        where = api_keys.c.id == check_count("the key id", int(ref), high=BIGINT_MAX)
    elif ref.startswith(KEY_PREFIX) and len(ref) >= SHOWN_CHARS:
        where = api_keys.c.prefix == ref[:SHOWN_CHARS]
    else:
        raise InvalidInput(
            f"{key_ref!r} names no key: give the id or the prefix (wp_...) that `waypoint keys list` shows"
        )
    found = (await conn.execute(select(api_keys).where(where))).mappings().all()
    if not found:
        raise NotFound(f"no API key {key_ref!r}: `waypoint keys list` shows them")
    if len(found) > 1:
        raise InvalidInput(f"{len(found)} keys start with {ref!r}: name one by its id")
    return found[0]
