"""Errors over HTTP: one JSON shape, a stable `code`, the status that fits, a message naming the fix.

    {"error": {"code": "not_found", "message": "no run 'run-1' for tenant 'acme': ..."}}

| Waypoint error          | status | code                |
|-------------------------|--------|---------------------|
| Mismatch                | 422    | mismatch            |
| InvalidInput            | 400    | invalid_input       |
| ConfigError             | 400    | config_error        |
| UnknownScorer           | 400    | unknown_scorer      |
| NotFound (UnknownAgent) | 404    | not_found (unknown_agent) |
| Conflict                | 409    | conflict            |
| PayloadTooLarge         | 413    | payload_too_large   |
| Unavailable, StackError | 503    | unavailable         |
| any other               | 400    | error               |

and the HTTP layer's own: 400 `bad_json` (a body that is not JSON: not UTF-8, nested past the
parser's limit, or malformed; the message says which), 401 `unauthorized`, 404 `route_not_found`,
405 `method_not_allowed`, 413 `body_too_large`, 415 `unsupported_media_type` (a body sent as
anything but `Content-Type: application/json`), 422 `invalid_body` (a body or query that does not
fit the endpoint), 403 `forbidden` (the caller's role does not allow the action: `needs` names the
role it needs), 403 `cross_origin` (a write without a key from another site's page, or a CORS
preflight from an origin not in WAYPOINT_API_CORS_ORIGINS), 429 `rate_limited` and
`too_many_streams` (over a key's rate limit, with `Retry-After`: `limits.py`), 501
`not_supported`, 500 `internal`. A WebSocket upgrade that is refused gets the same JSON as its
HTTP answer (or, where the server cannot send one, a close with code 4000 + the status). Another
tenant's run is `not_found`, exactly like a run that does not exist. Under a path a surface
renders pages for (the viewer's /ui), the same status, code and message come as that surface's
HTML page.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketClose

from waypoint.app.http.problems import HttpError
from waypoint.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    InvalidInput,
    Mismatch,
    NotFound,
    PayloadTooLarge,
    StackError,
    Unavailable,
    UnknownAgent,
    UnknownScorer,
    WaypointError,
)

log = logging.getLogger(__name__)

# Most specific first: the first class an error is an instance of decides.
STATUS: list[tuple[type[WaypointError], int, str]] = [
    (UnknownScorer, 400, "unknown_scorer"),  # a name the request gave, not a thing it looked up: bad input
    (UnknownAgent, 404, "unknown_agent"),
    (NotFound, 404, "not_found"),
    (Forbidden, 403, "forbidden"),
    (Conflict, 409, "conflict"),
    (Mismatch, 422, "mismatch"),
    (InvalidInput, 400, "invalid_input"),
    (ConfigError, 400, "config_error"),
    (PayloadTooLarge, 413, "payload_too_large"),
    (Unavailable, 503, "unavailable"),
    (StackError, 503, "unavailable"),
]


def body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def status_of(exc: WaypointError) -> tuple[int, str]:
    for cls, status, code in STATUS:
        if isinstance(exc, cls):
            return status, code
    return 400, "error"


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # a route may add fields (a conflict's `run_id`, ...)

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error's JSON: `{"error": {"code": ..., "message": ...}}`."""

    error: ErrorDetail


# What each status means here: the OpenAPI description of a route's documented error answers.
MEANING: dict[int, str] = {
    400: "Invalid input (`invalid_input`, `config_error`, `unknown_scorer`, `bad_json`, `error`): the message "
    "names the fix.",
    401: "No API key, or an unknown or revoked one (`unauthorized`).",
    403: "The key's (or signed-in user's) role does not allow the action (`forbidden`, with `needs`: the role "
    "it needs), or a write without a key from another site's page (`cross_origin`).",
    404: "Not found (`not_found`, `unknown_agent`): another tenant's is not found either.",
    409: "Conflict with the current state (`conflict`): the message says what it is in.",
    413: "The body is over WAYPOINT_API_MAX_BODY_BYTES (`body_too_large`), or a payload over its limit.",
    415: "The body is not sent as JSON (`unsupported_media_type`): send it with `Content-Type: application/json`.",
    422: "The request does not fit this endpoint (`invalid_body`, `mismatch`).",
    429: "Over the key's rate limit (`rate_limited`, `too_many_streams`); `Retry-After` says when to retry.",
    501: "Not supported (`not_supported`).",
    503: "Temporal or Postgres is unreachable (`unavailable`): retry later.",
}


ERROR_JSON = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's (or a router's) `responses=`: the error answers it can give, in the one JSON shape
    (JSON whatever the route's own answer is: an error of an SSE route is JSON too).
    `fitted_validation_errors` puts ErrorBody among the document's schemas."""
    return {status: {"description": MEANING[status], "content": ERROR_JSON} for status in statuses}


# The answers every authenticated route can give, whatever it does.
KEYED = documented(401, 403, 413, 429, 503)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse(body(code, message, **extra), status_code=status, headers=headers)


async def still_starting(request: Request, missing: NotFound) -> bool:
    """Whether the request's run (its `run_id` path parameter) is so new that its worker has not
    written it: the run is there (its start answered 201), so what it has not written yet is a 409
    to retry, not a 404. So is a run whose row its worker wrote between the read that missed it
    (`missing` says there is no such run) and this question: a retry finds it."""
    from waypoint.app.http.state import api_state
    from waypoint.store.base import not_found

    run_id = request.path_params.get("run_id")
    tenant = getattr(request.state, "tenant", None)
    if not isinstance(run_id, str) or tenant is None:
        return False
    try:
        if await api_state(request).wp.starting(run_id, tenant_id=tenant):
            return True
    except WaypointError:
        return False
    # `starting` is False once the tenant's row exists: if the read missed the run itself (not a
    # step of it, say), the row came since.
    return str(missing) == str(not_found(tenant, run_id))


# How deep Python's JSON parser nests arrays and objects: a frame of the interpreter's recursion
# limit each, less the frames of the server around it, so somewhat fewer.
JSON_DEPTH = sys.getrecursionlimit()


def unparsable_body(cause: BaseException | None) -> str | None:
    """What is wrong with a body FastAPI could not parse (its 400 "There was an error parsing the
    body" gives the parser's exception as its cause), or None if the cause is not the body's."""
    if isinstance(cause, UnicodeDecodeError):
        bad = cause.object[cause.start : cause.start + 1].hex() if cause.object else "?"
        return f"the body is not UTF-8 (byte 0x{bad} at offset {cause.start}): send JSON encoded as UTF-8"
    if isinstance(cause, RecursionError):
        return (
            f"the body nests arrays and objects deeper than the JSON parser goes (fewer than {JSON_DEPTH} "
            "levels, Python's recursion limit): send a flatter body"
        )
    return None


def refuse_upgrade(
    scope: Scope, status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response | WebSocketClose:
    """A refused WebSocket upgrade: the same status and JSON as over HTTP where the server can answer
    an upgrade so (uvicorn can); else a close with code 4000 + the status, as clients read it."""
    if "websocket.http.response" in scope.get("extensions", {}):
        return error_response(status, code, message, headers)
    return WebSocketClose(4000 + status, f"{code}: {message}"[:120])


def cors_refusal(origin: str, allowed: list[str]) -> Response:
    """A CORS preflight from a page whose origin the API does not let in."""
    listed = ", ".join(allowed) or "none"
    message = (
        f"a page of {origin} may not call this API (the origins allowed: {listed}): "
        "add that origin to WAYPOINT_API_CORS_ORIGINS (comma-separated scheme://host:port)"
    )
    return error_response(403, "cross_origin", message)


ErrorPage = Callable[[Request, int, str, str], Response]
"""A surface's error page: (request, status, code, message) -> its HTML answer."""


def install(app: FastAPI, pages: Mapping[str, ErrorPage] | None = None) -> None:
    """Every error the app can raise, answered as JSON, or under a path prefix of `pages` (the
    viewer's "/ui") as that surface's page."""
    pages = dict(pages or {})

    def answer(
        request: Request,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Response | WebSocketClose:
        if request.scope["type"] == "websocket":
            return refuse_upgrade(request.scope, status, code, message, headers)
        path = request.url.path
        for prefix, page in pages.items():
            if path == prefix or path.startswith(prefix + "/"):
                response = page(request, status, code, message)
                if headers and "Retry-After" in headers:  # a 429's, for a page as for JSON
                    response.headers["Retry-After"] = headers["Retry-After"]
                return response
        return error_response(status, code, message, headers, **(extra or {}))

    @app.exception_handler(WaypointError)
    async def waypoint_error(request: Request, exc: WaypointError) -> Response | WebSocketClose:
        if isinstance(exc, NotFound) and await still_starting(request, exc):
            run_id = request.path_params["run_id"]
            message = f"run {run_id!r} is starting: its worker has not written its first state yet; retry in a moment"
            return answer(request, 409, "conflict", message, {"Retry-After": "1"})
        status, code = status_of(exc)
        # a refusal names the role it needs (`"needs": "operator"`), for a client to say so
        return answer(
            request,
            status,
            code,
            str(exc),
            extra={"needs": exc.details["needs"]} if isinstance(exc, Forbidden) and "needs" in exc.details else None,
        )

    @app.exception_handler(HttpError)
    async def http_error(request: Request, exc: HttpError) -> Response | WebSocketClose:
        return answer(request, exc.status, exc.code, str(exc), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> Response | WebSocketClose:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return answer(request, 400, "bad_json", "the body is not valid JSON: send a JSON object")
        # FastAPI parses a body as JSON only when its Content-Type says JSON; any other comes as bytes
        if isinstance(exc.body, bytes | bytearray) and any(p.get("loc", ())[:1] == ("body",) for p in problems):
            sent = request.headers.get("content-type") or "no Content-Type"
            message = f"the body came as {sent}: send it as JSON with `Content-Type: application/json`"
            return answer(request, 415, "unsupported_media_type", message)
        where = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ()) if x != 'body') or 'body'}: {p.get('msg')}" for p in problems
        )
        return answer(request, 422, "invalid_body", f"the request does not fit this endpoint: {where}")

    @app.exception_handler(StarletteHTTPException)
    async def starlette_error(request: Request, exc: StarletteHTTPException) -> Response | WebSocketClose:
        if exc.status_code == 400 and (unparsed := unparsable_body(exc.__cause__)) is not None:
            return answer(request, 400, "bad_json", unparsed)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}: the endpoints are listed at /docs"
            return answer(request, 404, "route_not_found", message)
        if exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}: see /docs for its methods"
            return answer(request, 405, "method_not_allowed", message)
        return answer(request, exc.status_code, "http_error", str(exc.detail))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = fitted_validation_errors(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    summary=app.summary,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> Response | WebSocketClose:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        message = f"internal error ({type(exc).__name__}): the server log has the details"
        return answer(request, 500, "internal", message)

    unrouted = app.router.default

    async def no_route(scope: Scope, receive: Receive, send: Send) -> None:
        """A WebSocket upgrade no route takes: the JSON 404 an HTTP request gets, not a bare 403."""
        if scope["type"] != "websocket":
            await unrouted(scope, receive, send)
            return
        message = f"no WebSocket route {scope.get('path', '')}: the endpoints are listed at /docs"
        await refuse_upgrade(scope, 404, "route_not_found", message)(scope, receive, send)

    app.router.default = no_route  # type: ignore[method-assign]


def fitted_validation_errors(spec: dict[str, Any]) -> dict[str, Any]:
    """FastAPI documents every 422 as its own `{"detail": [...]}`; `invalid_body` above answers the
    one error shape instead, so the document says that. A route that takes a JSON body can answer
    400 `bad_json` and 415 `unsupported_media_type` too, whatever else it documents."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    shape = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(shape.pop("$defs", {}))
    schemas.setdefault("ErrorBody", shape)
    theirs = {"$ref": "#/components/schemas/HTTPValidationError"}
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            takes = operation.get("requestBody", {}).get("content", {}) if isinstance(operation, dict) else {}
            if "application/json" in takes:
                # any JSON body can come malformed (400 bad_json) or as something else (415)
                for status, documentation in documented(400, 415).items():
                    operation.setdefault("responses", {}).setdefault(str(status), documentation)
            answer = operation.get("responses", {}).get("422", {}) if isinstance(operation, dict) else {}
            media = answer.get("content", {}).get("application/json", {})
            if media.get("schema") == theirs:
                answer["description"] = MEANING[422]
                media["schema"] = {"$ref": "#/components/schemas/ErrorBody"}
    for unused in ("HTTPValidationError", "ValidationError"):  # in this order: the first refers to the second
        if f'"#/components/schemas/{unused}"' not in json.dumps(spec):
            schemas.pop(unused, None)
    return spec
