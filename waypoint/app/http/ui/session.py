"""The web viewer's session and its forms' CSRF tokens.

A session is an API key exchanged once (POST /ui/login) for a signed cookie naming the key's
id and when the cookie expires. Every request that the cookie authenticates looks the key up
(by its primary key), so revoking the key ends its sessions at once. The cookie is HttpOnly,
SameSite=Strict and, over https, Secure; it is accepted on /ui and on the API's GET routes (the
viewer's live stream), never on a /v1 write.

    waypoint_session = <key id>|<expires, unix seconds>|<HMAC-SHA256 of "session|" and both, hex>

A person signed in through the identity provider (`ui/sso.py`, with WAYPOINT_OIDC_ISSUER) has a
session of another name and shape: who the ID token said they are (subject, tenant, role, a name to
show), the issuer, and when it ends (the token's `exp`, at most `LIFETIME_SECONDS` on), signed the same
way; it is trusted until then (the identity provider is not asked again), and only while the same
issuer is configured. The sign-in itself keeps its PKCE verifier, state and nonce in a third cookie,
`waypoint_sso`, for `FLOW_SECONDS`.

    waypoint_user = <base64url of the JSON of the above>.<HMAC-SHA256 of "user|" and it, hex>

Every form of the viewer carries a CSRF token: an HMAC of the cookie it is bound to, the
session cookie, or without one (the login page, `waypoint dev` with no keys) a random
`waypoint_csrf` cookie the page sets. A page of another site can neither read the token nor
compute it, so a form it posts is refused (and so is one whose Origin is not the viewer's own).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from typing import Any

from fastapi import Request, Response

from waypoint.access import Role
from waypoint.app.http.oidc import Identity

COOKIE = "waypoint_session"
USER_COOKIE = "waypoint_user"
FLOW_COOKIE = "waypoint_sso"
FLOW_SECONDS = 600  # from "Sign in with SSO" to the identity provider's answer
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


def _pack(secret: bytes, purpose: str, data: dict[str, Any]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")
    return f"{body}.{_sign(secret, purpose, body)}"


def _unpack(secret: bytes, purpose: str, cookie: str | None, now: float | None) -> dict[str, Any] | None:
    """What a cookie `_pack` made holds, or None when it is absent, forged or past its `exp`."""
    body, _, signature = (cookie or "").rpartition(".")
    if not body or not hmac.compare_digest(signature, _sign(secret, purpose, body)):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("exp"), int | float):
        return None
    return data if data["exp"] >= (time.time() if now is None else now) else None


def issue_user(secret: bytes, issuer: str, user: Identity, *, now: float | None = None) -> tuple[str, int]:
    """A signed-in user's session cookie, and how many seconds it lasts."""
    start = time.time() if now is None else now
    expires = int(min(user.expires, start + LIFETIME_SECONDS))
    data = {"sub": user.subject, "tenant": user.tenant, "role": user.role.value, "name": user.name}
    return _pack(secret, "user", {**data, "iss": issuer, "exp": expires}), max(0, expires - int(start))


def user_in(secret: bytes, issuer: str | None, cookie: str | None, *, now: float | None = None) -> Identity | None:
    """Who a user session cookie names, while it lasts and `issuer` is still the configured one."""
    data = _unpack(secret, "user", cookie, now)
    if data is None or issuer is None or data.get("iss") != issuer or data.get("role") not in set(Role):
        return None
    return Identity(str(data["sub"]), str(data["tenant"]), Role(data["role"]), str(data["name"]), data["exp"])


def issue_flow(secret: bytes, data: dict[str, str], *, now: float | None = None) -> str:
    """The sign-in's own cookie: its PKCE verifier, state, nonce and the page to go back to."""
    return _pack(secret, "sso", {**data, "exp": int((time.time() if now is None else now) + FLOW_SECONDS)})


def flow_in(secret: bytes, cookie: str | None, *, now: float | None = None) -> dict[str, Any] | None:
    return _unpack(secret, "sso", cookie, now)


def set_cookie(request: Request, response: Response, name: str, value: str, max_age: int | None = None) -> None:
    """How the viewer sets its cookies: unreadable by scripts, never sent by another site, and
    over https only when served over https."""
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, max_age=max_age, httponly=True, samesite="strict", secure=secure)


def csrf_anchor(request: Request) -> str | None:
    """The cookie a form's token is bound to: the session's, else the page's own CSRF cookie."""
    return request.cookies.get(COOKIE) or request.cookies.get(USER_COOKIE) or request.cookies.get(CSRF_COOKIE) or None


def new_anchor() -> str:
    return secrets.token_urlsafe(24)


def csrf_token(secret: bytes, anchor: str) -> str:
    return _sign(secret, "csrf", anchor)


def csrf_valid(secret: bytes, anchor: str | None, token: object) -> bool:
    return bool(anchor) and isinstance(token, str) and hmac.compare_digest(token, csrf_token(secret, anchor or ""))
