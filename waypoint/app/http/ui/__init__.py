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
    POST /ui/runs/{id}/{action}      pause, resume, cancel, send, approve, deny, fork
    GET|POST /ui/login, POST /ui/logout

Auth: the tenant comes from the session cookie (an API key exchanged at /ui/login), whose key
is looked up on every request, so revoking it ends the session; with auth off (`waypoint dev`)
every page acts for the configured tenant. Every POST is one of the viewer's own forms: it carries
the CSRF token its page was rendered with and comes from a page of this server (`Origin`, else
`Referer`), or it is refused with a 403 page, with auth on or off.

Errors are pages, never tracebacks or JSON: the app's error handlers (`errors.install`) answer
under /ui with `error_page`, the same status, code and message the API would send; another
tenant's run is the same 404 page as a run that does not exist.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from waypoint.app.http.auth import SAFE_METHODS, foreign_origin
from waypoint.app.http.errors import HttpError, status_of
from waypoint.app.http.state import ApiState, api_state
from waypoint.app.http.ui import session
from waypoint.errors import InvalidInput, NotFound, WaypointError
from waypoint.names import FINISHED, EventKind, RunSort, RunStatus
from waypoint.store.rows import EventRow, RunRow, StepState, as_json
from waypoint.working_memory import recalled_texts

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
static = StaticFiles(directory=HERE / "static")
PAGE_SIZE = 50
COLLAPSE_CHARS = 2000  # a tool result or message longer than this is sent as its start only
PREVIEW_CHARS = 600  # ...this long; the rest comes from .../tools/{i} or .../messages/{i} when asked


class LoginNeeded(Exception):
    pass


async def tenant_of(request: Request) -> str:
    """The session's tenant, while the key it was made with is valid (one lookup by its id)."""
    api = api_state(request)
    if api.auth:
        key_id = session.key_in(session.secret_of(api.settings.ui_secret), request.cookies.get(session.COOKIE))
        tenant = await api.wp.keys.tenant_of_id(key_id) if key_id is not None else None
        if tenant is None:
            raise LoginNeeded()
    else:
        tenant = api.settings.tenant
    request.state.tenant = tenant
    return tenant


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


router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])
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
    context["csrf"] = session.csrf_token(secret, anchor)
    response = templates.TemplateResponse(request, name, context, status_code=status)
    if fresh:
        session.set_cookie(request, response, session.CSRF_COOKIE, anchor)
    return response


def error_page(request: Request, status: int, code: str, message: str) -> Response:
    """Any error under /ui, as a page (`errors.install` calls it with what the API would send)."""
    return render(request, "error.html", status=status, status_code=status, code=code, message=message)


def install(app: Any) -> None:
    """Mount the viewer: its router, its static files, its answer to a missing session (its error
    pages are `error_page`, which `create_app` gives `errors.install`)."""
    app.include_router(router)
    app.mount("/ui/static", static, name="ui-static")

    @app.exception_handler(LoginNeeded)
    async def login_needed(request: Request, exc: LoginNeeded) -> Response:
        return RedirectResponse("/ui/login?" + urlencode({"next": request.url.path}), status_code=303)


def back_to(run_id: str, **query: str) -> RedirectResponse:
    return RedirectResponse(f"/ui/runs/{run_id}?{urlencode(query)}" if query else f"/ui/runs/{run_id}", 303)


# --- login ---------------------------------------------------------------------------------------


@router.get("/login")
async def login_page(request: Request, next: str = "/ui") -> Response:
    return render(request, "login.html", next=next if next.startswith("/ui") else "/ui")


@router.post("/login")
async def login(
    request: Request, api: Api, key: Annotated[str, Form()], next: Annotated[str, Form()] = "/ui"
) -> Response:
    row = await api.wp.keys.valid(key.strip()) if key.strip() else None
    if row is None:
        message = "unknown or revoked API key: create one with `waypoint keys create --tenant T`"
        return render(request, "login.html", status=401, next=next, refusal=message)
    target = next if next.startswith("/ui") else "/ui"
    response = RedirectResponse(target, status_code=303)
    cookie = session.issue(session.secret_of(api.settings.ui_secret), row.id)
    session.set_cookie(request, response, session.COOKIE, cookie, max_age=session.LIFETIME_SECONDS)
    return response


@router.post("/logout")
async def logout() -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(session.COOKIE)
    return response


# --- pages ---------------------------------------------------------------------------------------


SORTS = {
    RunSort.NEWEST: "newest first",
    RunSort.OLDEST: "oldest first",
    RunSort.TOKENS: "most tokens",
    RunSort.COST: "most cost",
    RunSort.STEPS: "most steps",
    RunSort.DURATION: "longest",
}


@router.get("")
async def runs_page(
    request: Request,
    api: Api,
    tenant: Tenant,
    status: str = "",
    agent: str = "",
    text: str = "",
    since: str = "",
    until: str = "",
    sort: str = "",
    cursor: str = "",
) -> Response:
    filters = {
        "status": status,
        "agent": agent.strip(),
        "text": text.strip(),
        "since": since.strip(),
        "until": until.strip(),
        "sort": sort or RunSort.NEWEST,
    }
    page = await api.wp.runs_page(
        tenant_id=tenant,
        limit=PAGE_SIZE,
        status=filters["status"] or None,
        agent=filters["agent"] or None,
        text=filters["text"] or None,
        since=filters["since"] or None,
        until=filters["until"] or None,
        sort=filters["sort"],
        cursor=cursor or None,
    )
    nxt = None
    if page.next_cursor is not None:
        nxt = urlencode({**{k: v for k, v in filters.items() if v}, "cursor": page.next_cursor})
    return render(
        request,
        "runs.html",
        runs=page.runs,
        statuses=list(RunStatus),
        sorts=SORTS,
        filters=filters,
        next_query=nxt,
        tenant=tenant,
        finished=FINISHED,
        live=any(r.status not in FINISHED for r in page.runs),
    )


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str, api: Api, tenant: Tenant) -> Response:
    wp = api.wp
    try:
        row = await wp.run(run_id, tenant_id=tenant, check_stuck=True)
    except NotFound:
        try:
            starting = await wp.starting(run_id, tenant_id=tenant)
        except WaypointError:
            starting = False
        if not starting:
            raise
        try:
            stuck = await wp.stuck(run_id, tenant_id=tenant)  # its row may never come: say why
        except WaypointError:
            stuck = None
        return render(request, "starting.html", run_id=run_id, stuck=stuck)  # Temporal runs it; its row comes next
    lines = await wp.timeline(run_id, tenant_id=tenant)
    lineage = await wp.lineage(run_id, tenant_id=tenant)
    live = None
    after_seq = 0
    if row.status not in FINISHED:
        try:
            live = None if row.stuck else await wp.progress(run_id, tenant_id=tenant)  # a stuck run answers no query
        except WaypointError:
            live = None  # Temporal unreachable: Postgres still answers
        last_step = lines[-1].step if lines else 0
        tail = await wp.events(run_id, since_step=last_step, limit=5000, tenant_id=tenant)
        after_seq = max((e.seq for e in tail), default=0)  # the stream sends what lands after the page
    settings = api.settings
    trace_url = settings.trace_ui_url.format(trace_id=row.trace_id) if settings.trace_ui_url and row.trace_id else None
    temporal_url = (
        f"http://{request.url.hostname}:{settings.temporal_ui_port}/namespaces/{settings.temporal_namespace}"
        f"/workflows/{run_id}"
    )
    return render(
        request,
        "run.html",
        run=row,
        lines=lines,
        lineage=lineage,
        live=live,
        finished=row.status in FINISHED,
        after_seq=after_seq,
        trace_url=trace_url,
        temporal_url=temporal_url,
    )


@router.get("/runs/{run_id}/rows")
async def rows_fragment(
    request: Request, run_id: str, api: Api, tenant: Tenant, after: Annotated[int, Query(ge=0)] = 0
) -> Response:
    lines = await api.wp.timeline(run_id, tenant_id=tenant, after_step=after)
    row = await api.wp.run(run_id, tenant_id=tenant)
    return render(request, "rows.html", run=row, lines=lines)


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
templates.env.filters["groupby_count"] = counted


def recalled_of(request: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The episodes a model call received from long-term memory: source run, step, kind, score, text."""
    if not request or not request.get("recalled"):
        return []
    refs = request["recalled"]
    texts = recalled_texts(request.get("recalled_text"), refs)
    return [{**ref, "text": text} for ref, text in zip(refs, texts, strict=True)]


def message_text(m: Any) -> str:
    content = m.get("content") if isinstance(m, dict) else None
    return content if isinstance(content, str) else (pretty(content) if content is not None else "")


@router.get("/runs/{run_id}/steps/{step}")
async def step_page(request: Request, run_id: str, step: int, api: Api, tenant: Tenant) -> Response:
    row, before, events = await step_parts(api, tenant, run_id, step)
    request_json = as_json(before.request) if before is not None and before.request else None
    return render(
        request,
        "step.html",
        run=row,
        step=step,
        owner_run_id=before.owner_run_id if before is not None else run_id,
        received=before,
        request_json=request_json,
        recalled=recalled_of(request_json),
        responses=[e for e in events if e.kind == EventKind.MODEL_RESPONSE],
        tools=[e for e in events if e.kind == EventKind.TOOL_RESULT],
        failures=[e for e in events if e.kind == EventKind.MODEL_ATTEMPT_FAILED],
        others=[
            e
            for e in events
            if e.kind not in (EventKind.MODEL_RESPONSE, EventKind.TOOL_RESULT, EventKind.MODEL_ATTEMPT_FAILED)
        ],
        collapse=COLLAPSE_CHARS,
        preview=PREVIEW_CHARS,
    )


async def step_parts(
    api: ApiState, tenant: str, run_id: str, step: int, *, with_events: bool = True, with_request: bool = True
) -> tuple[RunRow, StepState | None, list[EventRow]]:
    """The run, the request its model received at `step` (the state after the step before it:
    one rebuild) and the step's events (a keyset read of the log, not a second rebuild)."""
    if step < 0:
        raise InvalidInput(f"step {step} is negative: steps count from 0")
    row = await api.wp.run(run_id, tenant_id=tenant)
    if step > row.steps:
        raise NotFound(f"run {run_id} has no step {step} yet: it has {row.steps}; pick one from its timeline")
    before = await api.wp.state(run_id, step - 1, tenant_id=tenant) if step >= 1 and with_request else None
    events = await api.wp.events(run_id, step=step, tenant_id=tenant) if with_events else []
    return row, before, events


@router.get("/runs/{run_id}/steps/{step}/tools/{index}")
async def tool_output(run_id: str, step: int, index: int, api: Api, tenant: Tenant) -> Response:
    """The whole text of the step's `index`-th tool result (0 is the first): what the step page
    shows only the start of when it is long, fetched when asked for."""
    try:
        _, _, events = await step_parts(api, tenant, run_id, step, with_request=False)
        tools = [e for e in events if e.kind == EventKind.TOOL_RESULT]
        if not 0 <= index < len(tools):
            raise NotFound(f"step {step} of {run_id} has {len(tools)} tool results: pick 0 to {len(tools) - 1}")
    except WaypointError as exc:
        return PlainTextResponse(str(exc), status_code=status_of(exc)[0])
    return PlainTextResponse(pretty(tools[index].payload))


@router.get("/runs/{run_id}/steps/{step}/messages/{index}")
async def message_content(run_id: str, step: int, index: int, api: Api, tenant: Tenant) -> Response:
    """The whole text of message `index` (0 is the first) of the request the model received at
    the step, for a long message the step page shows only the start of."""
    try:
        _, before, _ = await step_parts(api, tenant, run_id, step, with_events=False)
        messages = before.messages if before is not None else []
        if not 0 <= index < len(messages):
            raise NotFound(f"the request at step {step} of {run_id} has {len(messages)} messages")
    except WaypointError as exc:
        return PlainTextResponse(str(exc), status_code=status_of(exc)[0])
    return PlainTextResponse(message_text(messages[index]))


@router.get("/runs/{run_id}/diff")
async def diff_page(request: Request, run_id: str, api: Api, tenant: Tenant, a: int, b: int) -> Response:
    row = await api.wp.run(run_id, tenant_id=tenant)
    found = await api.wp.diff(run_id, a, b, tenant_id=tenant)
    return render(request, "diff.html", run=row, diff=found)


@router.get("/runs/{run_id}/memory")
async def memory_page(request: Request, run_id: str, api: Api, tenant: Tenant, q: str = "") -> Response:
    row = await api.wp.run(run_id, tenant_id=tenant)
    episodes, hits, problem = [], [], None
    try:  # memory lives behind the memory worker: when it is down, the page says so
        episodes = await api.wp.memory_show(run_id, tenant_id=tenant)
        if q.strip():
            hits = await api.wp.memory_search(q.strip(), k=10, tenant_id=tenant)
    except WaypointError as exc:
        problem = str(exc)
    return render(request, "memory.html", run=row, episodes=episodes, hits=hits, q=q, problem=problem)


@router.get("/runs/{run_id}/compactions")
async def compactions_page(request: Request, run_id: str, api: Api, tenant: Tenant) -> Response:
    row = await api.wp.run(run_id, tenant_id=tenant)
    rows = await api.wp.compactions(run_id, tenant_id=tenant, limit=100)
    return render(request, "compactions.html", run=row, compactions=rows)


# --- actions -------------------------------------------------------------------------------------


async def act(run_id: str, done: str, call: Any) -> RedirectResponse:
    """Run an action; back to the run page with what happened, or with the refusal's reason."""
    try:
        progress = await call
    except WaypointError as exc:
        return back_to(run_id, refusal=str(exc))
    return back_to(run_id, notice=f"{done}: the run is {progress.status} at step {progress.step}")


@router.post("/runs/{run_id}/pause")
async def pause(run_id: str, api: Api, tenant: Tenant) -> Response:
    return await act(run_id, "paused", api.wp.pause(run_id, tenant_id=tenant))


@router.post("/runs/{run_id}/resume")
async def resume(run_id: str, api: Api, tenant: Tenant) -> Response:
    return await act(run_id, "resumed", api.wp.resume(run_id, tenant_id=tenant))


@router.post("/runs/{run_id}/cancel")
async def cancel(run_id: str, api: Api, tenant: Tenant, reason: Annotated[str, Form()] = "") -> Response:
    return await act(run_id, "cancel asked", api.wp.cancel(run_id, reason.strip() or None, tenant_id=tenant))


@router.post("/runs/{run_id}/send")
async def send(run_id: str, api: Api, tenant: Tenant, text: Annotated[str, Form()] = "") -> Response:
    if not text.strip():
        return back_to(run_id, refusal="the message is empty: type some text")
    return await act(run_id, "message sent", api.wp.send(run_id, text, tenant_id=tenant))


@router.post("/runs/{run_id}/approve")
async def approve(
    run_id: str, api: Api, tenant: Tenant, call_id: Annotated[str, Form()] = "", reason: Annotated[str, Form()] = ""
) -> Response:
    call = api.wp.approve(run_id, call_id or None, reason.strip() or None, tenant_id=tenant)
    return await act(run_id, "approved", call)


@router.post("/runs/{run_id}/deny")
async def deny(
    run_id: str, api: Api, tenant: Tenant, call_id: Annotated[str, Form()] = "", reason: Annotated[str, Form()] = ""
) -> Response:
    call = api.wp.deny(run_id, call_id or None, reason.strip() or None, tenant_id=tenant)
    return await act(run_id, "denied", call)


@router.post("/runs/{run_id}/fork")
async def fork(
    run_id: str,
    api: Api,
    tenant: Tenant,
    step: Annotated[int, Form()],
    message: Annotated[str, Form()] = "",
    model: Annotated[str, Form()] = "",
) -> Response:
    try:
        new_id = await api.wp.fork(
            run_id, step, message=message.strip() or None, model=model.strip() or None, tenant_id=tenant
        )
    except WaypointError as exc:
        return back_to(run_id, refusal=str(exc))
    return back_to(new_id, notice=f"forked from {run_id} at step {step}")


__all__ = ["install", "router"]
