"""The caller's tenant's audit log, for its admins:

GET /v1/audit?since=24h&actor=key:3&action=run.cancel&limit=50&cursor=N   newest first
GET /v1/audit/verify                                                    the hash chain recomputed
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.checks import BIGINT_MAX, NAME_MAX
from waypoint.client import as_json
from waypoint.store.audit import AUDIT_LIMIT_MAX

router = APIRouter(prefix="/v1", tags=["audit"], responses=errors.KEYED)


class AuditEntryOut(BaseModel):
    """One audited action."""

    seq: int = Field(description="1, 2, 3... per tenant.")
    at: datetime
    actor: str = Field(description="key:<id>, user:<subject> or local: never a secret.")
    role: str = Field(description="The actor's role when it acted: viewer, operator or admin.")
    surface: str = Field(description="Where it came from: python, cli, http, protocol, viewer, mcp, schedule.")
    address: str | None = Field(description="The client's network address, when the surface knew it.")
    action: str = Field(description="What was done, e.g. run.approve, run.cancel, schedule.write.")
    target_kind: str | None = Field(description="run, thread, schedule, key, setting, assistant or eval.")
    target_id: str | None
    outcome: str = Field(description="ok, refused (the role or tenant does not allow it) or failed.")
    detail: dict[str, Any] | None = Field(description="The refusal's or failure's message.")
    prev_hash: str | None
    hash: str = Field(description="sha256 of prev_hash and the entry's canonical JSON.")


class AuditPageOut(BaseModel):
    """Entries of the tenant's audit log, newest first."""

    entries: list[AuditEntryOut]
    next_cursor: int | None = Field(description="Pass as `cursor` for the older entries; null: there are none.")


class AuditVerdictOut(BaseModel):
    """The tenant's audit chain, recomputed."""

    tenant_id: str
    ok: bool
    entries: int = Field(description="Entries read (up to the first broken one).")
    broken_seq: int | None = Field(description="The first entry changed, removed or not chained to the one before.")
    problem: str | None


@router.get("/audit", responses=errors.documented(400))
async def audit(
    api: Api,
    tenant: Tenant,
    since: Annotated[str | None, Query(max_length=64, description="An age (24h, 7d) or an ISO date or time.")] = None,
    actor: Annotated[str | None, Query(max_length=NAME_MAX, description="key:<id>, user:<subject> or local.")] = None,
    action: Annotated[str | None, Query(max_length=64, description="e.g. run.cancel.")] = None,
    limit: Annotated[int, Query(ge=1, le=AUDIT_LIMIT_MAX)] = 100,
    cursor: Annotated[int | None, Query(ge=1, le=BIGINT_MAX, description="`next_cursor` of the page before.")] = None,
) -> AuditPageOut:
    """The tenant's audit log, newest first: who (an API key's id, a user's subject) did what, on
    which run, thread, schedule or setting, from which surface and address, and how it ended.
    Needs the admin role."""
    page = await api.wp.audit.entries(
        since=since, actor=actor, action=action, limit=limit, cursor=cursor, tenant_id=tenant
    )
    return AuditPageOut.model_validate({"entries": as_json(page.entries), "next_cursor": page.next_cursor})


@router.get("/audit/verify")
async def verify(api: Api, tenant: Tenant) -> AuditVerdictOut:
    """Recompute the tenant's audit hash chain: `ok`, or the first entry that was changed or removed."""
    return AuditVerdictOut.model_validate(as_json(await api.wp.audit.verify(tenant_id=tenant)))
