"""`wp.webhooks`: webhook deliveries, tenant-scoped, for every surface (CLI `waypoint webhooks`,
HTTP `/v1/webhooks/deliveries`, the viewer's Webhooks page, MCP).

    pending = await wp.webhooks.list()                  # newest first
    dead = await wp.webhooks.list(failed=True)          # the dead-letter list
    again = await wp.webhooks.redeliver(dead[0].delivery_id)

A delivery is one event (a run's end) to one URL, retried by a workflow of its own until delivered
or its retry window ends (`webhook_retry_window_seconds`, default 24 h); then it is `failed`, on the
dead-letter list. A redelivery is a new delivery of the same body, with its own id (in the body's
`delivery_id` and the `Waypoint-Delivery` header) and `redelivery_of` naming the one it sends again.
"""

from __future__ import annotations

import builtins
import json
import uuid

from waypoint.access import Action, Target, TargetKind
from waypoint.checks import check_count, check_name, check_webhook
from waypoint.client._scope import Scope, TemporalLink
from waypoint.client._views import delivery_summary
from waypoint.errors import Conflict
from waypoint.names import DeliveryStatus
from waypoint.store.webhooks import DELIVERIES_MAX, DELIVERY_PREFIX, WebhookAttempt, WebhookDelivery, WebhookSecret
from waypoint.store.webhooks import Webhooks as WebhookStore
from waypoint.types import WebhookDeliveryInput


def new_delivery_id() -> str:
    return f"{DELIVERY_PREFIX}{uuid.uuid4().hex}"


def redelivered_body(body: str, delivery_id: str, original: str) -> str:
    """The body a redelivery posts: the original's, with its own delivery id and the original's named."""
    data = json.loads(body)
    if isinstance(data, dict):
        data["delivery_id"] = delivery_id
        data["redelivery_of"] = original
    return json.dumps(data, separators=(",", ":"))


class Webhooks:
    def __init__(self, store: WebhookStore, temporal: TemporalLink, scope: Scope):
        self._store = store
        self._temporal = temporal
        self._scope = scope

    def _tenant(self, tenant_id: str | None, delivery_id: str | None = None) -> str:
        check_name("the delivery id", delivery_id)
        return self._scope.tenant(tenant_id)

    def check_url(self, url: str | None) -> str | None:
        """A run's webhook URL as the settings allow it (`checks.check_webhook`), or InvalidInput."""
        return check_webhook(url, allow_private=self._scope.settings.webhook_allow_private)

    async def secret(self, *, rotate: bool = False, tenant_id: str | None = None) -> WebhookSecret:
        """The tenant's webhook signing secret, made on first use; `rotate=True` replaces it (posts
        signed from then on use the new one: give it to the receivers, which may accept both a while).
        An admin's, read or rotated: whoever holds it can sign a delivery a receiver believes."""
        secret = Target(TargetKind.SETTING, "webhook_secret")
        async with self._scope.act(Action.POLICY_WRITE, tenant_id, secret) as tenant:
            return await self._store.webhook_secret(tenant, rotate=rotate)

    async def run_attempts(self, run_id: str, *, tenant_id: str | None = None) -> builtins.list[WebhookAttempt]:
        """Every attempt to post the run to its webhook, oldest first (empty: none yet, or no webhook);
        its deliveries (and redeliveries) are `wp.webhooks.list(run_id=...)`."""
        return await self._store.webhook_attempts(self._scope.scoped(tenant_id, run_id), run_id)

    async def summary(self, run_id: str, *, tenant_id: str | None = None) -> str:
        """One line on how the run's webhook fared: its newest delivery (delivered, pending and when
        next, or failed), or for runs from before deliveries its attempts."""
        tenant = self._scope.scoped(tenant_id, run_id)
        deliveries = await self._store.webhook_deliveries(tenant, run_id=run_id, limit=1)
        attempts = [] if deliveries else await self._store.webhook_attempts(tenant, run_id)
        return delivery_summary(attempts, deliveries)

    async def list(
        self, *, failed: bool = False, run_id: str | None = None, limit: int = 50, tenant_id: str | None = None
    ) -> builtins.list[WebhookDelivery]:
        """The tenant's deliveries, newest first: all of them, or (`failed`) the dead-letter list, or a run's."""
        check_count("limit", limit, high=DELIVERIES_MAX)
        check_name("the run id", run_id)
        return await self._store.webhook_deliveries(self._tenant(tenant_id), failed=failed, run_id=run_id, limit=limit)

    async def get(self, delivery_id: str, *, tenant_id: str | None = None) -> WebhookDelivery:
        """One delivery; NotFound for one the tenant does not have."""
        return await self._store.webhook_delivery(self._tenant(tenant_id, delivery_id), delivery_id)

    async def attempts(self, delivery_id: str, *, tenant_id: str | None = None) -> builtins.list[WebhookAttempt]:
        """A delivery's attempts, oldest first."""
        return await self._store.delivery_attempts(self._tenant(tenant_id, delivery_id), delivery_id)

    async def redeliver(self, delivery_id: str, *, tenant_id: str | None = None) -> WebhookDelivery:
        """Send a delivered or failed delivery again: a new delivery (a workflow of its own, retried as
        any) of the same body to the same URL. Conflict while the delivery is still pending."""
        target = Target(TargetKind.SETTING, f"webhook:{delivery_id}")
        async with self._scope.act(Action.POLICY_WRITE, tenant_id, target) as tenant_id:
            tenant = self._tenant(tenant_id, delivery_id)
            original, body = await self._store.delivery_body(tenant, delivery_id)
            if original.status == DeliveryStatus.PENDING:
                at = original.next_attempt_at
                due = f" (next attempt at {at:%Y-%m-%d %H:%M:%S} UTC)" if at else ""
                raise Conflict(
                    f"webhook delivery {delivery_id} is still being retried{due}: redeliver it once it is delivered "
                    "or failed (`waypoint webhooks list --failed`)"
                )
            again = new_delivery_id()
            row = await self._store.create_delivery(
                tenant,
                delivery_id=again,
                run_id=original.run_id,
                event=original.event,
                url=original.url,
                body=redelivered_body(body, again, delivery_id),
                redelivery_of=delivery_id,
            )
            try:
                gateway = await self._temporal()
                await gateway.start_delivery(WebhookDeliveryInput(again, tenant, original.run_id, original.event))
            except BaseException:
                await self._store.forget_delivery(tenant, again)  # no workflow took it up: no row waits forever
                raise
            return row


__all__ = ["Webhooks", "new_delivery_id", "redelivered_body"]
