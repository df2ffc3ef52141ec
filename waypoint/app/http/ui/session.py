"""The web viewer's session and its forms' CSRF tokens.

A session is an API key exchanged once (POST /ui/login) for a signed cookie naming the key's
id and when the cookie expires. Every request that the cookie authenticates looks the key up
(by its primary key), so revoking the key ends its sessions at once. The cookie is HttpOnly,
SameSite=Strict and, over https, Secure; it is accepted on /ui and on the API's GET routes (the
viewer's live stream), never on a /v1 write.

    waypoint_session = <key id>|<expires, unix seconds>|<HMAC-SHA256 of "session|" and both, hex>

Every form of the viewer carries a CSRF token: an HMAC of the cookie it is bound to, the
session cookie, or without one (the login page, `waypoint dev` with no keys) a random
`waypoint_csrf` cookie the page sets. A page of another site can neither read the token nor
compute it, so a form it posts is refused (and so is one whose Origin is not the viewer's own).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from fastapi import Request, Response

COOKIE = "waypoint_session"
CSRF_COOKIE = "waypoint_csrf"
CSRF_FIELD = "csrf"
LIFETIME_SECONDS = 12 * 3600

_process_secret = secrets.token_bytes(32)


def secret_of(configured: str | None) -> bytes:
    """The signing key: WAYPOINT_UI_SECRET, or one random per process."""
    return configured.encode() if configured else _process_secret


def _sign(secret: bytes, purpose: str, text: str) -> str:
    # The purpose keeps a session's signature from passing as a token, and cookies of the older
    # `<tenant>|<expires>` shape (signed without one) from passing as a session.
    return hmac.new(secret, f"{purpose}|{text}".encode(), hashlib.sha256).hexdigest()


def issue(secret: bytes, key_id: int, *, now: float | None = None) -> str:
    body = f"{key_id}|{int((time.time() if now is None else now) + LIFETIME_SECONDS)}"
    return f"{body}|{_sign(secret, 'session', body)}"


def key_in(secret: bytes, cookie: str | None, *, now: float | None = None) -> int | None:
    """The id of the key a cookie was made with, or None when it is absent, forged or expired
    (whether the key is still valid is the database's to say)."""
    if not cookie:
        return None
    body, _, signature = cookie.rpartition("|")
    key_id, _, expires = body.partition("|")
    if not key_id.isdigit() or not expires.isdigit():
        return None
    if not hmac.compare_digest(signature, _sign(secret, "session", body)):
        return None
    if int(expires) < (time.time() if now is None else now):
        return None
    return int(key_id)


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None = None) -> None:
    """How the viewer sets its cookies: unreadable by scripts, never sent by another site, and
    over https only when served over https."""
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="strict", secure=secure)


def csrf_anchor(request: Request) -> str | None:
    """The cookie a form's token is bound to: the session's, else the page's own CSRF cookie."""
    return request.cookies.get(COOKIE) or request.cookies.get(CSRF_COOKIE) or None


def new_anchor() -> str:
    return secrets.token_urlsafe(24)


def csrf_token(secret: bytes, anchor: str) -> str:
    return _sign(secret, "csrf", anchor)


def csrf_valid(secret: bytes, anchor: str | None, token: object) -> bool:
    return bool(anchor) and isinstance(token, str) and hmac.compare_digest(token, csrf_token(secret, anchor or ""))
