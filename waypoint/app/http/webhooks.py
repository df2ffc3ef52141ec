"""Webhooks: the tenant's signing secret (/v1/webhooks/secret) and a run's delivery attempts."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from waypoint.app.http import errors
from waypoint.app.http.auth import Api, Tenant
from waypoint.store.webhooks import delivery_summary

router = APIRouter(prefix="/v1", tags=["webhooks"], responses=errors.KEYED)


@router.get("/webhooks/secret")
async def secret(api: Api, tenant: Tenant) -> dict[str, Any]:
    """The tenant's webhook signing secret (made on first use)."""
    return (await api.wp.webhook_secret(tenant_id=tenant)).to_json()


@router.post("/webhooks/secret/rotate")
async def rotate(api: Api, tenant: Tenant) -> dict[str, Any]:
    """Replace the tenant's signing secret; posts signed from now on use the new one."""
    return (await api.wp.webhook_secret(rotate=True, tenant_id=tenant)).to_json()


@router.get("/runs/{run_id}/webhook", responses=errors.documented(400, 404, 409))
async def attempts(run_id: str, api: Api, tenant: Tenant) -> dict[str, Any]:
    """The run's webhook and every attempt to post it, oldest first."""
    row = await api.wp.run(run_id, tenant_id=tenant)
    found = await api.wp.webhook_attempts(run_id, tenant_id=tenant)
    return {
        "run_id": run_id,
        "webhook": row.webhook,
        "delivered": any(a.delivered for a in found),
        "summary": delivery_summary(found) if row.webhook else None,
        "attempts": [a.to_json() for a in found],
    }
