"""Who a request acts for: the tenant of its API key, never a field of the request.

The key comes as `Authorization: Bearer <key>` (or `X-Api-Key: <key>`, which LangGraph's
clients send). No key, an unknown key and a revoked key are all 401; a key is checked against
the database on every request, so a revoked key stops working at once. The web viewer's session
cookie (`ui/session.py`) is accepted on GET requests only, so no cookie can make a /v1 write; the
cookie names its key, which is looked up the same way, so revoking a key ends its sessions too.
With WAYPOINT_OIDC_ISSUER set, a bearer value that is not a Waypoint key (`wp_...`) is a JWT of that
issuer (`oidc.py`), and a person the viewer signed in through it has a session cookie of their own;
both act for the tenant and role their claims map to. With auth off (only `waypoint dev`, on a
loopback address) every request acts for the configured tenant. Each authenticated request is
counted against its key's rate limit (`limits.py`).

A browser sends its cookies (and, with auth off, needs none) whichever page makes it post, so
a write without a key is refused (403) when it comes from a page of another origin: its
`Origin` (or, without one, its `Referer`) names neither this server nor one of
`WAYPOINT_API_CORS_ORIGINS`. A request with a key is not a browser's doing: no page can add
the header without the server's CORS consent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from waypoint.access import Actor, Role, Surface, enter
from waypoint.app.http.limits import StreamSlot
from waypoint.app.http.oidc import issuer_of
from waypoint.app.http.problems import HttpError, unauthorized
from waypoint.app.http.state import ApiState, api_state
from waypoint.store.keys import KEY_PREFIX


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


@dataclass(frozen=True)
class Caller:
    """Who a request is from: its tenant, the id of the key it used (None with auth off or for a
    signed-in user), its role, and the subject of a signed-in user's token (None for a key)."""

    tenant: str
    key_id: int | None
    role: Role = Role.ADMIN
    subject: str | None = None

    @property
    def actor_id(self) -> str:
        """The audit log's name for this caller: never a secret."""
        if self.subject is not None:
            return f"user:{self.subject}"
        return f"key:{self.key_id}" if self.key_id is not None else "local"

    @property
    def limit_key(self) -> int | str | None:
        """Whose rate limit and stream slots a request counts against: its key's, or the user's own."""
        return self.actor_id if self.subject is not None else self.key_id


def surface_of(request: Request) -> Surface:
    """/v1 is the HTTP API; the Agent Protocol's routes sit at the root (/threads, /runs, ...)."""
    return Surface.HTTP if request.url.path.startswith("/v1/") else Surface.PROTOCOL


async def caller_of(request: Request) -> Caller:
    """The request's key, checked, and one request counted against it (429 over its rate). The
    request acts as the caller from here on (`waypoint.access.enter`): FastAPI awaits an async
    dependency in the request's own task, so the endpoint's client calls see it."""
    api = api_state(request)
    caller = await _authenticate(request, api)
    api.limits.spend(caller.limit_key)
    request.state.tenant = caller.tenant  # for the error handler (errors.still_starting)
    address = request.client.host if request.client is not None else None
    enter(Actor(caller.actor_id, caller.role, caller.tenant, surface_of(request), address))
    return caller


async def _authenticate(request: Request, api: ApiState) -> Caller:
    check_origin(request)
    if not api.auth:
        return Caller(api.settings.tenant, None)
    key = presented_key(request)
    if key is None and request.method == "GET":
        from waypoint.app.http.ui.session import COOKIE, USER_COOKIE, key_in, secret_of, user_in

        user = user_in(secret_of(api.settings.ui_secret), api.settings.oidc_issuer, request.cookies.get(USER_COOKIE))
        if user is not None:  # signed in through the identity provider (ui/sso.py)
            return Caller(user.tenant, None, user.role, user.subject)
        key_id = key_in(secret_of(api.settings.ui_secret), request.cookies.get(COOKIE))
        if key_id is not None:
            found = await api.wp.keys.valid_id(key_id)
            if found is None:
                raise unauthorized("the viewer session's API key is revoked: log in at /ui/login with a valid key")
            return Caller(found.tenant_id, key_id, found.role)
    if key is None:
        raise unauthorized(
            "no API key: send `Authorization: Bearer <key>`; create a key with `waypoint keys create --tenant T`"
        )
    if api.settings.oidc_issuer and not key.startswith(KEY_PREFIX):  # a JWT of the identity provider
        user = await issuer_of(request.app.state, api.settings).identity(key)
        return Caller(user.tenant, None, user.role, user.subject)
    row = await api.wp.keys.valid(key)
    if row is None:
        raise unauthorized("unknown or revoked API key: `waypoint keys list` shows the valid ones")
    return Caller(row.tenant_id, row.id, row.role)


async def tenant_of(caller: Annotated[Caller, Depends(caller_of)]) -> str:
    return caller.tenant


async def stream_slot(request: Request, caller: Annotated[Caller, Depends(caller_of)]) -> AsyncIterator[StreamSlot]:
    """A live stream's slot of the caller's key (429 when it holds WAYPOINT_HTTP_OPEN_STREAMS), taken
    before the route does anything; given back here unless the route's response took it over."""
    slot = api_state(request).limits.open_stream(caller.limit_key)
    try:
        yield slot
    finally:
        if not slot.streaming:
            slot.release()


Tenant = Annotated[str, Depends(tenant_of)]
Api = Annotated[ApiState, Depends(api_state)]
OpenStream = Annotated[StreamSlot, Depends(stream_slot)]
