"""`deliver_webhook`: one signed POST of a finished run's final state to the run's webhook.

Each attempt reads the finished row, signs the body with the tenant's secret (made on first use),
checks where the URL's host resolves now (a name may have moved to a link-local or metadata address
since the run started), posts once, and logs the attempt in `webhook_attempts` and as one line.
A 2xx delivers; no answer, a timeout, 408, 429 or a 5xx retries by `retry.WEBHOOK_RETRY`; any other
answer (a 4xx, a redirect, which is never followed) and a refused address do not. The workflow
catches the final failure: a webhook never changes how its run ended.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from temporalio import activity

from waypoint.activities.boundary import application_error, attempt, boundary
from waypoint.checks import check_webhook, refused_address
from waypoint.config import Settings
from waypoint.errors import InvalidInput, WaypointError, WebhookFailed, WebhookRefused
from waypoint.names import Activity, WebhookEvent
from waypoint.retry import WEBHOOK_ATTEMPTS, WEBHOOK_TIMEOUT_SECONDS, retry_after_header
from waypoint.store import RunStore
from waypoint.store.rows import RunRow
from waypoint.types import DeliverWebhookInput
from waypoint.webhooks import signed_headers

log = logging.getLogger("waypoint.webhooks")

USER_AGENT = "Waypoint-Webhooks/1"
# A Retry-After longer than this is cut to it: the policy's own longest wait.
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


def shown(url: str) -> str:
    """The URL as a log line shows it: without its query, which may carry a token."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


class WebhookActivities:
    def __init__(self, store: RunStore, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None):
        self.store = store
        self.allow_private = settings.webhook_allow_private
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

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        """POST once; the status of a 2xx answer, else the failure (retryable or not)."""
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
            delay = min(wait, LONGEST_RETRY_AFTER) if wait is not None else None
            raise WebhookFailed(text, retry_after=delay, details=details)
        if 300 <= code < 400:
            text += " (a redirect: webhooks do not follow redirects, give the final URL)"
        raise WebhookRefused(text, details=details)

    @activity.defn(name=Activity.DELIVER_WEBHOOK)
    @boundary
    async def deliver_webhook(self, inp: DeliverWebhookInput) -> int:
        """Post the finished run to its webhook once; the receiver's status code when delivered."""
        n = attempt()
        row = await self.store.get_run(inp.tenant_id, inp.run_id)
        secret = await self.store.webhook_secret(inp.tenant_id)
        body = finished_body(row, inp.delivery_id)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            **signed_headers(secret.secret, body, delivery_id=inp.delivery_id, event=WebhookEvent.RUN_FINISHED),
        }
        started = time.monotonic()
        code: int | None = None
        failure: WaypointError | None = None
        try:
            await self.check_host(inp.url)
            code = await self.post(inp.url, body, headers)
        except (WebhookFailed, WebhookRefused) as exc:
            failure = exc
            status = exc.details.get("status")
            code = status if isinstance(status, int) else None
        duration_ms = int((time.monotonic() - started) * 1000)
        await self.store.record_webhook_attempt(
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
        log.log(
            logging.INFO if failure is None else logging.WARNING,
            "deliver_webhook: run=%s attempt=%s of %s url=%s status=%s ms=%s (%s)%s",
            inp.run_id,
            n,
            WEBHOOK_ATTEMPTS,
            shown(inp.url),
            code,
            duration_ms,
            outcome,
            f": {failure}" if failure else "",
            extra={
                "waypoint_run_id": inp.run_id,
                "waypoint_attempt": n,
                "waypoint_webhook_status": code,
                "waypoint_webhook_delivered": failure is None,
            },
        )
        if failure is not None:
            raise application_error(failure)  # logged above: not through the boundary's line again
        assert code is not None
        return code


__all__ = ["WebhookActivities", "finished_body"]
