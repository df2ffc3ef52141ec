"""A run's waterfall over HTTP: what the viewer's run page draws, for any client to draw too.

    GET /v1/runs/{id}/timeline?after_step=N   the steps after N, each with its bars and numbers

Times are milliseconds from the run's start (`started_at`); a live run's step in flight comes
last, `in_flight`, with the bars it has so far (its open waits end at the server's now). A bar's
fields that are empty (null, 0, false, "") are left out: their defaults below.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.waterfall import BarKind, waterfall_json

router = APIRouter(prefix="/v1", tags=["runs"], responses=errors.KEYED)


class TimelineBar(BaseModel):
    kind: BarKind = Field(
        description="model (the attempt that answered), failed_attempt, retry_wait, tool, approval, capacity, "
        "compaction, subagent"
    )
    start_ms: int = Field(description="From the run's start.")
    end_ms: int
    lane: int = Field(0, description="0: the model's; a tool call's (its approval's, its sub-agent's): its call index.")
    label: str = ""
    attempt: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = Field(None, description="A failed attempt's error; a tool call's outcome when not ok.")
    child_run_id: str | None = Field(None, description="subagent: the run the call started.")
    open: bool = Field(False, description="Still going: it ends at the server's now for now.")


class TimelineStep(BaseModel):
    step: int
    start_ms: int
    end_ms: int
    in_flight: bool = Field(False, description="The step a live run is in (no checkpoint yet).")
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = Field(0, description="Of the input, what the provider's prompt cache served.")
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    cumulative_cost_usd: float = Field(0.0, description="The run's own steps up to this one.")
    context_tokens: int = Field(0, description="The context the model received (its input tokens).")
    model_ms: int = Field(0, description="The answering attempt's latency.")
    attempts: int = Field(0, description="Model attempts, failed ones included.")
    compacted: bool = Field(False, description="A compaction finished during this step.")
    bars: list[TimelineBar]


class Timeline(BaseModel):
    run_id: str
    agent: str = Field("", description="The run's agent (a sub-agent run's rows are labelled with it).")
    status: str
    started_at: datetime
    ended_at: datetime | None = None
    duration_ms: int = Field(description="To the run's end, or to now while it runs.")
    context_budget: int | None = Field(None, description="The run's context budget in tokens (its plan).")
    compact_threshold: int | None = Field(None, description="Input tokens past which the run compacts inline.")
    steps: list[TimelineStep]


@router.get("/runs/{run_id}/timeline", response_model=Timeline, responses=errors.documented(400, 404, 409))
async def timeline(
    run_id: str,
    api: Api,
    tenant: Tenant,
    after_step: Annotated[int, Query(ge=0, description="Only the steps after this one (what a live page lacks).")] = 0,
) -> Any:
    """The run's waterfall: one entry per step with bars for its model call (failed attempts and the
    waits between them), tool calls (parallel ones in lanes side by side), approval and capacity waits,
    compactions and sub-agent runs, and its tokens, cost, cost so far, context size and model latency."""
    # Sent as built (the model above documents it): validating ~6,000 bars again would double the time.
    return JSONResponse(waterfall_json(await api.wp.waterfall(run_id, tenant_id=tenant, after_step=after_step)))
