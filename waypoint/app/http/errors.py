"""Errors over HTTP: one JSON shape, a stable `code`, the status that fits, a message naming the fix.

    {"error": {"code": "not_found", "message": "no run 'run-1' for tenant 'acme': ..."}}

| Waypoint error          | status | code                |
|-------------------------|--------|---------------------|
| Mismatch                | 422    | mismatch            |
| InvalidInput            | 400    | invalid_input       |
| ConfigError             | 400    | config_error        |
| NotFound (UnknownAgent) | 404    | not_found (unknown_agent) |
| Conflict                | 409    | conflict            |
| PayloadTooLarge         | 413    | payload_too_large   |
| Unavailable, StackError | 503    | unavailable         |
| any other               | 400    | error               |

and the HTTP layer's own: 400 `bad_json`, 401 `unauthorized`, 404 `route_not_found`,
405 `method_not_allowed`, 413 `body_too_large`, 422 `invalid_body` (a body or query that does not
fit the endpoint), 403 `cross_origin` (a write without a key from another site's page),
429 `rate_limited` and `too_many_streams` (over a key's rate limit, with `Retry-After`: `limits.py`),
501 `not_supported`, 500 `internal`. Another tenant's run is `not_found`, exactly like a run that
does not exist. Under a path a surface renders pages for (the viewer's /ui), the same status,
code and message come as that surface's HTML page.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from waypoint.errors import (
    ConfigError,
    Conflict,
    InvalidInput,
    Mismatch,
    NotFound,
    PayloadTooLarge,
    StackError,
    Unavailable,
    UnknownAgent,
    WaypointError,
)

log = logging.getLogger(__name__)

# Most specific first: the first class an error is an instance of decides.
STATUS: list[tuple[type[WaypointError], int, str]] = [
    (UnknownAgent, 404, "unknown_agent"),
    (NotFound, 404, "not_found"),
    (Conflict, 409, "conflict"),
    (Mismatch, 422, "mismatch"),
    (InvalidInput, 400, "invalid_input"),
    (ConfigError, 400, "config_error"),
    (PayloadTooLarge, 413, "payload_too_large"),
    (Unavailable, 503, "unavailable"),
    (StackError, 503, "unavailable"),
]


class HttpError(Exception):
    """An error of the HTTP layer itself (no key, an unsupported feature), with its status and code."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


def unauthorized(message: str) -> HttpError:
    return HttpError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


def not_supported(message: str) -> HttpError:
    return HttpError(501, "not_supported", message)


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
    400: "Invalid input (`invalid_input`, `config_error`, `bad_json`, `error`): the message names the fix.",
    401: "No API key, or an unknown or revoked one (`unauthorized`).",
    403: "A write without a key from another site's page (`cross_origin`).",
    404: "Not found (`not_found`, `unknown_agent`): another tenant's is not found either.",
    409: "Conflict with the current state (`conflict`): the message says what it is in.",
    413: "The body is over WAYPOINT_API_MAX_BODY_BYTES (`body_too_large`), or a payload over its limit.",
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


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body(code, message), status_code=status, headers=headers)


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


ErrorPage = Callable[[Request, int, str, str], Response]
"""A surface's error page: (request, status, code, message) -> its HTML answer."""


def install(app: FastAPI, pages: Mapping[str, ErrorPage] | None = None) -> None:
    """Every error the app can raise, answered as JSON, or under a path prefix of `pages` (the
    viewer's "/ui") as that surface's page."""
    pages = dict(pages or {})

    def answer(
        request: Request, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> Response:
        path = request.url.path
        for prefix, page in pages.items():
            if path == prefix or path.startswith(prefix + "/"):
                response = page(request, status, code, message)
                if headers and "Retry-After" in headers:  # a 429's, for a page as for JSON
                    response.headers["Retry-After"] = headers["Retry-After"]
                return response
        return error_response(status, code, message, headers)

    @app.exception_handler(WaypointError)
    async def waypoint_error(request: Request, exc: WaypointError) -> Response:
        if isinstance(exc, NotFound) and await still_starting(request, exc):
            run_id = request.path_params["run_id"]
            message = f"run {run_id!r} is starting: its worker has not written its first state yet; retry in a moment"
            return answer(request, 409, "conflict", message, {"Retry-After": "1"})
        status, code = status_of(exc)
        return answer(request, status, code, str(exc))

    @app.exception_handler(HttpError)
    async def http_error(request: Request, exc: HttpError) -> Response:
        return answer(request, exc.status, exc.code, str(exc), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> Response:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return answer(request, 400, "bad_json", "the body is not valid JSON: send a JSON object")
        where = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ()) if x != 'body') or 'body'}: {p.get('msg')}" for p in problems
        )
        return answer(request, 422, "invalid_body", f"the request does not fit this endpoint: {where}")

    @app.exception_handler(StarletteHTTPException)
    async def starlette_error(request: Request, exc: StarletteHTTPException) -> Response:
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
    async def internal(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        message = f"internal error ({type(exc).__name__}): the server log has the details"
        return answer(request, 500, "internal", message)


def fitted_validation_errors(spec: dict[str, Any]) -> dict[str, Any]:
    """FastAPI documents every 422 as its own `{"detail": [...]}`; `invalid_body` above answers the
    one error shape instead, so the document says that."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    shape = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(shape.pop("$defs", {}))
    schemas.setdefault("ErrorBody", shape)
    theirs = {"$ref": "#/components/schemas/HTTPValidationError"}
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            answer = operation.get("responses", {}).get("422", {}) if isinstance(operation, dict) else {}
            media = answer.get("content", {}).get("application/json", {})
            if media.get("schema") == theirs:
                answer["description"] = MEANING[422]
                media["schema"] = {"$ref": "#/components/schemas/ErrorBody"}
    for unused in ("HTTPValidationError", "ValidationError"):  # in this order: the first refers to the second
        if f'"#/components/schemas/{unused}"' not in json.dumps(spec):
            schemas.pop(unused, None)
    return spec
