"""`wp.keys`: the HTTP API's keys, minted for a tenant with a role and resolved back to them, for
every surface (`waypoint keys`, the API's auth, the viewer's login and session, the CLI's
WAYPOINT_API_KEY). Making, revoking and changing keys is an admin's action (`Scope.act`).

    from waypoint import Role

    key, row = await wp.keys.create("acme", name="ci", role=Role.OPERATOR)  # the key is shown this once
    assert await wp.keys.tenant_of(key) == "acme"
"""

from __future__ import annotations

from waypoint.access import Action, Role, Target, TargetKind, current_actor
from waypoint.checks import check_choice, check_tenant, check_text
from waypoint.client._scope import Scope
from waypoint.store.keys import ApiKeyRow, ApiKeys


def check_role(role: str | Role) -> Role:
    """`role` as a Role; InvalidInput naming the roles otherwise."""
    return Role(check_choice("role", str(role), Role))


class Keys:
    def __init__(self, store: ApiKeys, scope: Scope):
        self._store = store
        self._scope = scope

    async def create(
        self, tenant_id: str, name: str | None = None, *, role: str | Role = Role.ADMIN
    ) -> tuple[str, ApiKeyRow]:
        """A new key for `tenant_id` with `role` (default admin): (the key itself, shown this once; its row)."""
        check_text("the key's name", name)
        chosen = check_role(role)
        async with self._scope.act(Action.KEY_CREATE, check_tenant(tenant_id), Target(TargetKind.KEY, "new")) as tenant:
            return await self._store.create_key(tenant, name, role=chosen)

    async def list(self, tenant_id: str | None = None) -> list[ApiKeyRow]:
        """Every key (of one tenant, if given; an actor bound to a tenant sees its own), oldest first;
        revoked ones too."""
        if tenant_id is None and current_actor().tenant is None:
            return await self._store.list_keys(None)
        return await self._store.list_keys(self._scope.tenant(tenant_id))

    async def revoke(self, key_ref: str) -> ApiKeyRow:
        """Revoke a key by its id or the prefix `keys list` shows; requests with it get 401 at once."""
        found = await self._store.find_key(check_text("the key", key_ref))
        async with self._scope.act(Action.KEY_REVOKE, found.tenant_id, Target(TargetKind.KEY, str(found.id))):
            return await self._store.revoke_key(str(found.id))

    async def set_role(self, key_ref: str, role: str | Role) -> ApiKeyRow:
        """Give a key (by its id or prefix) another role; its next request acts with it."""
        chosen = check_role(role)
        found = await self._store.find_key(check_text("the key", key_ref))
        async with self._scope.act(Action.KEY_CREATE, found.tenant_id, Target(TargetKind.KEY, str(found.id))):
            return await self._store.set_key_role(str(found.id), chosen)

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

    async def valid_id(self, key_id: int) -> ApiKeyRow | None:
        """Key `key_id`'s row (its tenant and role) while it is valid; None once it is revoked."""
        return await self._store.valid_key_id(key_id)  # from the signed session cookie


__all__ = ["Keys", "check_role"]
