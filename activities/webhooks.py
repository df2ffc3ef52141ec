"""Webhook activities: a delivery's row, one signed POST per attempt, the dead-letter mark.

A run's end is delivered by WebhookDeliveryWorkflow (workflows/webhooks.py), a workflow of its own:
`open_webhook_delivery` makes the delivery's row from the finished run (its URL and the body every
attempt posts, byte for byte) and starts its retry window; each `post_webhook` attempt signs the body
with the tenant's secret (made on first use), checks where the URL's host resolves now (a name may
have moved to a link-local or metadata address since the run started), posts once, and records the
attempt (its `webhook_attempts` row, and the delivery's row moved on) and one log line. A 2xx
delivers; no answer, a timeout, 408, 429 or a 5xx retries by `retry.WEBHOOK_DELIVERY_RETRY` until
the window ends; any other answer (a 4xx, a redirect, which is never followed) and a refused address
do not. `close_webhook_delivery` puts a delivery given up on the dead-letter list.

`deliver_webhook` is the same POST for runs from before patch webhook-2, whose own workflow posts
(`retry.WEBHOOK_RETRY`). Secrets and URL queries (which may carry a token) never reach a log line.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from opentelemetry import trace
from temporalio import activity

from waypoint import telemetry
from waypoint.activities.boundary import application_error, attempt, boundary
from waypoint.checks import check_webhook, refused_address
from waypoint.config import Settings
from waypoint.errors import InvalidInput, NotFound, WebhookFailed, WebhookRefused
from waypoint.names import Activity, DeliveryStatus, WebhookEvent
from waypoint.retry import (
    WEBHOOK_ATTEMPTS,
    WEBHOOK_MAX_INTERVAL,
    WEBHOOK_TIMEOUT_SECONDS,
    retry_after_header,
    webhook_backoff,
)
from waypoint.store import RunStore
from waypoint.store.rows import RunRow
from waypoint.store.webhooks import WebhookDelivery
from waypoint.types import (
    CloseDeliveryInput,
    DeliverWebhookInput,
    DeliveryPlan,
    PostWebhookInput,
    WebhookDeliveryInput,
)
from waypoint.webhooks import shown_url, signed_headers

log = logging.getLogger("waypoint.webhooks")

USER_AGENT = "Waypoint-Webhooks/1"
# A Retry-After longer than this is cut to it: the policy's own longest wait (WEBHOOK_RETRY's, for
# runs from before deliveries; a delivery's is WEBHOOK_MAX_INTERVAL).
LONGEST_RETRY_AFTER = timedelta(seconds=60)
# How much of a refusing receiver's answer the attempt's error quotes.
QUOTE_CHARS = 200


def finished_body(row: RunRow, delivery_id: str) -> bytes:
    """The JSON body: the run's final state (never its tenant)."""
    payload: dict[str, Any] = {
        "event": WebhookEvent.RUN_FINISHED.value,
        "delivery_id": delivery_id,
        "run_id": row.run_id,
        "agent": row.agent,
        "status": row.status,
        "output": row.output,
        "output_json": row.output_json,
        "error": row.error,
        "steps": row.steps,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost_usd": row.cost_usd,
        "created_at": row.created_at.isoformat() if row.created_at else None,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "schedule_id": row.schedule_id,
        "trace_id": row.trace_id,
    }
    return json.dumps(payload, separators=(",", ":")).encode()


shown = shown_url  # a URL in a log line or a span: without its query, which may carry a token


def headers_for(secret: str, body: bytes, delivery_id: str, event: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signed_headers(secret, body, delivery_id=delivery_id, event=event),
    }


class WebhookActivities:
    def __init__(self, store: RunStore, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None):
        self.store = store
        self.allow_private = settings.webhook_allow_private
        self.window_seconds = settings.webhook_retry_window_seconds
        self.transport = transport

    async def resolve(self, host: str, port: int) -> list[str]:
        """The addresses `host` resolves to now (the system's resolver, as httpx's connect uses)."""
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [str(sockaddr[0]) for *_, sockaddr in found]

    async def check_host(self, url: str) -> None:
        """Refuse a URL whose host resolves, now, to a link-local or metadata address (unless allowed)."""
        try:
            check_webhook(url, allow_private=self.allow_private)
        except InvalidInput as exc:
            raise WebhookRefused(str(exc)) from None
        if self.allow_private:
            return
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            ipaddress.ip_address(host)
            return  # an IP literal: check_webhook judged it
        except ValueError:
            pass
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            found = await self.resolve(host, port)
        except OSError as exc:
            raise WebhookFailed(f"cannot resolve the webhook host {host}: {exc}") from None
        for address in found:
            why = refused_address(ipaddress.ip_address(address.split("%")[0]))
            if why is not None:
                raise WebhookRefused(
                    f"the webhook host {host} resolves to {why}: not posted "
                    "(set WAYPOINT_WEBHOOK_ALLOW_PRIVATE=true on the worker to allow it)"
                )

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], longest_wait: timedelta = LONGEST_RETRY_AFTER
    ) -> int:
        """POST once; the status of a 2xx answer, else the failure (retryable or not; a Retry-After
        is honoured up to `longest_wait`)."""
        try:
            async with httpx.AsyncClient(
                timeout=WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False, transport=self.transport
            ) as client:
                response = await client.post(url, content=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise WebhookFailed(f"the webhook timed out after {WEBHOOK_TIMEOUT_SECONDS:g} s: {exc!r}") from None
        except httpx.HTTPError as exc:
            raise WebhookFailed(f"cannot reach the webhook: {type(exc).__name__}: {exc}") from None
        code = response.status_code
        if 200 <= code < 300:
            return code
        quote = " ".join(response.text.split())[:QUOTE_CHARS]
        text = f"the webhook answered HTTP {code}" + (f": {quote}" if quote else "")
        details = {"status": code}
        if code in (408, 429) or code >= 500:
            wait = retry_after_header(response.headers)
            delay = min(wait, longest_wait) if wait is not None else None
            raise WebhookFailed(text, retry_after=delay, details=details)
        if 300 <= code < 400:
            text += " (a redirect: webhooks do not follow redirects, give the final URL)"
        raise WebhookRefused(text, details=details)

    async def attempt_post(
        self, url: str, body: bytes, headers: dict[str, str], longest_wait: timedelta = LONGEST_RETRY_AFTER
    ) -> tuple[int | None, WebhookFailed | WebhookRefused | None, int]:
        """One attempt: (the receiver's status code or None, the failure or None, milliseconds taken)."""
        started = time.monotonic()
        code: int | None = None
        failure: WebhookFailed | WebhookRefused | None = None
        try:
            await self.check_host(url)
            code = await self.post(url, body, headers, longest_wait)
        except (WebhookFailed, WebhookRefused) as exc:
            failure = exc
            status = exc.details.get("status")
            code = status if isinstance(status, int) else None
        return code, failure, int((time.monotonic() - started) * 1000)

    # --- deliveries (WebhookDeliveryWorkflow) -------------------------------------------------------

    @activity.defn(name=Activity.OPEN_WEBHOOK)
    @boundary
    async def open_webhook_delivery(self, inp: WebhookDeliveryInput) -> DeliveryPlan:
        """The delivery's row (made from the finished run unless it exists: a redelivery's is made by
        the client) with its retry window started: its status and the seconds left of the window."""
        try:
            status, left = await self.store.webhooks.open_delivery(inp.tenant_id, inp.delivery_id, self.window_seconds)
        except NotFound:
            row = await self.store.get_run(inp.tenant_id, inp.run_id)
            if not row.webhook:
                raise WebhookRefused(f"run {inp.run_id} has no webhook: nothing to deliver") from None
            await self.store.webhooks.create_delivery(
                inp.tenant_id,
                delivery_id=inp.delivery_id,
                run_id=inp.run_id,
                event=inp.event,
                url=row.webhook,
                body=finished_body(row, inp.delivery_id).decode(),
            )
            status, left = await self.store.webhooks.open_delivery(inp.tenant_id, inp.delivery_id, self.window_seconds)
        return DeliveryPlan(status=status, window_seconds=max(left, 0.0))

    @activity.defn(name=Activity.POST_WEBHOOK)
    @boundary
    async def post_webhook(self, inp: PostWebhookInput) -> int:
        """Post the delivery's body once, signed now; the receiver's status code when delivered."""
        n = attempt()
        delivery, text = await self.store.webhooks.delivery_body(inp.tenant_id, inp.delivery_id)
        if delivery.status == DeliveryStatus.DELIVERED:  # an attempt that delivered, then lost its worker
            return delivery.last_status_code or 200
        secret = await self.store.webhooks.webhook_secret(inp.tenant_id)
        body = text.encode()
        headers = headers_for(secret.secret, body, delivery.delivery_id, delivery.event)
        code, failure, duration_ms = await self.attempt_post(delivery.url, body, headers, WEBHOOK_MAX_INTERVAL)
        wait = (failure.retry_after or webhook_backoff(n)) if failure is not None and failure.retryable else None
        due = datetime.now(UTC) + wait if wait is not None else None
        if due is not None and delivery.window_ends_at is not None and due > delivery.window_ends_at:
            due = None  # Temporal starts no attempt past the window's end: this one was the last
        await self.store.webhooks.record_delivery_attempt(
            inp.tenant_id,
            inp.delivery_id,
            attempt=n,
            status_code=code,
            error=str(failure) if failure else None,
            duration_ms=duration_ms,
            delivered=failure is None,
            final=failure is not None and not failure.retryable,
            next_attempt_at=due,
        )
        if failure is None:
            outcome = "delivered"
        elif wait is None:
            outcome = "not retried"
        elif due is None:
            outcome = "the retry window ends before another attempt"
        else:
            outcome = f"next attempt in {wait.total_seconds():g} s"
        self._trace(delivery, n, code, outcome, failure)
        return _logged_outcome(
            f"post_webhook: delivery={delivery.delivery_id} run={delivery.run_id} attempt={n}",
            delivery.url,
            code,
            duration_ms,
            outcome,
            failure,
            {
                "waypoint_run_id": delivery.run_id,
                "waypoint_attempt": n,
                "waypoint_webhook_delivery": delivery.delivery_id,
            },
        )

    @staticmethod
    def _trace(
        delivery: WebhookDelivery,
        n: int,
        code: int | None,
        outcome: str,
        failure: WebhookFailed | WebhookRefused | None,
    ) -> None:
        """The attempt's span says which delivery, which run, how the receiver answered (never the URL's
        query); a failed attempt is a failed span (Temporal leaves a benign failure's span unmarked)."""
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(
                {"http.request.method": "POST", "url.full": shown(delivery.url)}
                | ({"http.response.status_code": code} if code is not None else {})
            )
            if failure is not None:
                telemetry.mark_error(span, failure)
        telemetry.annotate(
            run_id=delivery.run_id,
            **{
                "webhook.delivery_id": delivery.delivery_id,
                "webhook.event": delivery.event,
                "webhook.attempt": n,
                "webhook.outcome": outcome,
                "webhook.redelivery_of": delivery.redelivery_of,
            },
        )

    @activity.defn(name=Activity.CLOSE_WEBHOOK)
    @boundary
    async def close_webhook_delivery(self, inp: CloseDeliveryInput) -> None:
        """Put a delivery given up on the dead-letter list (a late attempt that delivered stays delivered)."""
        await self.store.webhooks.close_delivery(inp.tenant_id, inp.delivery_id, inp.reason)
        log.warning(
            "webhook delivery %s given up, on the dead-letter list: %s",
            inp.delivery_id,
            inp.reason,
            extra={"waypoint_webhook_delivery": inp.delivery_id},
        )

    # --- runs from before patch webhook-2 ----------------------------------------------------------

    @activity.defn(name=Activity.DELIVER_WEBHOOK)
    @boundary
    async def deliver_webhook(self, inp: DeliverWebhookInput) -> int:
        """Post the finished run to its webhook once; the receiver's status code when delivered."""
        n = attempt()
        row = await self.store.get_run(inp.tenant_id, inp.run_id)
        secret = await self.store.webhooks.webhook_secret(inp.tenant_id)
        body = finished_body(row, inp.delivery_id)
        headers = headers_for(secret.secret, body, inp.delivery_id, WebhookEvent.RUN_FINISHED)
        code, failure, duration_ms = await self.attempt_post(inp.url, body, headers)
        await self.store.webhooks.record_webhook_attempt(
            inp.tenant_id,
            inp.run_id,
            attempt=n,
            url=inp.url,
            status_code=code,
            error=str(failure) if failure else None,
            duration_ms=duration_ms,
            delivered=failure is None,
        )
        retry = failure is not None and failure.retryable and n < WEBHOOK_ATTEMPTS
        outcome = "delivered" if failure is None else ("will retry" if retry else "not retried")
        return _logged_outcome(
            f"deliver_webhook: run={inp.run_id} attempt={n} of {WEBHOOK_ATTEMPTS}",
            inp.url,
            code,
            duration_ms,
            outcome,
            failure,
            {"waypoint_run_id": inp.run_id, "waypoint_attempt": n},
        )


def _logged_outcome(
    what: str,
    url: str,
    code: int | None,
    duration_ms: int,
    outcome: str,
    failure: WebhookFailed | WebhookRefused | None,
    extra: dict[str, Any],
) -> int:
    """One line for an attempt's outcome; the receiver's status code, or the failure raised (logged
    here: not through the boundary's line again)."""
    log.log(
        logging.INFO if failure is None else logging.WARNING,
        "%s url=%s status=%s ms=%s (%s)%s",
        what,
        shown(url),
        code,
        duration_ms,
        outcome,
        f": {failure}" if failure else "",
        extra={**extra, "waypoint_webhook_status": code, "waypoint_webhook_delivered": failure is None},
    )
    if failure is not None:
        raise application_error(failure)
    assert code is not None
    return code


__all__ = ["WebhookActivities", "finished_body", "headers_for"]
