"""Waypoint's own API for runs: everything the CLI does, under /v1/runs.

Bodies and answers are JSON (`as_json` of the typed rows the Python client
returns); every call acts for the tenant of the API key, and another tenant's run is 404.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, OpenStream, Tenant
from waypoint.app.http.streams import SSE_DOCUMENTED, NativeFormat, run_items, sse_response
from waypoint.app.http.trees import TreeFormat, TreeStream, parse_tree_position
from waypoint.checks import parse_step
from waypoint.client import RunRow, StartedRun, as_json, caller_json, child_json
from waypoint.errors import InvalidInput
from waypoint.names import EventKind, RunSort, RunStatus
from waypoint.types import Budget

router = APIRouter(prefix="/v1", tags=["runs"], responses=errors.KEYED)


def run_json(row: RunRow) -> dict[str, Any]:
    """A run as JSON: `status` is `stuck` while its workflow task keeps failing (`stuck` says why)."""
    data: dict[str, Any] = as_json(row)
    return {**data, "status": row.shown_status}


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


WEBHOOK_FIELD: Any = Field(
    None,
    description="An http(s) URL that gets one signed POST of the run's final state when it ends "
    "(GET /v1/webhooks/secret has the signing secret; GET /v1/runs/{id}/webhook the attempts).",
)


class StartRun(Body):
    task: str = Field(description="What the agent should do.")
    agent: str = Field("demo", description="Agent name (GET /v1/agents lists them).")
    model: str | None = Field(None, description="Model spec overriding the agent's, e.g. openai:gpt-4o-mini.")
    max_steps: int | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0, description="Token budget (input + output).")
    max_cost_usd: float | None = Field(None, gt=0)
    deadline_seconds: float | None = Field(None, gt=0, description="Wall-clock budget.")
    priority: int | None = Field(
        None,
        ge=1,
        le=5,
        description="1 (first) to 5 (last); default 3. Busy workers take higher-priority runs' work first.",
    )
    webhook: str | None = WEBHOOK_FIELD
    start_at: datetime | None = Field(
        None, description="A delayed run: when it starts (ISO 8601, UTC unless it has an offset); status `scheduled`."
    )
    after_seconds: float | None = Field(None, ge=0, description="A delayed run: start after this many seconds.")


# The `Idempotency-Key` header of a start: every repeat within the retention window answers the same run.
IdempotencyKey = Annotated[
    str | None,
    Header(
        description="Repeats of this start with the same key (within WAYPOINT_IDEMPOTENCY_RETENTION_SECONDS) "
        "answer the first one's run instead of starting another; the same key with another body is 409."
    ),
]


# A start's answer for a repeat of an idempotent start: the key's run, nothing started (a new run is 201).
REPEATED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A repeat of an idempotent start (the same `Idempotency-Key`): the key's run; nothing started.",
        "content": {"application/json": {"schema": {"type": "object", "additionalProperties": True}}},
    }
}


def started(response: Response, run_id: StartedRun) -> None:
    """201 and the new run's Location; 200 for a repeat that answered the key's run."""
    response.status_code = 200 if run_id.repeat else 201
    response.headers["Location"] = f"/v1/runs/{run_id}"


def inherited_priority() -> Any:
    return Field(None, ge=1, le=5, description="1 (first) to 5 (last); default: the original run's.")


class Fork(Body):
    step: int = Field(ge=0, description="Fork from the state at this step.")
    message: str | None = Field(None, description="A user message added to that state.")
    model: str | None = None
    priority: int | None = inherited_priority()
    webhook: str | None = WEBHOOK_FIELD
    memory: str = Field(
        "then",
        description="What it recalls from long-term memory: then (as it was at that step of the original), "
        "now (as it is); neither recalls the original's later steps, all does.",
    )


class Rerun(Body):
    from_step: int = Field(0, ge=0, description="Start from the state at this step.")
    model: str | None = Field(None, description="Model spec (default: the run's own).")
    agent: str | None = Field(None, description="Agent name (default: the run's own).")
    tools: str = Field("recorded", description="recorded (answer matching calls from the ledger) or live.")
    instructions: str | None = Field(None, description="The system prompt, in place of the agent's own.")
    priority: int | None = inherited_priority()
    webhook: str | None = WEBHOOK_FIELD
    memory: str = Field(
        "then",
        description="What it recalls from long-term memory: then (as it was at that step of the original), "
        "now (as it is); neither recalls the original's later steps, all does.",
    )
    rerun_children: bool = Field(
        False,
        description="Run its sub-agents again as new runs of the rerun (with recorded tools, their recorded "
        "answers answer the calls otherwise).",
    )


class Reason(Body):
    reason: str | None = None


class Text(Body):
    text: str


class Decide(Body):
    call_id: str | None = Field(None, description="The waiting tool call, when several wait.")
    reason: str | None = None
    edited_input: dict[str, Any] | None = Field(None, description="approve: the arguments the tool runs with instead.")
    answer: str | None = Field(None, description="approve: the answer to an ask_human call (its result).")


def json_of(value: Any) -> dict[str, Any]:
    """A typed row (or the live state) as a JSON object."""
    data: dict[str, Any] = as_json(value)
    return data


@router.post("/runs", status_code=201, responses=REPEATED | errors.documented(400, 404, 409))
async def start_run(
    body: StartRun, api: Api, tenant: Tenant, response: Response, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Start a run; answers its id (and trace id) at once, before the first step. With an
    `Idempotency-Key`, a repeat answers the same run, with 200 instead of 201."""
    budget = Budget(
        max_steps=body.max_steps,
        max_tokens=body.max_tokens,
        max_cost_usd=body.max_cost_usd,
        deadline_seconds=body.deadline_seconds,
    )
    run_id = await api.wp.start_run(
        body.task,
        agent=body.agent,
        model=body.model,
        budget=budget,
        tenant_id=tenant,
        priority=body.priority,
        idempotency_key=idempotency_key,
        start_at=body.start_at,
        after_seconds=body.after_seconds,
        webhook=body.webhook,
    )
    started(response, run_id)
    return {"run_id": run_id, "trace_id": api.wp.started_trace(run_id)}


@router.get("/runs", responses=errors.documented(400, 404))
async def list_runs(
    api: Api,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
    status: RunStatus | None = None,
    agent: str | None = None,
    text: Annotated[str | None, Query(description="Only runs whose task contains this (any case).")] = None,
    since: Annotated[str | None, Query(description="Created at or after: an age (`1h`, `7d`) or an ISO date.")] = None,
    until: Annotated[str | None, Query(description="Created before: an age (`1h`, `7d`) or an ISO date.")] = None,
    sort: Annotated[RunSort, Query(description="newest, oldest, or most tokens, cost, steps, duration first.")] = (
        RunSort.NEWEST
    ),
    run_id: Annotated[list[str] | None, Query(description="Only these runs (repeat the parameter).")] = None,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page (same sort).")] = None,
    roots: Annotated[bool, Query(description="Leave sub-agent runs out (only runs no call started).")] = False,
    schedule_id: Annotated[str | None, Query(description="Only the runs this schedule fired.")] = None,
    fingerprint: Annotated[
        str | None,
        Query(description="Only the runs that started with this agent version (4 to 64 hex digits of it)."),
    ] = None,
) -> dict[str, Any]:
    """The tenant's runs, newest first unless `sort` says otherwise, a page at a time (keyset
    pagination)."""
    page = await api.wp.runs_page(
        tenant_id=tenant,
        limit=limit,
        status=status,
        agent=agent or None,
        text=text or None,
        since=since or None,
        until=until or None,
        sort=sort,
        cursor=cursor,
        run_ids=run_id,
        roots=roots,
        schedule_id=schedule_id or None,
        fingerprint=fingerprint or None,
    )
    return {"runs": [run_json(r) for r in page.runs], "next_cursor": page.next_cursor}


@router.get("/runs/{run_id}", responses=errors.documented(400, 404, 409))
async def get_run(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The run's row and, while it runs, its live state from Temporal (step, pending approvals);
    `parent`, the call that started it if a sub-agent call did (run, step, call index), and
    `children`, the sub-agent runs its own calls started (GET .../tree has the whole tree);
    `budget`, its tree's budget pool (per measure: limit, used, reserved by calls in flight, left).
    A run started a moment ago whose worker has not written its row yet is the row its start asks
    for (`Waypoint.run_or_planned`): `starting`, or `queued` or `scheduled`, no steps; an unfinished
    run whose workflow task keeps failing is `stuck`, with the failure in `stuck`."""
    view = await api.wp.status(run_id, tenant_id=tenant, planned=True)
    row = view.row
    if view.planned:
        return {**run_json(row), "live": None, "parent": None, "children": [], "budget": None}
    children = [child_json(c) for c in await api.wp.children(run_id, tenant_id=tenant)]
    return {
        **run_json(row),
        "live": as_json(view.live),
        "parent": caller_json(row),
        "children": children,
        "budget": view.budget.to_json() if view.budget is not None else None,
    }


@router.get("/runs/{run_id}/steps", responses=errors.documented(400, 404, 409))
async def steps(
    run_id: str,
    api: Api,
    tenant: Tenant,
    after_step: Annotated[int, Query(ge=0, description="The last step seen (keyset pagination).")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """The step timeline: one line per step (action, tools, tokens, model and tool time)."""
    lines = await api.wp.timeline(run_id, tenant_id=tenant, after_step=after_step, limit=limit)
    nxt = lines[-1].step if len(lines) == limit else None
    return {"run_id": run_id, "steps": as_json(lines), "next_after_step": nxt}


@router.get("/runs/{run_id}/lineage", responses=errors.documented(400, 404, 409))
async def lineage(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The runs it was forked from (oldest first) and its own forks."""
    return {"run_id": run_id, "lineage": as_json(await api.wp.lineage(run_id, tenant_id=tenant))}


@router.get("/runs/{run_id}/compare/{other}", responses=errors.documented(400, 404, 409))
async def compare(run_id: str, other: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """This run and `other` step by step: tool calls, answers, tokens, cost, model time, outcome."""
    data: dict[str, Any] = as_json(await api.wp.compare(run_id, other, tenant_id=tenant))
    return data


@router.get("/runs/{run_id}/steps/{step}/state", responses=errors.documented(400, 404, 409))
async def state(run_id: str, step: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The state at a step: the working memory the next model call saw, and the step's events."""
    found = await api.wp.state(run_id, parse_step(step), tenant_id=tenant)
    data: dict[str, Any] = as_json(found)
    return data


@router.get("/runs/{run_id}/diff", responses=errors.documented(400, 404, 409))
async def diff(run_id: str, a: str, b: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """What changed between the states at steps a and b."""
    data: dict[str, Any] = as_json(await api.wp.diff(run_id, parse_step(a), parse_step(b), tenant_id=tenant))
    return data


@router.get("/runs/{run_id}/events", responses=errors.documented(400, 404, 409))
async def events(
    run_id: str,
    api: Api,
    tenant: Tenant,
    kind: Annotated[list[EventKind] | None, Query(description="Only these kinds (repeat the parameter).")] = None,
    since_step: Annotated[int, Query(ge=0)] = 0,
    after_seq: Annotated[int, Query(ge=0, description="The last seq seen (keyset pagination).")] = 0,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    """The append-only event log, in order, a page at a time."""
    rows = await api.wp.events(
        run_id, kinds=list(kind or []), since_step=since_step, after_seq=after_seq, limit=limit, tenant_id=tenant
    )
    nxt = rows[-1].seq if len(rows) == limit else None
    return {"run_id": run_id, "events": as_json(rows), "next_after_seq": nxt}


class Ndjson(StreamingResponse):
    media_type = "application/x-ndjson"


@router.get("/runs/{run_id}/export", response_class=Ndjson, responses=errors.documented(400, 404, 409))
async def export(run_id: str, api: Api, tenant: Tenant) -> StreamingResponse:
    """The full transcript, streamed as JSON lines: the run row, then every event in order."""
    lines = api.wp.export(run_id, tenant_id=tenant)
    first = await anext(lines)  # an unknown run is a 404 before the stream starts

    async def body() -> Any:
        yield first + "\n"
        async for line in lines:
            yield line + "\n"

    return StreamingResponse(
        body(),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{run_id}.jsonl"'},
    )


@router.get(
    "/runs/{run_id}/stream",
    response_class=EventSourceResponse,
    responses=SSE_DOCUMENTED | errors.documented(400, 404, 409),
)
async def stream(
    run_id: str,
    api: Api,
    tenant: Tenant,
    slot: OpenStream,
    last_event_id: Annotated[str | None, Header(description="Resume after this event (the SSE id).")] = None,
    after: Annotated[
        int | None, Query(ge=0, description="Resume after this seq (for clients without headers).")
    ] = None,
    format: Annotated[
        str, Query(pattern="^(waypoint|agui)$", description="waypoint, or agui (AG-UI events).")
    ] = "waypoint",
    deltas: Annotated[bool, Query(description="Include model token deltas.")] = True,
    children: Annotated[
        bool, Query(description="The events of its sub-agent runs too (theirs too), each naming its run.")
    ] = False,
) -> Response:
    """Server-sent events: the run's log from a position on, then live as it commits, with model
    token deltas, until the run ends. Reconnect with Last-Event-ID to resume exactly. With
    `children=true`, the runs below it too, until every one has ended (ids: see `trees`)."""
    keepalive = api.settings.api_keepalive_seconds
    if children:
        if format != "waypoint":
            raise InvalidInput("children=true streams in format=waypoint only: leave format out")
        cursors = parse_tree_position(run_id, last_event_id) if last_event_id and last_event_id.strip() else {}
        cursors[run_id] = await api.wp.check_position(run_id, cursors.get(run_id, after or 0), tenant_id=tenant)
        tree_stream = TreeStream(api.hub, api.wp, tenant, run_id, cursors, deltas=deltas)
        return sse_response(tree_stream.items(), TreeFormat(tree_stream).render, slot=slot, keepalive=keepalive)
    position = await api.wp.check_position(run_id, resume_point(last_event_id, after), tenant_id=tenant)
    items = run_items(api.hub, api.wp, tenant, run_id, position, deltas=deltas)
    if format == "agui":
        from waypoint.app.http.agui import AguiFormat

        agui = AguiFormat(run_id, thread_id=run_id, from_start=position == 0)
        return sse_response(items, agui.render, slot=slot, keepalive=keepalive)
    return sse_response(items, NativeFormat(run_id).render, slot=slot, keepalive=keepalive)


def resume_point(last_event_id: str | None, after: int | None) -> int:
    """The seq a stream resumes after, as sent: Last-Event-ID wins over ?after=. Whether the run's
    log has it is `Waypoint.check_position`'s to say."""
    if last_event_id and last_event_id.strip():
        if not _EVENT_ID.fullmatch(last_event_id.strip()):
            raise InvalidInput(f"Last-Event-ID {last_event_id!r} is not an id this API sent: it sends seqs (1, 2, ...)")
        return int(last_event_id)
    return after or 0


_EVENT_ID = re.compile("[0-9]{1,10}")  # a seq (INTEGER): ten digits at most


@router.post("/runs/{run_id}/fork", status_code=201, responses=REPEATED | errors.documented(400, 404, 409))
async def fork(
    run_id: str, body: Fork, api: Api, tenant: Tenant, response: Response, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """A new run from the state of this one at a step (plus an optional message); the parent is untouched."""
    new_id = await api.wp.fork(
        run_id,
        body.step,
        message=body.message,
        model=body.model,
        memory=body.memory,
        tenant_id=tenant,
        priority=body.priority,
        idempotency_key=idempotency_key,
        webhook=body.webhook,
    )
    started(response, new_id)
    return {"run_id": new_id, "parent_run_id": run_id, "fork_step": body.step}


@router.post("/runs/{run_id}/rerun", status_code=201, responses=REPEATED | errors.documented(400, 404, 409))
async def rerun(
    run_id: str, body: Rerun, api: Api, tenant: Tenant, response: Response, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Run it again with another model, agent or instructions, tools answered from the record; a new run."""
    new_id = await api.wp.rerun(
        run_id,
        from_step=body.from_step,
        model=body.model,
        agent=body.agent,
        tools=body.tools,
        instructions=body.instructions,
        memory=body.memory,
        tenant_id=tenant,
        rerun_children=body.rerun_children,
        priority=body.priority,
        idempotency_key=idempotency_key,
        webhook=body.webhook,
    )
    started(response, new_id)
    return {"run_id": new_id, "parent_run_id": run_id, "from_step": body.from_step}


@router.get("/runs/{run_id}/replay", responses=errors.documented(400, 404, 409))
async def replay(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Replay every Temporal execution of the run against the current workflow code."""
    outcomes = await api.wp.replay(run_id, tenant_id=tenant)
    return {"run_id": run_id, "ok": all(o.error is None for o in outcomes), "executions": as_json(outcomes)}


@router.get("/runs/{run_id}/verify", responses=errors.documented(400, 404, 409))
async def verify(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Recompute the event hash chains and checkpoint hashes of the run and of every sub-agent run below
    it (`below`), and check each sub-agent answer in a caller's ledger; `ok` covers the whole tree."""
    data: dict[str, Any] = as_json(await api.wp.verify(run_id, tenant_id=tenant))
    return data


class MirrorViolation(BaseModel):
    run_id: str
    what: str = Field(description="What does not hold, e.g. `step 3: its model call completed in Temporal, ...`.")
    line: str = Field(description="`run <id>: <what>`, as `waypoint verify --all` prints it.")


class MirrorReport(BaseModel):
    """What `GET /v1/verify` found (`waypoint verify --all`)."""

    ok: bool = Field(description="No violation.")
    since: datetime | None = Field(description="Runs created at or after this were checked (null: every run).")
    runs: int = Field(description="How many runs were checked.")
    violations: list[MirrorViolation] = Field(description="In run order (oldest first), then as found.")
    without_history: list[str] = Field(
        description="Finished runs whose workflow Temporal no longer has (retention): their mirror was checked "
        "alone (chain, checkpoints, ledger), not against a history. Not violations."
    )
    truncated: bool = Field(description="More runs matched than `limit`: the oldest `runs` were checked.")
    seconds: float


@router.get("/verify", response_model=MirrorReport, responses=errors.documented(400))
async def verify_all(
    api: Api,
    tenant: Tenant,
    since: Annotated[
        str | None, Query(description="Runs created at or after: an age (`2h`, `7d`) or an ISO time; all without.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="At most this many runs, oldest first.")] = 1_000,
) -> dict[str, Any]:
    """Check every run of the tenant against Temporal (`waypoint verify --all`): each completed model and tool
    activity of its history has its event, its hash chain and checkpoints hold, its status matches its
    workflow's, and no tool effect is recorded twice."""
    from waypoint.gateway.invariants import report_json

    return report_json(await api.wp.verify_all(since or None, limit=limit, tenant_id=tenant))


@router.delete("/runs/{run_id}", status_code=204, responses=errors.documented(400, 404, 409))
async def delete(run_id: str, api: Api, tenant: Tenant) -> Response:
    """Remove a finished run and everything it wrote (the retention path)."""
    await api.wp.delete(run_id, tenant_id=tenant)
    return Response(status_code=204)


@router.get("/runs/{run_id}/trace", responses=errors.documented(400, 404, 409))
async def trace(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The run's trace id, and a link when WAYPOINT_TRACE_UI_URL is set."""
    trace_id = await api.wp.trace_id(run_id, tenant_id=tenant)
    template = api.settings.trace_ui_url
    return {
        "run_id": run_id,
        "trace_id": trace_id,
        "url": template.format(trace_id=trace_id) if template and trace_id else None,
    }


@router.get("/runs/{run_id}/compactions", responses=errors.documented(400, 404, 409))
async def compactions(
    run_id: str, api: Api, tenant: Tenant, limit: Annotated[int, Query(ge=1, le=500)] = 20
) -> dict[str, Any]:
    """The run's compactions, newest first."""
    await api.wp.run(run_id, tenant_id=tenant)
    rows = await api.wp.compactions(run_id, tenant_id=tenant, limit=limit)
    return {"run_id": run_id, "compactions": as_json(rows)}


@router.post("/runs/{run_id}/compact", responses=errors.documented(400, 404, 409))
async def compact(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Compact the run now and wait for the pass."""
    data: dict[str, Any] = as_json(await api.wp.compact(run_id, tenant_id=tenant))
    return data


@router.get("/compactions")
async def all_compactions(api: Api, tenant: Tenant, limit: Annotated[int, Query(ge=1, le=500)] = 20) -> dict[str, Any]:
    """The tenant's compactions, newest first."""
    return {"compactions": as_json(await api.wp.compactions(tenant_id=tenant, limit=limit))}


@router.post("/compact")
async def compact_all(api: Api, tenant: Tenant) -> dict[str, Any]:
    """A compaction pass now over the tenant's runs past the threshold; answers what it did."""
    data: dict[str, Any] = as_json(await api.wp.compact(tenant_id=tenant))
    return data


# --- messages to a running run ------------------------------------------------------------------


@router.post("/runs/{run_id}/pause", responses=errors.documented(400, 404, 409))
async def pause(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Pause before the next step. Answers the run's live state; 409 with the reason if refused."""
    return json_of(await api.wp.pause(run_id, tenant_id=tenant))


@router.post("/runs/{run_id}/resume", responses=errors.documented(400, 404, 409))
async def resume(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    return json_of(await api.wp.resume(run_id, tenant_id=tenant))


@router.post("/runs/{run_id}/cancel", responses=errors.documented(400, 404, 409))
async def cancel(run_id: str, api: Api, tenant: Tenant, body: Reason | None = None) -> dict[str, Any]:
    """End the run and its sub-agent runs (status `cancelled`): no call starts after it, tools in flight finish."""
    return json_of(await api.wp.cancel(run_id, body.reason if body else None, tenant_id=tenant))


@router.post("/runs/{run_id}/send", responses=errors.documented(400, 404, 409))
async def send(run_id: str, body: Text, api: Api, tenant: Tenant) -> dict[str, Any]:
    """A user message the run's next model call reads."""
    return json_of(await api.wp.send(run_id, body.text, tenant_id=tenant))


@router.post("/runs/{run_id}/approve", responses=errors.documented(400, 404, 409))
async def approve(run_id: str, api: Api, tenant: Tenant, body: Decide | None = None) -> dict[str, Any]:
    """Let a tool call that waits for approval run."""
    body = body or Decide.model_validate({})
    approved = await api.wp.approve(
        run_id, body.call_id, body.reason, edited_input=body.edited_input, answer=body.answer, tenant_id=tenant
    )
    return json_of(approved)


@router.post("/runs/{run_id}/deny", responses=errors.documented(400, 404, 409))
async def deny(run_id: str, api: Api, tenant: Tenant, body: Decide | None = None) -> dict[str, Any]:
    """Refuse a waiting tool call; the model reads the reason."""
    body = body or Decide.model_validate({})
    return json_of(await api.wp.deny(run_id, body.call_id, body.reason, tenant_id=tenant))
