"""Signed webhooks: how Waypoint signs the POST a run's webhook gets, and how a receiver checks it.

Each POST carries:

    Content-Type: application/json
    Waypoint-Event: run.finished
    Waypoint-Delivery: <id>             the same on every attempt of one delivery: dedupe on it
    Waypoint-Timestamp: <unix seconds>  when this attempt was signed
    Waypoint-Signature: v1=<hex>        HMAC-SHA256, with the tenant's secret, of "<timestamp>.<body>"

A receiver recomputes the HMAC over the raw body bytes, compares in constant time, and refuses a
timestamp older (or newer) than a few minutes, so a captured request cannot be replayed later:

    from waypoint.webhooks import verify, WebhookSignatureError

    try:
        event = verify(secret, request_body_bytes, request_headers)   # the parsed body
    except WebhookSignatureError:
        return 400

Standard library only: a receiver needs nothing else from Waypoint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

TIMESTAMP_HEADER = "Waypoint-Timestamp"
SIGNATURE_HEADER = "Waypoint-Signature"
DELIVERY_HEADER = "Waypoint-Delivery"
EVENT_HEADER = "Waypoint-Event"
SCHEME = "v1"
# How far a receiver lets a signed timestamp stray from its own clock by default.
TOLERANCE_SECONDS = 300


class WebhookSignatureError(ValueError):
    """A webhook request that does not verify: no signature, a wrong one, or a stale timestamp."""


def signature(secret: str, timestamp: int | str, body: bytes) -> str:
    """The hex HMAC-SHA256, keyed by `secret`, of `<timestamp>.<body>`."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str, body: bytes, *, delivery_id: str, event: str, now: float | None = None
) -> dict[str, str]:
    """The headers of one attempt: signed now (each retry signs afresh, so a late retry is not stale)."""
    timestamp = int(time.time() if now is None else now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: f"{SCHEME}={signature(secret, timestamp, body)}",
        DELIVERY_HEADER: delivery_id,
        EVENT_HEADER: event,
    }


def shown_url(url: str) -> str:
    """A webhook URL as logs, tables and pages show it: without its query, which may carry a token."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def verify(
    secret: str | Iterable[str],
    body: bytes | str,
    headers: Mapping[str, str],
    *,
    tolerance_seconds: float = TOLERANCE_SECONDS,
    now: float | None = None,
) -> Any:
    """Check a webhook request and return its parsed JSON body, or raise WebhookSignatureError.

    `secret`: the tenant's secret (`waypoint webhook secret`), or several (the old and the new one
    while a rotation reaches every receiver). `body`: the raw request body, exactly as received.
    `headers`: the request's headers (any case). `tolerance_seconds`: how far the signed timestamp
    may be from `now` (this machine's clock by default)."""
    found = {k.lower(): v for k, v in headers.items()}
    raw_timestamp = found.get(TIMESTAMP_HEADER.lower())
    raw_signatures = found.get(SIGNATURE_HEADER.lower())
    if not raw_timestamp or not raw_signatures:
        raise WebhookSignatureError(f"no {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header: not a Waypoint webhook")
    try:
        timestamp = int(raw_timestamp)
    except ValueError:
        raise WebhookSignatureError(f"{TIMESTAMP_HEADER} {raw_timestamp!r} is not a whole number of seconds") from None
    skew = abs((time.time() if now is None else now) - timestamp)
    if skew > tolerance_seconds:
        raise WebhookSignatureError(
            f"{TIMESTAMP_HEADER} is {skew:.0f} s from now (at most {tolerance_seconds:g} s): "
            "a replayed or delayed request"
        )
    data = body.encode() if isinstance(body, str) else body
    secrets = [secret] if isinstance(secret, str) else list(secret)
    wanted = {signature(s, timestamp, data) for s in secrets}
    given = [part.strip().partition("=") for part in raw_signatures.split(",")]
    if not any(scheme == SCHEME and any(hmac.compare_digest(value, w) for w in wanted) for scheme, _, value in given):
        raise WebhookSignatureError(f"{SIGNATURE_HEADER} does not match the body: check the secret")
    return json.loads(data)


__all__ = [
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WebhookSignatureError",
    "signature",
    "shown_url",
    "signed_headers",
    "verify",
]
