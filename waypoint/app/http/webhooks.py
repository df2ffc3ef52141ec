"""Webhooks: the tenant's signing secret (/v1/webhooks/secret), its deliveries (the dead-letter list
among them, /v1/webhooks/deliveries), redelivery, and a run's deliveries and attempts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.checks import NAME_MAX
from waypoint.client import as_json, delivery_summary
from waypoint.store.webhooks import DELIVERIES_MAX

router = APIRouter(prefix="/v1", tags=["webhooks"], responses=errors.KEYED)


@router.get("/webhooks/secret")
async def secret(api: Api, tenant: Tenant) -> dict[str, Any]:
    """The tenant's webhook signing secret (made on first use)."""
    return (await api.wp.webhook_secret(tenant_id=tenant)).to_json()


@router.post("/webhooks/secret/rotate")
async def rotate(api: Api, tenant: Tenant) -> dict[str, Any]:
    """Replace the tenant's signing secret; posts signed from now on use the new one."""
    return (await api.wp.webhook_secret(rotate=True, tenant_id=tenant)).to_json()


@router.get("/webhooks/deliveries", responses=errors.documented(400))
async def deliveries(
    api: Api,
    tenant: Tenant,
    failed: Annotated[
        bool, Query(description="Only the dead-letter list: deliveries given up (window over, or refused).")
    ] = False,
    run_id: Annotated[str | None, Query(max_length=NAME_MAX, description="Only this run's deliveries.")] = None,
    limit: Annotated[int, Query(ge=1, le=DELIVERIES_MAX)] = 50,
) -> dict[str, Any]:
    """The tenant's webhook deliveries, newest first: status (pending, delivered, failed), attempts, the
    last answer, when the next attempt is due (`next_attempt_at`) and when the retry window ends."""
    rows = await api.wp.webhooks.list(failed=failed, run_id=run_id, limit=limit, tenant_id=tenant)
    return {"deliveries": as_json(rows)}


@router.get("/webhooks/deliveries/{delivery_id}", responses=errors.documented(400, 404))
async def delivery(delivery_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """One delivery and every attempt of it, oldest first."""
    found = await api.wp.webhooks.get(delivery_id, tenant_id=tenant)
    attempts = await api.wp.webhooks.attempts(delivery_id, tenant_id=tenant)
    return {"delivery": as_json(found), "attempts": [a.to_json() for a in attempts]}


@router.post(
    "/webhooks/deliveries/{delivery_id}/redeliver", status_code=201, responses=errors.documented(400, 404, 409)
)
async def redeliver(delivery_id: str, api: Api, tenant: Tenant, response: Response) -> dict[str, Any]:
    """Send a delivered or failed delivery again: a new delivery of the same body to the same URL,
    retried as any (409 while the delivery is still pending)."""
    again = await api.wp.webhooks.redeliver(delivery_id, tenant_id=tenant)
    response.headers["Location"] = f"/v1/webhooks/deliveries/{again.delivery_id}"
    return {"delivery": as_json(again)}


@router.get("/runs/{run_id}/webhook", responses=errors.documented(400, 404, 409))
async def attempts(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The run's webhook, its deliveries (newest first) and every attempt to post it, oldest first."""
    row = await api.wp.run(run_id, tenant_id=tenant)
    found = await api.wp.webhook_attempts(run_id, tenant_id=tenant)
    sent = await api.wp.webhooks.list(run_id=run_id, tenant_id=tenant) if row.webhook else []
    return {
        "run_id": run_id,
        "webhook": row.webhook,
        "delivered": any(a.delivered for a in found),
        "summary": delivery_summary(found, sent) if row.webhook else None,
        "deliveries": as_json(sent),
        "attempts": [a.to_json() for a in found],
    }
