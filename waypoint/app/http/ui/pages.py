"""The viewer's pages: login, the runs list, a run with its timeline, a step, a diff, its memory
and compactions (the forms on a run's page post to `actions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from waypoint.app.http.state import ApiState
from waypoint.app.http.ui import session, sso
from waypoint.app.http.ui.reading import content_text, output_text, read_step
from waypoint.app.http.ui.render import (
    Api,
    Tenant,
    answers_errors,
    as_text,
    own_form,
    render,
    unless_unavailable,
)
from waypoint.client import EventRow, RunRow, StepState, as_json
from waypoint.errors import InvalidInput, NotFound, WaypointError
from waypoint.names import FINISHED, EventKind, RunSort, RunStatus
from waypoint.working_memory import recalled_texts

PAGE_SIZE = 50
STEPS_PAGE = 50  # steps on a run's page: a 200-step run's page was 7,477 px tall with all of them

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])


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
    return sso.logout(response)  # one session at a time: a signed-in user's ends


@router.post("/logout")
async def logout() -> Response:
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(session.COOKIE)
    return sso.logout(response)


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
    roots: str = "",
    cursor: str = "",
    fingerprint: str = "",
) -> Response:
    filters = {
        "status": status,
        "agent": agent.strip(),
        "fingerprint": fingerprint.strip(),
        "text": text.strip(),
        "since": since.strip(),
        "until": until.strip(),
        "sort": sort or RunSort.NEWEST,
        "roots": "1" if roots else "",  # only the runs no sub-agent call started
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
        roots=bool(filters["roots"]),
        fingerprint=filters["fingerprint"] or None,
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
async def run_page(
    request: Request, run_id: str, api: Api, tenant: Tenant, page: Annotated[int, Query(ge=1)] = 1
) -> Response:
    """The run's header, tree, waterfall, actions, and its steps `STEPS_PAGE` a page: page p holds
    steps (p-1)*STEPS_PAGE+1 to p*STEPS_PAGE (the waterfall above draws them all, virtualised)."""
    wp = api.wp
    try:
        row = await wp.run(run_id, tenant_id=tenant, check_stuck=True)
    except NotFound:
        if not await unless_unavailable(wp.starting(run_id, tenant_id=tenant), False):
            raise
        stuck = await unless_unavailable(wp.stuck(run_id, tenant_id=tenant), None)  # its row may never come: say why
        return render(request, "starting.html", run_id=run_id, stuck=stuck)  # Temporal runs it; its row comes next
    pages = max(1, -(-row.steps // STEPS_PAGE))
    if page > pages:
        raise NotFound(f"run {run_id} has {row.steps} steps, {pages} page(s) of {STEPS_PAGE}: pick page 1 to {pages}")
    first = (page - 1) * STEPS_PAGE
    lines = await wp.timeline(run_id, tenant_id=tenant, after_step=first, limit=STEPS_PAGE)
    lines = [s for s in lines if s.step <= first + STEPS_PAGE]
    lineage = await wp.lineage(run_id, tenant_id=tenant)
    tree = await wp.tree(run_id, tenant_id=tenant)
    live = None
    after_seq = 0
    if row.status not in FINISHED:
        if not row.stuck:  # a stuck run answers no query
            live = await unless_unavailable(wp.progress(run_id, tenant_id=tenant), None)
        last_step = lines[-1].step if lines else first
        tail = await wp.events(run_id, since_step=last_step, limit=5000, tenant_id=tenant)
        after_seq = max((e.seq for e in tail), default=0)  # the stream sends what lands after the page
    webhook = await wp.webhook_summary(run_id, tenant_id=tenant) if row.webhook else None
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
        tree=tree,
        live=live,
        finished=row.status in FINISHED,
        after_seq=after_seq,
        pager=Pager(page, pages, STEPS_PAGE, row.steps),
        trace_url=trace_url,
        temporal_url=temporal_url,
        webhook=webhook,
    )


@dataclass(frozen=True)
class Pager:
    """Where a run's page is among the pages of its steps."""

    page: int
    pages: int
    size: int
    steps: int

    @property
    def last(self) -> bool:
        return self.page == self.pages

    @property
    def first_step(self) -> int:
        return (self.page - 1) * self.size + 1

    @property
    def last_step(self) -> int:
        return min(self.page * self.size, self.steps)

    def near(self) -> list[int]:
        """The page numbers a pager links: the first, the last, and two either side of this one."""
        return sorted({1, self.pages, *range(max(1, self.page - 2), min(self.pages, self.page + 2) + 1)})


@router.get("/runs/{run_id}/rows")
async def rows_fragment(
    request: Request, run_id: str, api: Api, tenant: Tenant, after: Annotated[int, Query(ge=0)] = 0
) -> Response:
    lines = await api.wp.timeline(run_id, tenant_id=tenant, after_step=after)
    row = await api.wp.run(run_id, tenant_id=tenant)
    return render(request, "rows.html", run=row, lines=lines)


@router.get("/runs/{run_id}/tree")
async def tree_fragment(request: Request, run_id: str, api: Api, tenant: Tenant) -> Response:
    """The run's table of sub-agent runs, for a live run's page to refresh (empty while it has none)."""
    tree = await api.wp.tree(run_id, tenant_id=tenant)
    return render(request, "tree.html", run=tree.root, tree=tree)


def recalled_of(request: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The episodes a model call received from long-term memory: source run, step, kind, score, text."""
    if not request or not request.get("recalled"):
        return []
    refs = request["recalled"]
    texts = recalled_texts(request.get("recalled_text"), refs)
    return [{**ref, "text": text} for ref, text in zip(refs, texts, strict=True)]


def message_text(m: Any) -> str:
    """A message's whole text, as the step page shows its start (`reading.content_text`)."""
    return (content_text(m.get("content")) if isinstance(m, dict) else None) or ""


# The step page's events with a section of their own; the others are listed under "Other events".
SHOWN_APART = (
    EventKind.MODEL_RESPONSE,
    EventKind.TOOL_RESULT,
    EventKind.MODEL_ATTEMPT_FAILED,
    EventKind.MODEL_FAILOVER,
)


@router.get("/runs/{run_id}/steps/{step}")
async def step_page(request: Request, run_id: str, step: int, api: Api, tenant: Tenant) -> Response:
    row, before, events = await step_parts(api, tenant, run_id, step)
    started = {c.caller_call_index: c for c in await api.wp.children(run_id, tenant_id=tenant) if c.caller_step == step}
    request_json = as_json(before.request) if before is not None and before.request else None
    base_url = f"/ui/runs/{run_id}/steps/{step}"
    reading = read_step(before.messages if before is not None else [], events, base_url)
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
        started=started,
        failures=[e for e in events if e.kind == EventKind.MODEL_ATTEMPT_FAILED],
        failovers=[e for e in events if e.kind == EventKind.MODEL_FAILOVER],
        others=[e for e in events if e.kind not in SHOWN_APART],
        reading=reading,
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
@answers_errors(as_text)
async def tool_output(run_id: str, step: int, index: int, api: Api, tenant: Tenant) -> Response:
    """The whole text of the step's `index`-th tool result (0 is the first): what the step page
    shows only the start of when it is long, fetched when asked for."""
    _, _, events = await step_parts(api, tenant, run_id, step, with_request=False)
    tools = [e for e in events if e.kind == EventKind.TOOL_RESULT]
    if not 0 <= index < len(tools):
        raise NotFound(f"step {step} of {run_id} has {len(tools)} tool results: pick 0 to {len(tools) - 1}")
    return PlainTextResponse(output_text(tools[index].payload))


@router.get("/runs/{run_id}/steps/{step}/messages/{index}")
@answers_errors(as_text)
async def message_content(run_id: str, step: int, index: int, api: Api, tenant: Tenant) -> Response:
    """The whole text of message `index` (0 is the first) of the request the model received at
    the step, for a long message the step page shows only the start of."""
    _, before, _ = await step_parts(api, tenant, run_id, step, with_events=False)
    messages = before.messages if before is not None else []
    if not 0 <= index < len(messages):
        raise NotFound(f"the request at step {step} of {run_id} has {len(messages)} messages")
    return PlainTextResponse(message_text(messages[index]))


@router.get("/runs/{run_id}/diff")
async def diff_page(request: Request, run_id: str, api: Api, tenant: Tenant, a: int, b: int) -> Response:
    row = await api.wp.run(run_id, tenant_id=tenant)
    found = await api.wp.diff(run_id, a, b, tenant_id=tenant)
    return render(request, "diff.html", run=row, diff=found)


@router.get("/limits")
async def limits_page(request: Request, api: Api, tenant: Tenant) -> Response:
    """The fleet limits and each model key's calls in flight and waiting, cooldown and breaker."""
    return render(request, "limits.html", report=await api.wp.limits.report(tenant))


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
