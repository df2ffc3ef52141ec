"""The viewer's audit log: the tenant's entries, newest first (who, role, surface and address, what,
on which run or setting, how it ended), filtered by actor, action and age, a page at a time; and
(asked with ?verify=true, as it reads the whole log) whether its hash chain holds. For admins, as
/v1/audit: another role gets the 403 page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from waypoint.app.http.ui.render import Api, Tenant, render
from waypoint.checks import BIGINT_MAX, NAME_MAX

LISTED = 100  # entries on a page

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("/audit")
async def audit_page(
    request: Request,
    api: Api,
    tenant: Tenant,
    actor: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[int | None, Query(ge=1, le=BIGINT_MAX)] = None,
    verify: Annotated[bool, Query()] = False,
) -> Response:
    page = await api.wp.audit.entries(
        since=since or None, actor=actor or None, action=action or None, limit=LISTED, cursor=cursor, tenant_id=tenant
    )
    verdict = await api.wp.audit.verify(tenant_id=tenant) if verify else None  # reads the whole log: when asked
    return render(
        request,
        "audit.html",
        tenant=tenant,
        entries=page.entries,
        next_cursor=page.next_cursor,
        verdict=verdict,
        actor=actor or "",
        action=action or "",
        since=since or "",
    )


__all__ = ["router"]
