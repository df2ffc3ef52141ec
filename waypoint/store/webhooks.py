"""Webhooks: each tenant's signing secret (made on first use, rotated on request), every delivery
(one event to one URL, retried by its own workflow until delivered or its retry window ends; the
failed ones are the dead-letter list) and every attempt, tenant-scoped.

A secret is `whsec_` plus 32 random bytes (URL-safe base64). Unlike an API key it is stored as
it is: the worker needs it to sign, and the tenant may show it again to configure a receiver.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, case, delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert

from waypoint.errors import NotFound
from waypoint.names import DeliveryStatus
from waypoint.store.base import StoreBase
from waypoint.store.rows import row_of
from waypoint.store.schema import webhook_attempts, webhook_deliveries, webhook_secrets

SECRET_PREFIX = "whsec_"
DELIVERY_PREFIX = "whd_"
DELIVERIES_MAX = 1000  # deliveries one listing returns at most
_PENDING, _DELIVERED, _FAILED = (literal(str(s)) for s in DeliveryStatus)


@dataclass(frozen=True)
class WebhookAttempt:
    """One attempt to post a finished run to its webhook (`webhook_attempts`)."""

    run_id: str
    attempt: int  # Temporal's attempt number, from 1
    url: str
    at: datetime
    status_code: int | None = None  # the receiver's answer; None when there was none
    error: str | None = None  # why it was not delivered
    duration_ms: int = 0
    delivered: bool = False
    delivery_id: str | None = None  # the delivery it was an attempt of (none for runs from before 0021)

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> WebhookAttempt:
        return row_of(cls, row)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "at": self.at.isoformat()}


@dataclass(frozen=True)
class WebhookDelivery:
    """One webhook delivery (`webhook_deliveries`): an event to a URL, retried until delivered or
    its window ends; `failed` ones are the dead-letter list (`DeliveryStatus`)."""

    delivery_id: str
    run_id: str
    event: str
    url: str
    status: str
    attempts: int
    created_at: datetime
    updated_at: datetime
    last_status_code: int | None = None  # the last attempt's HTTP status; None when it got no answer
    last_error: str | None = None  # why the last attempt did not deliver (or why it was given up)
    next_attempt_at: datetime | None = None  # while pending: when the next attempt is due
    window_ends_at: datetime | None = None  # no attempt after this (set once its workflow opened it)
    redelivery_of: str | None = None  # the delivery this one sends again
    ended_at: datetime | None = None  # when it was delivered or given up

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> WebhookDelivery:
        return row_of(cls, row)


def delivery_not_found(delivery_id: str) -> NotFound:
    return NotFound(f"no webhook delivery {delivery_id!r}: list them with `waypoint webhooks list`")


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


_DELIVERY_COLUMNS = [webhook_deliveries.c[name] for name in WebhookDelivery.__dataclass_fields__]


@dataclass(frozen=True)
class WebhookSecret:
    """A tenant's webhook signing secret."""

    secret: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"secret": self.secret, "created_at": self.created_at.isoformat()}


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

    # --- deliveries ------------------------------------------------------------------------------

    async def create_delivery(
        self,
        tenant_id: str,
        *,
        delivery_id: str,
        run_id: str,
        event: str,
        url: str,
        body: str,
        redelivery_of: str | None = None,
    ) -> WebhookDelivery:
        """The delivery's row, made pending unless it exists (a retried activity makes it once)."""
        statement = (
            insert(webhook_deliveries)
            .values(
                delivery_id=delivery_id,
                tenant_id=tenant_id,
                run_id=run_id,
                event=event,
                url=url,
                body=body,
                redelivery_of=redelivery_of,
            )
            .on_conflict_do_nothing(index_elements=["delivery_id"])
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)
        return await self.webhook_delivery(tenant_id, delivery_id)

    async def open_delivery(self, tenant_id: str, delivery_id: str, window_seconds: float) -> tuple[str, float]:
        """Start the delivery's retry window now, unless it started already: (its status, the
        seconds left of its window); NotFound if there is no such row."""
        ends = func.coalesce(webhook_deliveries.c.window_ends_at, func.now() + timedelta(seconds=window_seconds))
        statement = (
            update(webhook_deliveries)
            .where(webhook_deliveries.c.tenant_id == tenant_id, webhook_deliveries.c.delivery_id == delivery_id)
            .values(window_ends_at=ends)
            .returning(
                webhook_deliveries.c.status,
                func.extract("epoch", webhook_deliveries.c.window_ends_at - func.now()).label("left"),
            )
        )
        async with self.engine.begin() as conn:
            row = (await conn.execute(statement)).first()
        if row is None:
            raise delivery_not_found(delivery_id)
        return str(row.status), float(row.left)

    async def webhook_delivery(self, tenant_id: str, delivery_id: str) -> WebhookDelivery:
        """One delivery of the tenant's; NotFound for one it does not have."""
        return (await self.delivery_body(tenant_id, delivery_id))[0]

    async def delivery_body(self, tenant_id: str, delivery_id: str) -> tuple[WebhookDelivery, str]:
        """A delivery and the body every attempt of it posts."""
        query = select(*_DELIVERY_COLUMNS, webhook_deliveries.c.body).where(
            webhook_deliveries.c.tenant_id == tenant_id, webhook_deliveries.c.delivery_id == delivery_id
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(query)).mappings().first()
        if row is None:
            raise delivery_not_found(delivery_id)
        return WebhookDelivery.of(row), str(row["body"])

    async def webhook_deliveries(
        self, tenant_id: str, *, failed: bool = False, run_id: str | None = None, limit: int = 50
    ) -> list[WebhookDelivery]:
        """The tenant's deliveries, newest first: every one, or only the failed ones (the dead-letter
        list), or a run's."""
        conditions = [webhook_deliveries.c.tenant_id == tenant_id]
        if failed:
            conditions.append(webhook_deliveries.c.status == _FAILED)
        if run_id is not None:
            conditions.append(webhook_deliveries.c.run_id == run_id)
        query = (
            select(*_DELIVERY_COLUMNS)
            .where(*conditions)
            .order_by(webhook_deliveries.c.created_at.desc(), webhook_deliveries.c.delivery_id.desc())
            .limit(min(limit, DELIVERIES_MAX))
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [WebhookDelivery.of(r) for r in rows]

    async def record_delivery_attempt(
        self,
        tenant_id: str,
        delivery_id: str,
        *,
        attempt: int,
        status_code: int | None,
        error: str | None,
        duration_ms: int,
        delivered: bool,
        final: bool,
        next_attempt_at: datetime | None,
    ) -> None:
        """One attempt of a delivery, in one transaction: its `webhook_attempts` row, and the delivery's
        row moved on (delivered; failed when `final`, a refusal no retry heals; else still pending,
        due again at `next_attempt_at`). A late attempt that delivers wins over a give-up."""
        d = webhook_deliveries.c
        status: Any = d.status
        if delivered:
            status = _DELIVERED
        elif final:
            status = case((d.status == _PENDING, _FAILED), else_=d.status)
        ends = delivered or final
        moving = update(webhook_deliveries).where(d.tenant_id == tenant_id, d.delivery_id == delivery_id)
        moving = moving.values(
            status=status,
            attempts=func.greatest(d.attempts, attempt),
            last_status_code=status_code,
            last_error=error,
            next_attempt_at=None
            if ends or next_attempt_at is None
            else case((d.status == _PENDING, literal(next_attempt_at, DateTime(timezone=True))), else_=None),
            updated_at=func.now(),
            ended_at=func.coalesce(d.ended_at, func.now()) if ends else d.ended_at,
        ).returning(d.run_id, d.url)
        async with self.engine.begin() as conn:
            row = (await conn.execute(moving)).first()
            if row is None:
                raise delivery_not_found(delivery_id)
            await conn.execute(
                webhook_attempts.insert().values(
                    run_id=row.run_id,
                    tenant_id=tenant_id,
                    delivery_id=delivery_id,
                    attempt=attempt,
                    url=row.url,
                    status_code=status_code,
                    error=error,
                    duration_ms=duration_ms,
                    delivered=delivered,
                )
            )

    async def close_delivery(self, tenant_id: str, delivery_id: str, reason: str) -> None:
        """Give a pending delivery up (its window ended, or it was refused): it goes on the dead-letter
        list, with `reason` as its error unless an attempt left one."""
        d = webhook_deliveries.c
        statement = (
            update(webhook_deliveries)
            .where(d.tenant_id == tenant_id, d.delivery_id == delivery_id, d.status == _PENDING)
            .values(
                status=_FAILED,
                next_attempt_at=None,
                last_error=func.coalesce(d.last_error, reason),
                updated_at=func.now(),
                ended_at=func.now(),
            )
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def forget_delivery(self, tenant_id: str, delivery_id: str) -> None:
        """Remove a delivery no workflow took up (its start failed), so no pending row waits forever."""
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(webhook_deliveries).where(
                    webhook_deliveries.c.tenant_id == tenant_id,
                    webhook_deliveries.c.delivery_id == delivery_id,
                    webhook_deliveries.c.attempts == 0,
                )
            )

    async def delivery_attempts(self, tenant_id: str, delivery_id: str) -> list[WebhookAttempt]:
        """A delivery's attempts, oldest first; NotFound for a delivery the tenant does not have."""
        await self.webhook_delivery(tenant_id, delivery_id)
        columns = [webhook_attempts.c[name] for name in WebhookAttempt.__dataclass_fields__]
        query = (
            select(*columns)
            .where(webhook_attempts.c.tenant_id == tenant_id, webhook_attempts.c.delivery_id == delivery_id)
            .order_by(webhook_attempts.c.id)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [WebhookAttempt.of(r) for r in rows]

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


__all__ = [
    "DELIVERY_PREFIX",
    "SECRET_PREFIX",
    "Webhooks",
    "delivery_not_found",
    "new_secret",
]
