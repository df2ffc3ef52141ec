"""The viewer's webhook deliveries: the tenant's deliveries, newest first (or only the failed ones,
the dead-letter list, or one run's), each with its attempts, its last answer and when its next
attempt is due, and a redeliver form on each delivered or failed one. The form goes back to the
page it was posted from, with the new delivery's id or why it was refused."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from waypoint.app.http.ui.render import Api, Tenant, answers_errors, own_form, render, templates
from waypoint.checks import NAME_MAX
from waypoint.client import delivery_line
from waypoint.errors import WaypointError
from waypoint.names import DeliveryStatus
from waypoint.webhooks import shown_url

LISTED = 200  # deliveries on the page (newest first)

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])
templates.env.filters["delivery_line"] = delivery_line
templates.env.filters["shown_url"] = shown_url


@router.get("/webhooks")
async def webhooks_page(
    request: Request,
    api: Api,
    tenant: Tenant,
    failed: Annotated[bool, Query()] = False,
    run_id: Annotated[str | None, Query(max_length=NAME_MAX)] = None,
) -> Response:
    rows = await api.wp.webhooks.list(failed=failed, run_id=run_id or None, limit=LISTED, tenant_id=tenant)
    return render(
        request,
        "webhooks.html",
        deliveries=rows,
        tenant=tenant,
        failed=failed,
        run_id=run_id or "",
        pending=DeliveryStatus.PENDING,
    )


@router.get("/webhooks/{delivery_id}")
async def delivery_page(request: Request, delivery_id: str, api: Api, tenant: Tenant) -> Response:
    found = await api.wp.webhooks.get(delivery_id, tenant_id=tenant)
    attempts = await api.wp.webhooks.attempts(delivery_id, tenant_id=tenant)
    return render(request, "webhook.html", d=found, attempts=attempts, pending=DeliveryStatus.PENDING)


Back = Annotated[str, Form()]  # "failed": back to the dead-letter list; else every delivery


def back_to(back: str, **query: str) -> RedirectResponse:
    shown = {"failed": "true"} if back == "failed" else {}
    return RedirectResponse(f"/ui/webhooks?{urlencode({**shown, **query})}", 303)


def as_refusal(params: dict[str, Any], exc: WaypointError) -> Response:
    return back_to(params.get("back", ""), refusal=str(exc))


@router.post("/webhooks/{delivery_id}/redeliver")
@answers_errors(as_refusal)
async def redeliver(delivery_id: str, api: Api, tenant: Tenant, back: Back = "") -> Response:
    again = await api.wp.webhooks.redeliver(delivery_id, tenant_id=tenant)
    return back_to(back, notice=f"redelivering {delivery_id} as {again.delivery_id}: reload to see how it fares")


__all__ = ["router"]
