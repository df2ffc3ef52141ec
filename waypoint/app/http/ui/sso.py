"""The viewer's sign-in through the identity provider: OpenID Connect's authorization-code flow with
PKCE (S256), a state and a nonce, against WAYPOINT_OIDC_ISSUER (`oidc.py` fetches and checks).

    GET /ui/sso/start?next=/ui   to the issuer's authorization endpoint; the PKCE verifier, state,
                                 nonce and `next` wait in the signed `waypoint_sso` cookie (10 minutes)
    GET /ui/sso/callback         the issuer sends the browser back with a code: the state must be
                                 the cookie's; the code (with the verifier, and the client secret when
                                 one is set) is exchanged at the token endpoint for an ID token, which
                                 is checked as a bearer token is, with the viewer's client id as its
                                 audience and the cookie's nonce; then a user session (`session.py`)

The flow's cookie is SameSite=Lax: the way back is a navigation the provider's page starts, another
site's, which brings no Strict cookie. For the same reason the callback does not redirect to `next`
(that navigation would still be the provider's, and the new Strict session cookie would stay home):
it answers a page that moves on by itself, a navigation of this site's own. Logging out (POST
/ui/logout) clears the session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from waypoint.app.http.oidc import Issuer, issuer_of
from waypoint.app.http.problems import HttpError
from waypoint.app.http.state import ApiState
from waypoint.app.http.ui import session
from waypoint.app.http.ui.render import Api, render

router = APIRouter(prefix="/ui/sso", include_in_schema=False)


def configured(api: ApiState, request: Request) -> Issuer:
    settings = api.settings
    if not (api.auth and settings.oidc_issuer and settings.oidc_client_id):
        raise HttpError(
            404,
            "not_found",
            "single sign-on is not configured: set WAYPOINT_OIDC_ISSUER and WAYPOINT_OIDC_CLIENT_ID",
        )
    return issuer_of(request.app.state, settings)


def redirect_uri(request: Request) -> str:
    return str(request.url_for("sso_callback"))


def _challenge(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


@router.get("/start")
async def start(request: Request, api: Api, next: str = "/ui") -> Response:
    issuer = configured(api, request)
    endpoint = await issuer.endpoint("authorization_endpoint")
    flow = {
        "verifier": secrets.token_urlsafe(64),
        "state": secrets.token_urlsafe(24),
        "nonce": secrets.token_urlsafe(24),
        "next": next if next.startswith("/ui") and not next.startswith("/ui/sso") else "/ui",
    }
    query = urlencode(
        {
            "response_type": "code",
            "client_id": api.settings.oidc_client_id,
            "redirect_uri": redirect_uri(request),
            "scope": api.settings.oidc_scopes,
            "state": flow["state"],
            "nonce": flow["nonce"],
            "code_challenge": _challenge(flow["verifier"]),
            "code_challenge_method": "S256",
        }
    )
    response = RedirectResponse(f"{endpoint}{'&' if '?' in endpoint else '?'}{query}", status_code=303)
    cookie = session.issue_flow(session.secret_of(api.settings.ui_secret), flow)
    response.set_cookie(
        session.FLOW_COOKIE,
        cookie,
        max_age=session.FLOW_SECONDS,
        path="/ui/sso",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/callback", name="sso_callback")
async def callback(request: Request, api: Api, code: str = "", state: str = "", error: str = "") -> Response:
    issuer = configured(api, request)
    secret = session.secret_of(api.settings.ui_secret)
    if error:
        raise HttpError(401, "unauthorized", f"the identity provider refused the sign-in ({error[:100]})")
    flow = session.flow_in(secret, request.cookies.get(session.FLOW_COOKIE))
    if flow is None:
        raise HttpError(
            400,
            "sign_in_expired",
            "this sign-in took longer than 10 minutes or began in another browser: start again at /ui/login",
        )
    if not hmac.compare_digest(state, str(flow["state"])) or not code:
        raise HttpError(400, "sign_in_mismatch", "the identity provider's answer is not this sign-in's: start again")
    token = await issuer.exchange(code, str(flow["verifier"]), redirect_uri(request))
    user = await issuer.identity(token, audience=api.settings.oidc_client_id, nonce=str(flow["nonce"]))
    cookie, lifetime = session.issue_user(secret, issuer.url, user)
    request.state.user = user
    response = render(request, "signed_in.html", next=flow["next"], user=user)
    session.set_cookie(request, response, session.USER_COOKIE, cookie, max_age=lifetime)
    response.delete_cookie(session.FLOW_COOKIE, path="/ui/sso")
    response.delete_cookie(session.COOKIE)  # one session at a time: an API key's ends
    return response


def logout(response: Response) -> Response:
    """Clear a signed-in user's session (POST /ui/logout calls it beside its own)."""
    response.delete_cookie(session.USER_COOKIE)
    return response


__all__ = ["logout", "router"]
