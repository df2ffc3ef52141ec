"""Single sign-on: who a JWT from the configured OpenID Connect issuer says its bearer is.

`/v1` and the Agent Protocol routes take a bearer value that is not a Waypoint key (`wp_...`) as a
JWT when `WAYPOINT_OIDC_ISSUER` is set (`auth.py`); the viewer's sign-in (`ui/sso.py`) checks the
ID token it gets back the same way. Both go through one `Issuer`:

- its discovery document (`<issuer>/.well-known/openid-configuration`), whose `issuer` must be the
  configured one exactly, and its signing keys (`jwks_uri`), both kept `WAYPOINT_OIDC_JWKS_TTL_SECONDS`;
- when they are due again and the issuer does not answer, the kept keys serve on (asked again in
  `REFETCH_SECONDS`); without any, a token is 503;
- a token naming a key id (`kid`) the kept keys lack fetches the keys again (the issuer rotated
  them), at most once every `REFETCH_SECONDS` whatever the tokens say, so made-up key ids cannot
  make Waypoint hammer the issuer;
- PyJWT checks the signature (only `WAYPOINT_OIDC_ALGORITHMS`, asymmetric: never `none`, never an
  HMAC keyed with a public key), `exp`, `nbf` and `iat` (with `WAYPOINT_OIDC_LEEWAY_SECONDS`), `iss`
  and `aud`, and for an ID token its `nonce`.

A token refused is 401 naming what is wrong (expired, another audience, another issuer, an
algorithm not allowed, an unknown key); a valid token whose claims map to no tenant or no role is
403 (`identity`); an issuer that does not answer is 503. No message, log line or span carries the
token itself.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import jwt

from waypoint.access import Role
from waypoint.app.http.problems import HttpError, unauthorized
from waypoint.checks import check_tenant
from waypoint.config import Settings
from waypoint.errors import InvalidInput

log = logging.getLogger(__name__)

REFETCH_SECONDS = 30.0  # an unknown key id fetches the issuer's keys again at most this often
TIMEOUT_SECONDS = 5.0  # for each request to the issuer


@dataclass(frozen=True)
class Identity:
    """Who a valid token says its bearer is, mapped to Waypoint: tenant, role, the token's subject,
    a name to show (name, preferred_username, email or the subject), and when the token expires."""

    subject: str
    tenant: str
    role: Role
    name: str
    expires: float


def unavailable(issuer: str, what: str) -> HttpError:
    return HttpError(
        503,
        "issuer_unavailable",
        f"the identity provider {issuer} cannot be reached ({what}): try again shortly, or use an API key",
    )


def forbidden(message: str) -> HttpError:
    return HttpError(403, "forbidden", message)


class Issuer:
    """The configured OIDC issuer: its metadata and signing keys (cached), and token checks."""

    def __init__(
        self,
        settings: Settings,
        *,
        refetch_seconds: float = REFETCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not settings.oidc_issuer:
            raise ValueError("no WAYPOINT_OIDC_ISSUER")
        self.settings = settings
        self.url: str = settings.oidc_issuer
        self.refetch_seconds = refetch_seconds
        self.clock = clock
        self._metadata: dict[str, Any] | None = None
        self._metadata_at: float | None = None
        self._keys: dict[str, dict[str, Any]] = {}  # by key id, as the issuer publishes them
        self._fetched_at: float | None = None  # when the keys were last fetched
        self._refetched_at: float | None = None  # when an unknown key id last fetched them
        self._lock = asyncio.Lock()

    # --- what the issuer publishes -------------------------------------------------------------

    async def _get(self, url: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, follow_redirects=False) as http:
                response = await http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            log.warning("OIDC issuer %s unreachable: %s", self.url, type(exc).__name__)
            raise unavailable(self.url, type(exc).__name__) from None
        if response.status_code != 200:
            log.warning("OIDC issuer %s answered %s for %s", self.url, response.status_code, url)
            raise unavailable(self.url, f"HTTP {response.status_code} from {url}")
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise unavailable(self.url, f"{url} is not a JSON object")
        return body

    async def metadata(self) -> dict[str, Any]:
        """The discovery document (kept with the keys, fetched again when they are)."""
        if self._metadata is None or self._stale(self._metadata_at):
            document = await self._get(self.url.rstrip("/") + "/.well-known/openid-configuration")
            if document.get("issuer") != self.url:
                raise unavailable(
                    self.url,
                    f"its discovery document names the issuer {document.get('issuer')!r}: set "
                    "WAYPOINT_OIDC_ISSUER to exactly that",
                )
            if not isinstance(document.get("jwks_uri"), str):
                raise unavailable(self.url, "its discovery document has no jwks_uri")
            self._metadata, self._metadata_at = document, self.clock()
        return self._metadata

    async def endpoint(self, name: str) -> str:
        """An endpoint of the discovery document (`authorization_endpoint`, `token_endpoint`); 503 without it."""
        url = (await self.metadata()).get(name)
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise unavailable(self.url, f"its discovery document has no {name}")
        return url

    async def exchange(self, code: str, verifier: str, redirect_uri: str) -> str:
        """The ID token the token endpoint gives for an authorization code (with its PKCE verifier and,
        when one is configured, the client secret: HTTP Basic unless the issuer only takes it posted)."""
        settings = self.settings
        client_id = settings.oidc_client_id or ""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "client_id": client_id,
            "code_verifier": verifier,
        }
        auth: httpx.BasicAuth | None = None
        if settings.oidc_client_secret is not None:
            secret = settings.oidc_client_secret.get_secret_value()
            methods = (await self.metadata()).get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            if "client_secret_basic" in methods:
                auth = httpx.BasicAuth(quote(client_id, safe=""), quote(secret, safe=""))  # RFC 6749 2.3.1
            else:
                form["client_secret"] = secret
        url = await self.endpoint("token_endpoint")
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS, auth=auth, follow_redirects=False) as http:
                response = await http.post(url, data=form, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            log.warning("OIDC issuer %s unreachable: %s", self.url, type(exc).__name__)
            raise unavailable(self.url, type(exc).__name__) from None
        try:
            body = response.json()
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        if response.status_code != 200:
            said = str(body.get("error") or f"HTTP {response.status_code}")[:100]
            raise unauthorized(f"the identity provider refused the sign-in's code ({said}): sign in again")
        token = body.get("id_token")
        if not isinstance(token, str):
            raise unauthorized("the identity provider's answer has no ID token: put `openid` in WAYPOINT_OIDC_SCOPES")
        return token

    def _stale(self, at: float | None) -> bool:
        return at is None or self.clock() - at > self.settings.oidc_jwks_ttl_seconds

    async def _fetch_keys(self) -> None:
        document = await self._get((await self.metadata())["jwks_uri"])
        keys: dict[str, dict[str, Any]] = {}
        for data in document.get("keys") or []:
            if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                continue
            try:
                jwt.PyJWK(data)
            except jwt.PyJWTError:  # a key type or curve PyJWT cannot use: not one of ours to check with
                continue
            keys[str(data.get("kid", ""))] = data
        self._keys = keys
        self._fetched_at = self.clock()

    async def key_for(self, kid: str) -> dict[str, Any]:
        """The signing key `kid` names: from the kept keys, else after one fetch (see the module's docstring)."""
        async with self._lock:
            if self._stale(self._fetched_at):
                try:
                    await self._fetch_keys()
                except HttpError:
                    if not self._keys:
                        raise
                    # The kept keys serve on while the issuer is away; asked again in REFETCH_SECONDS.
                    self._fetched_at = self.clock() - self.settings.oidc_jwks_ttl_seconds + self.refetch_seconds
            elif kid not in self._keys:
                now = self.clock()
                if self._refetched_at is None or now - self._refetched_at >= self.refetch_seconds:
                    self._refetched_at = now
                    await self._fetch_keys()
            key = self._keys.get(kid)
        if key is None:
            raise unauthorized(
                f"the token's signing key {kid!r} is not among {self.url}'s keys: get a new token "
                "(the issuer may have rotated its keys)"
            )
        return key

    # --- checking a token ----------------------------------------------------------------------

    async def claims(self, token: str, *, audience: str, nonce: str | None = None) -> dict[str, Any]:
        """The claims of a valid token of this issuer for `audience` (401 naming what is wrong)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise unauthorized("the bearer token is neither a Waypoint API key nor a JWT") from None
        algorithm = header.get("alg")
        allowed = self.settings.oidc_algorithm_list
        if algorithm not in allowed:
            shown = "unsigned (alg none)" if str(algorithm).lower() == "none" else f"signed with {algorithm}"
            raise unauthorized(
                f"the token is {shown}: only {', '.join(allowed)} are allowed (WAYPOINT_OIDC_ALGORITHMS)"
            )
        kid = str(header.get("kid", ""))
        data = await self.key_for(kid)
        try:
            if data.get("alg", algorithm) != algorithm:
                raise jwt.PyJWKError(data["alg"])
            key = jwt.PyJWK(data, algorithm)  # bound to the one algorithm its signature is checked with
        except jwt.PyJWTError:
            raise unauthorized(f"the token says {algorithm}, which its key {kid!r} is not for") from None
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=audience,
                issuer=self.url,
                leeway=self.settings.oidc_leeway_seconds,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise unauthorized("the token has expired: get a new one") from None
        except jwt.InvalidAudienceError:
            raise unauthorized(
                f"the token is for another audience, not {audience!r} (WAYPOINT_OIDC_AUDIENCE)"
            ) from None
        except jwt.InvalidIssuerError:
            raise unauthorized(f"the token is from another issuer, not {self.url} (WAYPOINT_OIDC_ISSUER)") from None
        except jwt.ImmatureSignatureError:
            raise unauthorized("the token is not valid yet (nbf or iat in the future): check the clocks") from None
        except jwt.MissingRequiredClaimError as exc:
            raise unauthorized(f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise unauthorized("the token's signature does not verify with the issuer's key") from None
        except jwt.PyJWTError as exc:
            raise unauthorized(f"the token is invalid ({type(exc).__name__})") from None
        if nonce is not None:  # an ID token of the viewer's sign-in
            if not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
                raise unauthorized("the ID token's nonce is not the sign-in's: sign in again")
            if isinstance(claims["aud"], list) and len(claims["aud"]) > 1 and claims.get("azp") != audience:
                raise unauthorized("the ID token names several audiences and was not issued to this viewer (azp)")
        return claims

    async def identity(self, token: str, *, audience: str | None = None, nonce: str | None = None) -> Identity:
        """Who a valid token's claims say its bearer is (401: the token; 403: its claims map to nothing)."""
        settings = self.settings
        audience = audience or settings.oidc_audience or settings.oidc_client_id
        if not audience:
            raise unauthorized("SSO has no audience to check: set WAYPOINT_OIDC_AUDIENCE")
        return identity_of(settings, await self.claims(token, audience=audience, nonce=nonce))


def identity_of(settings: Settings, claims: dict[str, Any]) -> Identity:
    """Tenant and role by the configured claims (403 when either maps to nothing)."""
    subject = str(claims["sub"])
    value = claims.get(settings.oidc_tenant_claim)
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if value is None:
        if settings.oidc_tenant is None:
            raise forbidden(
                f"the token has no {settings.oidc_tenant_claim!r} claim naming its tenant: map one at the "
                "identity provider, or set WAYPOINT_OIDC_TENANT"
            )
        value = settings.oidc_tenant
    try:
        tenant = check_tenant(value if isinstance(value, str) else repr(value))
    except InvalidInput as exc:
        raise forbidden(f"the token's {settings.oidc_tenant_claim!r} claim: {exc}") from None
    found = claims.get(settings.oidc_role_claim)
    values = (
        [found]
        if isinstance(found, str)
        else [v for v in found if isinstance(v, str)]
        if isinstance(found, list)
        else []
    )
    mapping = settings.oidc_roles or {r.value: r for r in Role}
    roles = [mapping[v] for v in values if v in mapping]
    role = max(roles, key=lambda r: r.rank) if roles else settings.oidc_default_role
    if role is None:
        raise forbidden(
            f"the token's {settings.oidc_role_claim!r} claim maps to no role: map it in WAYPOINT_OIDC_ROLES, "
            "or set WAYPOINT_OIDC_DEFAULT_ROLE"
        )
    name = next((str(claims[c]) for c in ("name", "preferred_username", "email") if claims.get(c)), subject)
    return Identity(subject, tenant, role, name, float(claims["exp"]))


def issuer_of(app_state: Any, settings: Settings) -> Issuer:
    """The app's one `Issuer` (its keys kept across requests), made on first use."""
    issuer: Issuer | None = getattr(app_state, "oidc_issuer", None)
    if issuer is None or issuer.settings is not settings:
        issuer = app_state.oidc_issuer = Issuer(settings)
    return issuer


__all__ = ["Identity", "Issuer", "identity_of", "issuer_of"]
