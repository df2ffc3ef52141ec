"""`wp.keys`: the HTTP API's keys, minted for a tenant and resolved back to it, for every surface
(`waypoint keys`, the API's auth, the viewer's login and session).

    key, row = await wp.keys.create("acme", name="ci")   # the key is shown this once
    assert await wp.keys.tenant_of(key) == "acme"
"""

from __future__ import annotations

from waypoint.checks import check_tenant, check_text
from waypoint.store import RunStore
from waypoint.store.rows import ApiKeyRow


class Keys:
    def __init__(self, store: RunStore):
        self._store = store

    async def create(self, tenant_id: str, name: str | None = None) -> tuple[str, ApiKeyRow]:
        """A new key for `tenant_id`: (the key itself, shown this once; its row)."""
        check_text("the key's name", name)
        return await self._store.create_key(check_tenant(tenant_id), name)

    async def list(self, tenant_id: str | None = None) -> list[ApiKeyRow]:
        """Every key (of one tenant, if given), oldest first; revoked ones too."""
        return await self._store.list_keys(None if tenant_id is None else check_tenant(tenant_id))

    async def revoke(self, key_ref: str) -> ApiKeyRow:
        """Revoke a key by its id or the prefix `keys list` shows; requests with it get 401 at once."""
        return await self._store.revoke_key(check_text("the key", key_ref))

    async def tenant_of(self, key: str) -> str | None:
        """The tenant of a valid key; None for an unknown or revoked one."""
        # any text may be tried as a key: it is hashed, never stored, and an unknown one is None
        return await self._store.tenant_of_key(key)

    async def valid(self, key: str) -> ApiKeyRow | None:
        """The row of a valid key; None for an unknown or revoked one."""
        return await self._store.valid_key(key)

    async def tenant_of_id(self, key_id: int) -> str | None:
        """The tenant of key `key_id` while it is valid; None once it is revoked (or was never made)."""
        return await self._store.tenant_of_key_id(key_id)  # from the signed session cookie


__all__ = ["Keys"]
