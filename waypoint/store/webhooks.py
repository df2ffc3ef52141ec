"""Webhooks: each tenant's signing secret (made on first use, rotated on request) and every
delivery attempt, tenant-scoped.

A secret is `whsec_` plus 32 random bytes (URL-safe base64). Unlike an API key it is stored as
it is: the worker needs it to sign, and the tenant may show it again to configure a receiver.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert

from waypoint.store.base import StoreBase
from waypoint.store.rows import WebhookAttempt, WebhookSecret
from waypoint.store.schema import webhook_attempts, webhook_secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


class Webhooks(StoreBase):
    async def webhook_secret(self, tenant_id: str, *, rotate: bool = False) -> WebhookSecret:
        """The tenant's signing secret, made on first use; `rotate` replaces it with a new one
        (deliveries signed from then on use the new one)."""
        statement = insert(webhook_secrets).values(tenant_id=tenant_id, secret=new_secret())
        if rotate:
            statement = statement.on_conflict_do_update(
                index_elements=["tenant_id"],
                set_={"secret": statement.excluded.secret, "created_at": statement.excluded.created_at},
            )
        else:
            statement = statement.on_conflict_do_nothing(index_elements=["tenant_id"])
        async with self.engine.begin() as conn:
            await conn.execute(statement)
            row = (
                await conn.execute(
                    select(webhook_secrets.c.secret, webhook_secrets.c.created_at).where(
                        webhook_secrets.c.tenant_id == tenant_id
                    )
                )
            ).one()
        return WebhookSecret(secret=row.secret, created_at=row.created_at)

    async def record_webhook_attempt(
        self,
        tenant_id: str,
        run_id: str,
        *,
        attempt: int,
        url: str,
        status_code: int | None,
        error: str | None,
        duration_ms: int,
        delivered: bool,
    ) -> None:
        """Log one delivery attempt (a retried activity logs each of its attempts)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                webhook_attempts.insert().values(
                    run_id=run_id,
                    tenant_id=tenant_id,
                    attempt=attempt,
                    url=url,
                    status_code=status_code,
                    error=error,
                    duration_ms=duration_ms,
                    delivered=delivered,
                )
            )

    async def webhook_attempts(self, tenant_id: str, run_id: str) -> list[WebhookAttempt]:
        """The run's delivery attempts, oldest first; NotFound for a run the tenant does not have."""
        columns = [webhook_attempts.c[name] for name in WebhookAttempt.__dataclass_fields__]
        query = (
            select(*columns)
            .where(webhook_attempts.c.tenant_id == tenant_id, webhook_attempts.c.run_id == run_id)
            .order_by(webhook_attempts.c.id)
        )
        async with self.engine.connect() as conn:
            await self._run(conn, tenant_id, run_id)
            rows = (await conn.execute(query)).mappings().all()
        return [WebhookAttempt.of(r) for r in rows]


def delivery_summary(attempts: list[WebhookAttempt]) -> str:
    """One line on how a run's webhook fared: "delivered after 3 attempts (HTTP 200)"."""
    if not attempts:
        return "not posted yet"
    last = attempts[-1]
    count = f"{len(attempts)} attempt{'s' if len(attempts) != 1 else ''}"
    if any(a.delivered for a in attempts):
        return f"delivered after {count} (HTTP {last.status_code})"
    return f"not delivered after {count}; last: {last.error}"


__all__ = ["SECRET_PREFIX", "Webhooks", "delivery_summary", "new_secret"]
