"""Identifiers users type or see: tenant ids and run ids, and the rules they follow.

Standard library only (the Settings validate with it, so do the client, the API and the store).
"""

from __future__ import annotations

import re
import uuid

from waypoint.errors import InvalidInput

TENANT_MAX = 64
TENANT_RULE = f"1 to {TENANT_MAX} characters: letters, digits, '.', '_' or '-', starting with a letter or digit"
_TENANT = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{TENANT_MAX - 1}}}")


def check_tenant(tenant: str) -> str:
    """The tenant id, or InvalidInput naming the rule it breaks."""
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise InvalidInput(f"invalid tenant id {tenant!r}: a tenant id is {TENANT_RULE}")
    return tenant


def new_run_id() -> str:
    return f"run-{uuid.uuid4().hex[:12]}"
