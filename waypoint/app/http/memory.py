"""Long-term (episodic) memory, through the memory worker: /v1/memory and a run's memories."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.client import as_json

router = APIRouter(prefix="/v1", tags=["memory"], responses=errors.KEYED)


@router.get("/memory/search", responses=errors.documented(400))
async def search(
    api: Api,
    tenant: Tenant,
    q: Annotated[str, Query(description="What to look for.")],
    k: Annotated[int, Query(ge=1, le=100)] = 5,
    agent: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The tenant's episodes most relevant to `q`, re-ranked by recency and importance."""
    hits = await api.wp.memory_search(q, k=k, agent=agent, run_id=run_id, tenant_id=tenant)
    return {"memories": as_json(hits)}


@router.get("/runs/{run_id}/memories", responses=errors.documented(400, 404, 409))
async def show(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Every episode a run left in long-term memory."""
    return {"run_id": run_id, "memories": as_json(await api.wp.memory_show(run_id, tenant_id=tenant))}


@router.delete("/runs/{run_id}/memories", responses=errors.documented(400, 404, 409))
async def forget(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Delete a run's episodes (the event log keeps the run)."""
    return {"run_id": run_id, "deleted": await api.wp.memory_forget(run_id, tenant_id=tenant)}
