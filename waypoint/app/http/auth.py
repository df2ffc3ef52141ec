"""Who a request acts for: the tenant of its API key, never a field of the request.

The key comes as `Authorization: Bearer <key>` (or `X-Api-Key: <key>`, which LangGraph's
clients send). No key, an unknown key and a revoked key are all 401; a key is checked against
the database on every request, so a revoked key stops working at once. The web viewer's session
cookie (`ui/session.py`) is accepted on GET requests only, so no cookie can make a /v1 write; the
cookie names its key, which is looked up the same way, so revoking a key ends its sessions too.
With auth off (only `waypoint dev`, on a loopback address) every request acts for the configured
tenant.

A browser sends its cookies (and, with auth off, needs none) whichever page makes it post, so
a write without a key is refused (403) when it comes from a page of another origin: its
`Origin` (or, without one, its `Referer`) names neither this server nor one of
`WAYPOINT_API_CORS_ORIGINS`. A request with a key is not a browser's doing: no page can add
the header without the server's CORS consent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from waypoint.app.http.errors import HttpError, unauthorized
from waypoint.app.http.state import ApiState, api_state


def presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return request.headers.get("x-api-key") or None


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _host(netloc: str) -> str:
    netloc = netloc.lower()
    for default in (":80", ":443"):  # browsers leave a default port out; a proxy may not
        if netloc.endswith(default):
            return netloc[: -len(default)]
    return netloc


def foreign_origin(request: Request, trusted: Iterable[str] = ()) -> str | None:
    """The origin of the page that made this request, when it is not this server's own (by the
    Host header) nor one of `trusted`; None for a same-origin request or one without
    `Origin` and `Referer` (not a page's: a CLI, a script)."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if not referer:
            return None
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    origin = origin.strip().rstrip("/")
    if origin in {t.rstrip("/") for t in trusted}:
        return None
    host = request.headers.get("host")
    if origin != "null" and host and _host(urlsplit(origin).netloc) == _host(host):
        return None
    return origin


def check_origin(request: Request) -> None:
    """A write without a key from another site's page: 403 (see the module's docstring)."""
    if request.method in SAFE_METHODS or presented_key(request) is not None:
        return
    origin = foreign_origin(request, api_state(request).settings.cors_origins)
    if origin is not None:
        raise HttpError(
            403,
            "cross_origin",
            f"a write from a page of {origin} is refused: send the API key in `Authorization: Bearer`, "
            "or list that origin in WAYPOINT_API_CORS_ORIGINS",
        )


async def tenant_of(request: Request) -> str:
    api = api_state(request)
    check_origin(request)
    if not api.auth:
        return api.settings.tenant
    key = presented_key(request)
    if key is None and request.method == "GET":
        from waypoint.app.http.ui.session import COOKIE, key_in, secret_of

        key_id = key_in(secret_of(api.settings.ui_secret), request.cookies.get(COOKIE))
        if key_id is not None:
            tenant = await api.wp.keys.tenant_of_id(key_id)
            if tenant is None:
                raise unauthorized("the viewer session's API key is revoked: log in at /ui/login with a valid key")
            return tenant
    if key is None:
        raise unauthorized(
            "no API key: send `Authorization: Bearer <key>`; create a key with `waypoint keys create --tenant T`"
        )
    tenant = await api.wp.keys.tenant_of(key)
    if tenant is None:
        raise unauthorized("unknown or revoked API key: `waypoint keys list` shows the valid ones")
    return tenant


Tenant = Annotated[str, Depends(tenant_of)]
Api = Annotated[ApiState, Depends(api_state)]
