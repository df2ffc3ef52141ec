"""The web viewer's session: an API key exchanged once (POST /ui/login) for a signed cookie
naming the tenant and when it expires. The cookie is HttpOnly and SameSite=Strict; it is
accepted on /ui and on the API's GET routes (the viewer's live stream), never on a /v1 write.

    waypoint_session = <tenant>|<expires, unix seconds>|<HMAC-SHA256 of both, hex>
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

COOKIE = "waypoint_session"
LIFETIME_SECONDS = 12 * 3600

_process_secret = secrets.token_bytes(32)


def secret_of(configured: str | None) -> bytes:
    """The signing key: WAYPOINT_UI_SECRET, or one random per process."""
    return configured.encode() if configured else _process_secret


def _sign(secret: bytes, text: str) -> str:
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def issue(secret: bytes, tenant: str, *, now: float | None = None) -> str:
    body = f"{tenant}|{int((time.time() if now is None else now) + LIFETIME_SECONDS)}"
    return f"{body}|{_sign(secret, body)}"


def tenant_in(secret: bytes, cookie: str | None, *, now: float | None = None) -> str | None:
    """The tenant a cookie names, or None when it is absent, forged or expired."""
    if not cookie:
        return None
    body, _, signature = cookie.rpartition("|")
    tenant, _, expires = body.rpartition("|")
    if not tenant or not expires.isdigit() or not hmac.compare_digest(signature, _sign(secret, body)):
        return None
    if int(expires) < (time.time() if now is None else now):
        return None
    return tenant
