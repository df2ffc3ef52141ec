"""Agent Protocol store endpoints, where episodic memory fits them: search.

Items live under the namespace `["memories", <agent>, <run_id>]`; their key is
`<run_id>:<step>:<kind>` and their value the episode (text, kind, step, importance); `created_at` is
when it was first stored, `updated_at` when last (a near-duplicate learned again). Writing
and deleting single items is not supported: episodes are written by runs (`memory_save`,
`pin_decision`), and a run's are forgotten with `DELETE /v1/runs/{id}/memories`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.problems import not_supported
from waypoint.errors import InvalidInput

router = APIRouter(tags=["agent protocol: store"])
ROOT = "memories"


class Search(BaseModel):
    model_config = ConfigDict(extra="ignore")
    namespace_prefix: list[str] = Field(default_factory=list)
    query: str | None = None
    limit: int = Field(10, ge=1, le=100)
    offset: int = Field(0, ge=0)


def stamp(epoch: float) -> str:
    """An episode's time as the spec's Item has it (an ISO 8601 date-time)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat()


@router.post("/store/items/search")
async def search(body: Search, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The tenant's episodes most relevant to `query` (namespace `["memories", agent?, run_id?]`)."""
    prefix = body.namespace_prefix
    if prefix and prefix[0] != ROOT:
        return {"items": []}
    if not body.query or not body.query.strip():
        raise InvalidInput("episodic memory is searched by meaning: pass a query")
    agent = prefix[1] if len(prefix) > 1 else None
    run_id = prefix[2] if len(prefix) > 2 else None
    hits = await api.wp.memory_search(
        body.query, k=body.offset + body.limit, agent=agent, run_id=run_id, tenant_id=tenant
    )
    items = [
        {
            "namespace": [ROOT, agent or "", m.run_id] if agent else [ROOT, m.run_id],
            "key": f"{m.run_id}:{m.step}:{m.kind}",
            "value": {"text": m.text, "kind": m.kind, "run_id": m.run_id, "step": m.step, "importance": m.importance},
            "created_at": stamp(m.stored_at),
            "updated_at": stamp(m.updated_at or m.stored_at),
            "score": m.score,
        }
        for m in hits[body.offset :]
    ]
    return {"items": items}


@router.put("/store/items")
@router.get("/store/items")
@router.delete("/store/items")
@router.post("/store/namespaces")
async def unsupported(api: Api, tenant: Tenant) -> None:
    raise not_supported(
        "the store is Waypoint's episodic memory: search it with POST /store/items/search; runs write "
        "episodes, and DELETE /v1/runs/{id}/memories forgets a run's"
    )
