"""The ASGI app: `create_app(settings)` for uvicorn (`waypoint serve`), one router per noun.

    /v1/...                      Waypoint's own API: runs, their steps, state, events, streams, schedules...
    /assistants, /threads, /runs, /store
                                 the Agent Protocol (the API of LangGraph Server)
    /agents, /runs/search, ...   the open Agent Protocol spec's names for the same (protocol/agents.py,
                                 background.py, commands.py)
    /ui                          the web viewer (server-rendered pages; a key exchanged for a cookie)
    /healthz                     liveness, without a key
    /docs, /openapi.json         the OpenAPI documentation

Requests are authenticated by API key (`auth.py`; a write without one from another site's page
is refused) and may be rate-limited per key (`limits.py`: 429), bodies are capped at
`WAYPOINT_API_MAX_BODY_BYTES` (413 past it), and browsers may call from `WAYPOINT_API_CORS_ORIGINS`
(a preflight from another origin is a JSON 403 naming that setting).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from waypoint.app.http import errors
from waypoint.app.http.hub import StreamHub
from waypoint.app.http.limits import HttpLimits
from waypoint.app.http.state import ApiState
from waypoint.checks import check_text
from waypoint.client import Waypoint
from waypoint.config import Settings


class BodyLimit:
    """Refuse a body over `limit` bytes with 413: by its Content-Length, or (a chunked body) by
    reading it, up to the limit, before the app sees it."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await self._refuse(send)
                return
            await self.app(scope, receive, send)
            return
        if b"chunked" not in headers.get(b"transfer-encoding", b""):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(send)
                return
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        response = errors.error_response(
            413,
            "body_too_large",
            f"the request body is over {self.limit} bytes (WAYPOINT_API_MAX_BODY_BYTES): send less, "
            "or pass large content by reference",
        )
        await send({"type": "http.response.start", "status": 413, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})


class Cors(CORSMiddleware):
    """Starlette's CORS, but a preflight from an origin not listed gets the API's JSON error naming
    the setting that lets it in (Starlette answers a bare "Disallowed CORS origin")."""

    def preflight_response(self, request_headers: Headers) -> Response:
        origin = request_headers["origin"]
        if not self.is_allowed_origin(origin=origin):
            return errors.cors_refusal(origin, list(self.allow_origins))
        return super().preflight_response(request_headers)


async def storable_parameters(request: HTTPConnection) -> None:
    """Refuse a path or query parameter the store cannot hold (a NUL, sent as `%00`) before a route
    reads it: the Agent Protocol's thread routes pass theirs to the store as they come."""
    for name, value in [*request.path_params.items(), *request.query_params.multi_items()]:
        check_text(f"the parameter {name!r}", value)


def create_app(settings: Settings, *, auth: bool = True, waypoint: Waypoint | None = None) -> FastAPI:
    """The API on the configured stack; `waypoint` reuses a client (its Temporal connection and engine)."""
    from waypoint.app.http import agents, audit, evals, fleet, memory, runs, schedules, timeline, trees, webhooks
    from waypoint.app.http.protocol import agents as protocol_agents
    from waypoint.app.http.protocol import assistants, background, commands, crons, edits, store, threads
    from waypoint.app.http.protocol import runs as protocol_runs

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        wp = waypoint or await Waypoint.connect(settings, temporal=False)
        hub = await StreamHub(wp, buffer=settings.api_stream_buffer).start()
        limits = HttpLimits(settings.http_requests_per_second, settings.http_open_streams)
        app.state.api = ApiState(wp=wp, hub=hub, settings=settings, auth=auth, limits=limits)
        try:
            yield
        finally:
            await hub.close()
            if waypoint is None:
                await wp.close()

    app = FastAPI(
        title="Waypoint",
        summary="Durable, time-travelling LLM agent runs: start, inspect, stream, fork; and the Agent Protocol.",
        version="1",
        lifespan=lifespan,
    )
    from waypoint.app.http import ui

    errors.install(app, pages={"/ui": ui.error_page})
    # crons before the protocol's runs: /runs/crons/... are not runs; the open spec's names after LangGraph's
    routers = [runs, trees, agents, fleet, memory, schedules, webhooks, assistants, threads, crons, protocol_runs]
    routers += [store, protocol_agents, background, commands, edits, timeline, evals, audit]
    for module in routers:
        app.include_router(module.router, dependencies=[Depends(storable_parameters)])
    ui.install(app)

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, Any]:
        """Liveness: the process answers (no key needed)."""
        return {"ok": True}

    app.add_middleware(BodyLimit, limit=settings.api_max_body_bytes)
    # Also with no origin listed: a browser's preflight then learns which setting lets its page in.
    app.add_middleware(
        Cors,
        allow_origins=settings.cors_origins,
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["Location", "Content-Location", "X-Pagination-Next"],
    )
    return app
