"""The web viewer under /ui: server-rendered pages (Jinja2) over the same `Waypoint` client the
/v1 API calls, and one small script (static/viewer.js) that follows a live run through
/v1/runs/{id}/stream. No build step; every asset ships in the package.

    GET  /ui                         runs: filters (status, agent, text, since, until), sorts, keyset
                                     pages; runs.js follows the live ones through GET /v1/runs?run_id=
    GET  /ui/runs/{id}               header, lineage, links, the step timeline (one query)
    GET  /ui/runs/{id}/rows?after=N  timeline rows after step N (what the script appends)
    GET  /ui/runs/{id}/steps/{n}     the request the model received (recalled memories with their
                                     source), its answer, tool calls, failures; long texts as their start
    GET  /ui/runs/{id}/steps/{n}/tools/{i}     the whole text of a long tool result (step.js fetches it)
    GET  /ui/runs/{id}/steps/{n}/messages/{i}  the whole text of a long message of the request
    GET  /ui/runs/{id}/diff?a=&b=    what changed between two steps
    GET  /ui/runs/{id}/memory?q=     the run's episodes; a search over the tenant's memory
    GET  /ui/runs/{id}/compactions   what each compaction pruned and kept
    GET  /ui/fleet?period=24h        the fleet over a period: runs by status, steps a minute, model calls
                                     and 429s per key, waits, cost per day and agent, slowest and costliest
    GET  /ui/schedules               the tenant's schedules: next fire times, last runs, pause/resume/fire
    GET  /ui/schedules/{id}          one schedule and the runs it fired
    POST /ui/schedules/{id}/{action} pause, resume, trigger
    GET  /ui/webhooks?failed=&run_id=  webhook deliveries: pending (next attempt), delivered, failed (the
                                     dead-letter list); GET /ui/webhooks/{id}: one and its attempts
    POST /ui/webhooks/{id}/redeliver send a delivered or failed delivery again
    GET  /ui/experiments             the tenant's experiments: dataset@version, agent, status, per-scorer means
    GET  /ui/experiments/{id}        its summary table and every case's result, linked to the case's run
    GET  /ui/experiments/{a}/compare/{b}   B against A per scorer (wins, losses, significance) and per case
    GET  /ui/audit?actor=&action=&since=&cursor=&verify=  the tenant's audit log, newest first, and
                                     (verify=true) whether its hash chain holds (admins only, as /v1/audit)
    POST /ui/runs/{id}/{action}      pause, resume, cancel, send, approve, deny, fork
    GET|POST /ui/login, POST /ui/logout
    GET  /ui/sso/start, /ui/sso/callback   sign-in through the identity provider (WAYPOINT_OIDC_ISSUER)
    GET  /favicon.ico                the viewer's icon (an SVG; open, like the static files)

Auth: the tenant comes from the session cookie (an API key exchanged at /ui/login), whose key
is looked up on every request, so revoking it ends the session, or from a person's session after
signing in through the identity provider (`sso.py`: tenant and role from the ID token's claims);
with auth off (`waypoint dev`) every page acts for the configured tenant. Every POST is one of the
viewer's own forms: it carries the CSRF token its page was rendered with and comes from a page of
this server (`Origin`, else `Referer`), or it is refused with a 403 page, with auth on or off.

Errors are pages, never tracebacks or JSON: the app's error handlers (`errors.install`) answer
under /ui with `error_page`, the same status, code and message the API would send; another
tenant's run is the same 404 page as a run that does not exist.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from waypoint.app.http.ui import actions, audit, experiments, fleet, pages, schedules, sso, webhooks
from waypoint.app.http.ui.render import HERE, LoginNeeded, error_page

ICON_CACHE = {"Cache-Control": "public, max-age=86400"}


def install(app: Any) -> None:
    """Mount the viewer: its pages and forms, its static files, its answer to a missing session (its
    error pages are `error_page`, which `create_app` gives `errors.install`)."""
    app.include_router(pages.router)
    app.include_router(actions.router)
    app.include_router(schedules.router)
    app.include_router(webhooks.router)
    app.include_router(experiments.router)
    app.include_router(fleet.router)
    app.include_router(sso.router)
    app.include_router(audit.router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        """The viewer's icon (an SVG, whatever the name), where a browser looks for one unasked: the
        pages name it too (base.html), so no page asks for something that is not there."""
        return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml", headers=ICON_CACHE)

    @app.exception_handler(LoginNeeded)
    async def login_needed(request: Request, exc: LoginNeeded) -> Response:
        return RedirectResponse("/ui/login?" + urlencode({"next": request.url.path}), status_code=303)


__all__ = ["error_page", "install"]
