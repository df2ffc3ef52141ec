"""Who a request acts for: the tenant of its API key, never a field of the request.

The key comes as `Authorization: Bearer <key>` (or `X-Api-Key: <key>`, which LangGraph's
clients send). No key, an unknown key and a revoked key are all 401; a key is checked against
the database on every request, so a revoked key stops working at once. The web viewer's session
cookie (`ui/session.py`) is accepted on GET requests only, so no cookie can make a /v1 write. With auth off (only
`waypoint dev`, on a loopback address) every request acts for the configured tenant.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from waypoint.app.http.errors import unauthorized
from waypoint.app.http.state import ApiState, api_state


def presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("x-api-key") or None


async def tenant_of(request: Request) -> str:
    api = api_state(request)
    if not api.auth:
        return api.settings.tenant
    key = presented_key(request)
    if key is None and request.method == "GET":
        from waypoint.app.http.ui.session import COOKIE, secret_of, tenant_in

        tenant = tenant_in(secret_of(api.settings.ui_secret), request.cookies.get(COOKIE))
        if tenant is not None:
            return tenant
    if key is None:
        raise unauthorized(
            "no API key: send `Authorization: Bearer <key>`; create a key with `waypoint keys create --tenant T`"
        )
    tenant = await api.wp.store.tenant_of_key(key)
    if tenant is None:
        raise unauthorized("unknown or revoked API key: `waypoint keys list` shows the valid ones")
    return tenant


Tenant = Annotated[str, Depends(tenant_of)]
Api = Annotated[ApiState, Depends(api_state)]
