"""What every page of the viewer shares: its templates, the session's tenant, the check that a
POST is one of its own forms, and how an error is answered (a page, unless a route says otherwise)."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from waypoint.access import LOCAL, NEEDS, Action, Actor, Role, Surface, enter
from waypoint.app.http.auth import SAFE_METHODS, foreign_origin
from waypoint.app.http.errors import status_of
from waypoint.app.http.problems import HttpError
from waypoint.app.http.state import ApiState, api_state
from waypoint.app.http.ui import session
from waypoint.app.http.ui.reading import fields_of, highlight, shortened, text_of
from waypoint.errors import WaypointError

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
T = TypeVar("T")


class LoginNeeded(Exception):
    pass


async def session_actor(request: Request, api: ApiState) -> Actor:
    """Who the session acts as: the key it was made with, while that key is valid (one lookup by its
    id: its tenant and role); with auth off (`waypoint dev` on loopback), an admin of the configured
    tenant. LoginNeeded without a valid session."""
    address = request.client.host if request.client is not None else None
    if not api.auth:
        return Actor(LOCAL.id, Role.ADMIN, api.settings.tenant, Surface.VIEWER, address)
    secret = session.secret_of(api.settings.ui_secret)
    user = session.user_in(secret, api.settings.oidc_issuer, request.cookies.get(session.USER_COOKIE))
    if user is not None:  # a signed-in user (ui/sso.py), until the session ends
        request.state.user = user  # the header shows who is signed in
        return Actor(f"user:{user.subject}", user.role, user.tenant, Surface.VIEWER, address)
    key_id = session.key_in(secret, request.cookies.get(session.COOKIE))
    row = await api.wp.keys.valid_id(key_id) if key_id is not None else None
    if row is None:
        raise LoginNeeded()
    return Actor(f"key:{row.id}", row.role, row.tenant_id, Surface.VIEWER, address)


async def tenant_of(request: Request) -> str:
    """The session's tenant; the request acts as the session's actor from here on (its role decides
    which forms the pages show and which posts the client takes). The page counts against the
    session key's rate limit, as the API's requests do."""
    api = api_state(request)
    actor = await session_actor(request, api)
    enter(actor)
    # a key's own rate limit, or a signed-in user's
    api.limits.spend(
        int(actor.id.removeprefix("key:")) if actor.id.startswith("key:") else actor.id if api.auth else None
    )
    request.state.tenant = actor.tenant
    request.state.role = actor.role
    return actor.tenant or api.settings.tenant


async def own_form(request: Request) -> None:
    """A POST must be one of the viewer's forms, posted from its page: same origin (by the Host
    header, or one of WAYPOINT_API_CORS_ORIGINS: a proxy may rewrite Host), valid token."""
    if request.method in SAFE_METHODS:
        return
    settings = api_state(request).settings
    origin = foreign_origin(request, settings.cors_origins)
    if origin is not None:
        raise HttpError(
            403,
            "cross_origin",
            f"a form posted from a page of {origin} is refused: use the viewer's own pages (behind a proxy "
            "that rewrites the Host header, list the viewer's origin in WAYPOINT_API_CORS_ORIGINS)",
        )
    token = (await request.form()).get(session.CSRF_FIELD)
    secret = session.secret_of(settings.ui_secret)
    if not session.csrf_valid(secret, session.csrf_anchor(request), token):
        raise HttpError(
            403,
            "csrf",
            "the form carries no valid CSRF token (its page is from before a new login, or not the viewer's): "
            "reload the page and submit it again",
        )


Tenant = Annotated[str, Depends(tenant_of)]
Api = Annotated[ApiState, Depends(api_state)]


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    api = api_state(request)
    secret = session.secret_of(api.settings.ui_secret)
    anchor = session.csrf_anchor(request)
    fresh = anchor is None
    if anchor is None:  # no session (the login page, `waypoint dev`): the token's own cookie
        anchor = session.new_anchor()
    context.setdefault("auth", api.auth)
    context.setdefault("signed_in", api.auth and getattr(request.state, "tenant", None) is not None)
    context.setdefault("notice", request.query_params.get("notice"))
    context.setdefault("refusal", request.query_params.get("refusal"))
    context.setdefault("user", getattr(request.state, "user", None))
    context.setdefault("sso", bool(api.settings.oidc_issuer and api.settings.oidc_client_id))
    role: Role = getattr(request.state, "role", Role.ADMIN)
    context.setdefault("can", lambda action: role.allows(Action(action)))  # which forms to show
    context.setdefault("needs", lambda action: NEEDS[Action(action)].value)
    context["csrf"] = session.csrf_token(secret, anchor)
    response = templates.TemplateResponse(request, name, context, status_code=status)
    if fresh:
        session.set_cookie(request, response, session.CSRF_COOKIE, anchor)
    return response


def error_page(request: Request, status: int, code: str, message: str) -> Response:
    """Any error under /ui, as a page (`errors.install` calls it with what the API would send)."""
    return render(request, "error.html", status=status, status_code=status, code=code, message=message)


def back_to(run_id: str, **query: str) -> RedirectResponse:
    return RedirectResponse(f"/ui/runs/{run_id}?{urlencode(query)}" if query else f"/ui/runs/{run_id}", 303)


# --- how a route's error is answered -------------------------------------------------------------
# An error is a page (`error_page`, through `errors.install`), except where a route says otherwise
# with `answers_errors`: the one place the viewer catches a WaypointError to answer it.

Answer = Callable[[dict[str, Any], WaypointError], Response]


def as_text(params: dict[str, Any], exc: WaypointError) -> Response:
    """For what a page's script fetches (the whole text of a long tool result): the message, as text."""
    return PlainTextResponse(str(exc), status_code=status_of(exc)[0])


def as_refusal(params: dict[str, Any], exc: WaypointError) -> Response:
    """For a form on a run's page (pause, send, fork...): back to that page, with why it was refused."""
    return back_to(params["run_id"], refusal=str(exc))


def answers_errors(
    answer: Answer,
) -> Callable[[Callable[..., Awaitable[Response]]], Callable[..., Awaitable[Response]]]:
    """The route answers its WaypointErrors with `answer` (its parameters, the error) instead of a page."""

    def wrap(route: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        @functools.wraps(route)  # FastAPI reads the route's parameters through __wrapped__
        async def answered(**params: Any) -> Response:
            try:
                return await route(**params)
            except WaypointError as exc:
                return answer(params, exc)

        return answered

    return wrap


async def unless_unavailable(call: Awaitable[T], fallback: T) -> T:
    """What Temporal answers about a run, or `fallback` when it cannot: the page still shows what
    Postgres holds (a page never fails for want of a live detail)."""
    try:
        return await call
    except WaypointError:
        return fallback


def pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def counted(names: list[str]) -> list[tuple[str, int]]:
    """Tool names with how often each was called, in first-call order."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return list(counts.items())


templates.env.filters["pretty"] = pretty
templates.env.filters["highlight"] = highlight
templates.env.filters["raw_json"] = lambda value: highlight(shortened(value))
templates.env.filters["as_text"] = text_of
templates.env.filters["fields"] = fields_of
templates.env.filters["groupby_count"] = counted
