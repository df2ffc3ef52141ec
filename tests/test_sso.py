"""Single sign-on against a local OpenID Connect issuer (tests/oidc_issuer.py, a real HTTP server with
keys this test makes): bearer JWTs on /v1 and the Agent Protocol, what is refused and why, key
rotation, claims to tenant and role, an unreachable issuer, no token in any log line; and the
viewer's sign-in (authorization code with PKCE) through httpx and in Chromium."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine

from tests import a11y
from tests.browser import STEP_MS, needs_browser, sign_in
from tests.conftest import ApiServer
from tests.helpers import every_table_as_text
from tests.oidc_issuer import AUDIENCE, CLIENT_ID, OidcIssuer, SigningKey
from waypoint.access import Role
from waypoint.app.http.oidc import Issuer, identity_of
from waypoint.app.http.problems import HttpError
from waypoint.client import Waypoint
from waypoint.config import Settings

pytestmark = pytest.mark.postgres

ROLES = {"wp-viewers": Role.VIEWER, "wp-ops": Role.OPERATOR, "wp-admins": Role.ADMIN}


@pytest.fixture
def issuer(request: pytest.FixtureRequest) -> Iterator[OidcIssuer]:
    """The test's issuer (parametrize `issuer` indirectly for its host or client secret); Alice signs in."""
    user = {"sub": "u-alice", "name": "Alice Example", "groups": ["staff", "wp-ops"]}
    server = OidcIssuer(user=user, **getattr(request, "param", {})).start()
    yield server
    server.stop()


@pytest.fixture
def settings(settings: Settings, issuer: OidcIssuer) -> Settings:
    """The API's settings with SSO against the test's issuer: the role from `groups`."""
    issuer.user["waypoint_tenant"] = settings.tenant
    return settings.model_copy(
        update={
            "oidc_issuer": issuer.url,
            "oidc_audience": AUDIENCE,
            "oidc_client_id": CLIENT_ID,
            "oidc_client_secret": SecretStr(issuer.client_secret) if issuer.client_secret else None,
            "oidc_role_claim": "groups",
            "oidc_roles": ROLES,
            "ui_secret": "test-ui-secret",
        }
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def said(r: httpx.Response) -> str:
    message: str = r.json()["error"]["message"]
    return message


async def test_a_valid_token_reads_v1_and_the_agent_protocol_for_its_tenant(
    api: ApiServer, issuer: OidcIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    thread = (await api.http.post("/threads", json={"metadata": {"who": "key"}})).json()["thread_id"]
    token = issuer.token()

    r = await api.http.get("/v1/runs", headers=bearer(token))
    assert r.status_code == 200, r.text
    r = await api.http.get(f"/threads/{thread}", headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["who"] == "key"
    # The keys are kept: a second request fetches nothing.
    assert (await api.http.get("/v1/runs", headers=bearer(token))).status_code == 200
    assert issuer.hits["/jwks"] == 1 and issuer.hits["/.well-known/openid-configuration"] == 1

    # The tenant comes from the claim: another tenant's token does not see the thread.
    other = issuer.token(waypoint_tenant=f"tenant-{uuid.uuid4().hex[:8]}")
    assert (await api.http.get(f"/threads/{thread}", headers=bearer(other))).status_code == 404

    # A key still works beside tokens, and a wrong key is still a key's 401.
    assert (await api.http.get("/v1/runs")).status_code == 200
    r = await api.http.get("/v1/runs", headers=bearer("wp_not-a-real-key"))
    assert r.status_code == 401 and "API key" in said(r)
    assert not [rec for rec in caplog.records if token in rec.getMessage() or other in rec.getMessage()]


REFUSALS = [
    ("expired", lambda i: i.token(exp=1_000_000, iat=999_000), "expired"),
    ("wrong audience", lambda i: i.token(aud="someone-else"), "another audience"),
    ("wrong issuer", lambda i: i.token(iss="https://evil.example"), "another issuer"),
    ("no subject", lambda i: i.token(sub=None), "'sub'"),
    ("unsigned", lambda i: i.forge("none"), "unsigned (alg none)"),
    ("HS256 with the public key", lambda i: i.forge("HS256"), "signed with HS256"),
    ("another key, same kid", lambda i: i.token(key=SigningKey.make().named(i.keys[0].kid)), "signature"),
    ("not a JWT", lambda i: "just-some-string", "neither a Waypoint API key nor a JWT"),
]


async def test_bad_tokens_are_refused_naming_what_is_wrong(
    api: ApiServer, issuer: OidcIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = []
    for name, make, says in REFUSALS:
        token = make(issuer)
        tokens.append(token)
        for method, path in (("GET", "/v1/runs"), ("POST", "/threads/search")):
            r = await api.http.request(method, path, json={} if method == "POST" else None, headers=bearer(token))
            assert r.status_code == 401, (name, r.text)
            message = said(r)
            assert says in message, (name, message)
            assert token not in r.text
    assert not [rec for rec in caplog.records for t in tokens if t in rec.getMessage()]


async def test_a_rotated_key_is_fetched_once_and_the_old_one_refused(api: ApiServer, issuer: OidcIssuer) -> None:
    old = issuer.token()
    assert (await api.http.get("/v1/runs", headers=bearer(old))).status_code == 200
    assert issuer.hits["/jwks"] == 1

    issuer.rotate("RS256")
    new = issuer.token()
    r = await api.http.get("/v1/runs", headers=bearer(new))
    assert r.status_code == 200, r.text  # its unknown kid fetched the keys again
    assert issuer.hits["/jwks"] == 2

    r = await api.http.get("/v1/runs", headers=bearer(old))
    assert r.status_code == 401 and "not among" in said(r)
    # Made-up key ids fetch nothing more: one fetch per REFETCH_SECONDS whatever tokens say.
    stranger = SigningKey.make()
    r = await api.http.get("/v1/runs", headers=bearer(issuer.token(key=stranger)))
    assert r.status_code == 401 and stranger.kid in said(r)
    assert issuer.hits["/jwks"] == 2
    assert (await api.http.get("/v1/runs", headers=bearer(new))).status_code == 200


async def test_claims_that_map_to_no_role_or_tenant_are_403(api: ApiServer, issuer: OidcIssuer) -> None:
    r = await api.http.get("/v1/runs", headers=bearer(issuer.token(groups=["staff"])))
    assert r.status_code == 403 and "'groups' claim maps to no role" in said(r)
    r = await api.http.get("/v1/runs", headers=bearer(issuer.token(waypoint_tenant=None)))
    assert r.status_code == 403 and "WAYPOINT_OIDC_TENANT" in said(r)
    r = await api.http.get("/v1/runs", headers=bearer(issuer.token(waypoint_tenant="Not A Tenant!")))
    assert r.status_code == 403 and "invalid tenant id" in said(r)


async def test_an_unreachable_issuer_is_503_in_one_line(
    api: ApiServer, issuer: OidcIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    token = issuer.token()
    issuer.stop()
    caplog.set_level(logging.DEBUG)
    r = await api.http.get("/v1/runs", headers=bearer(token))
    assert r.status_code == 503, r.text
    message = said(r)
    assert "cannot be reached" in message and issuer.url in message and "\n" not in message
    lines = [rec for rec in caplog.records if rec.name == "waypoint.app.http.oidc"]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert not [rec for rec in caplog.records if token in rec.getMessage()]


def test_claims_map_to_tenant_and_role_by_configuration() -> None:
    settings = Settings(
        oidc_issuer="https://id.example",
        oidc_audience="waypoint-api",
        oidc_role_claim="groups",
        oidc_roles={"eng": "viewer", "wp-ops": "operator", "wp-admins": "admin"},
        oidc_tenant="acme",
    )
    claims = {"sub": "u1", "exp": 2_000_000_000, "email": "u1@example.com"}
    # The highest role any group maps to; a string claim as well as a list; the fixed tenant.
    who = identity_of(settings, {**claims, "groups": ["eng", "wp-admins", "other"]})
    assert (who.tenant, who.role, who.subject, who.name) == ("acme", Role.ADMIN, "u1", "u1@example.com")
    assert identity_of(settings, {**claims, "groups": "eng"}).role is Role.VIEWER
    # The claim wins over the fixed tenant; a one-item list is a tenant too.
    assert identity_of(settings, {**claims, "groups": "eng", "waypoint_tenant": ["beta"]}).tenant == "beta"
    # No mapped role: refused, unless a default role is set.
    with pytest.raises(Exception, match="maps to no role"):
        identity_of(settings, {**claims, "groups": ["other"]})
    fallback = settings.model_copy(update={"oidc_default_role": Role.VIEWER})
    assert identity_of(fallback, {**claims}).role is Role.VIEWER


def test_oidc_settings_are_checked() -> None:
    """Algorithms are asymmetric only; an issuer needs an audience and is a URL."""
    for bad in ("none", "HS256", "RS256,HS512", ""):
        with pytest.raises(ValueError, match="WAYPOINT_OIDC_ALGORITHMS"):
            Settings(oidc_algorithms=bad)
    assert Settings(oidc_algorithms="ES256, PS256").oidc_algorithm_list == ["ES256", "PS256"]
    with pytest.raises(ValueError, match="WAYPOINT_OIDC_AUDIENCE"):
        Settings(oidc_issuer="https://id.example")  # no audience: every token would be refused
    with pytest.raises(ValueError, match="WAYPOINT_OIDC_ISSUER"):
        Settings(oidc_issuer="id.example", oidc_audience="a")


async def test_keys_are_kept_for_their_ttl(issuer: OidcIssuer) -> None:
    now = [0.0]
    settings = Settings(oidc_issuer=issuer.url, oidc_audience=AUDIENCE, oidc_jwks_ttl_seconds=60, oidc_tenant="acme")
    checker = Issuer(settings, clock=lambda: now[0])
    issuer.user = {"sub": "u1", "waypoint_role": "viewer"}
    for at in (0.0, 59.0):
        now[0] = at
        assert (await checker.identity(issuer.token())).role is Role.VIEWER
    assert issuer.hits["/jwks"] == 1
    now[0] = 61.0
    await checker.identity(issuer.token())
    assert issuer.hits["/jwks"] == 2 and issuer.hits["/.well-known/openid-configuration"] == 2
    # Due again while the issuer is away: the kept keys serve on.
    token = issuer.token()
    issuer.stop()
    now[0] = 130.0
    assert (await checker.identity(token)).subject == "u1"


async def test_an_id_token_must_carry_the_sign_ins_nonce_and_be_issued_to_the_viewer(issuer: OidcIssuer) -> None:
    settings = Settings(oidc_issuer=issuer.url, oidc_client_id=CLIENT_ID, oidc_tenant="acme")
    checker = Issuer(settings)
    issuer.user = {"sub": "u1", "waypoint_role": "viewer"}
    assert (await checker.identity(issuer.token(aud=CLIENT_ID, nonce="n1"), nonce="n1")).subject == "u1"
    for token, says in [
        (issuer.token(aud=CLIENT_ID, nonce="n2"), "nonce"),
        (issuer.token(aud=CLIENT_ID), "nonce"),
        (issuer.token(aud=[CLIENT_ID, "other"], nonce="n1"), "azp"),
    ]:
        with pytest.raises(HttpError, match=says) as refused:
            await checker.identity(token, nonce="n1")
        assert refused.value.status == 401
    both = issuer.token(aud=[CLIENT_ID, "other"], azp=CLIENT_ID, nonce="n1")
    assert (await checker.identity(both, nonce="n1")).role is Role.VIEWER


# --- the viewer's sign-in ------------------------------------------------------------------------


async def test_the_viewer_signs_in_with_pkce_and_refuses_a_foreign_state(api: ApiServer, issuer: OidcIssuer) -> None:
    async with httpx.AsyncClient(timeout=30) as browser:
        login = await browser.get(f"{api.url}/ui/login")
        assert "Sign in with SSO" in login.text
        start = await browser.get(f"{api.url}/ui/sso/start", params={"next": "/ui/schedules"})
        assert start.status_code == 303
        authorize = httpx.URL(start.headers["location"])
        assert authorize.params["code_challenge_method"] == "S256" and authorize.params["nonce"]
        back = await browser.get(authorize)  # the issuer signs Alice in and sends the browser back
        callback = httpx.URL(back.headers["location"])

        forged = await browser.get(callback.copy_set_param("state", "not-the-state"))
        assert forged.status_code == 400 and "is not this sign-in" in forged.text

        landed = await browser.get(callback)
        assert landed.status_code == 200 and 'url=/ui/schedules"' in landed.text
        assert "waypoint_user" in browser.cookies and "waypoint_sso" not in browser.cookies
        page = await browser.get(f"{api.url}/ui")
        assert page.status_code == 200 and "Alice Example" in page.text and "operator" in page.text
        # The session reads /v1 (GET) as the user; the code was good once.
        assert (await browser.get(f"{api.url}/v1/runs")).status_code == 200
        again = await browser.get(callback)
        assert again.status_code in (400, 401)
        # Logging in with a key ends the user's session: one session at a time.
        browser.base_url = httpx.URL(api.url)
        assert (await sign_in(browser, api.key)).status_code == 303
        assert "waypoint_user" not in browser.cookies
        assert "Alice Example" not in (await browser.get("/ui")).text

    async with httpx.AsyncClient(base_url=api.url, timeout=30) as stranger:
        # A callback without the sign-in's cookie (too late, or another browser's), and a refusal.
        r = await stranger.get("/ui/sso/callback", params=callback.params)
        assert r.status_code == 400 and "start again" in r.text and "waypoint_user" not in stranger.cookies
        r = await stranger.get("/ui/sso/callback", params={"error": "access_denied"})
        assert r.status_code == 401 and "refused the sign-in (access_denied)" in r.text


@needs_browser
@pytest.mark.parametrize("issuer", [{"host": "localhost", "client_secret": "s3cret", "consent": True}], indirect=True)
async def test_sign_in_with_sso_in_chromium(browser, contexts: list, api: ApiServer, issuer: OidcIssuer) -> None:
    """The issuer at another site (localhost; the viewer at 127.0.0.1) whose own page sends the browser
    back, so the cookies cross sites as they do in production (the sign-in's cookie must be Lax, the
    session's Strict cookie is set on a page that moves on by itself), and a confidential client (its
    secret sent to the token endpoint)."""
    context = await browser.new_context(base_url=api.url)
    contexts.append(context)
    page = await context.new_page()
    page.set_default_timeout(STEP_MS)
    await page.goto("/ui")
    assert "/ui/login" in page.url
    assert await a11y.problems(page) == []
    await page.click("text=Sign in with SSO")
    await page.wait_for_url(f"{issuer.url}/authorize?**")
    await page.click("#consent")  # the way back starts on the issuer's page: another site
    await page.wait_for_url(f"{api.url}/ui")
    who = await page.locator("header .who").inner_text()
    assert "Alice Example" in who and "operator" in who
    assert await a11y.problems(page) == []
    assert await page.locator("h1").count() >= 1 and "/ui/login" not in page.url
    assert issuer.hits["/token"] == 1
    await page.click("button:has-text('Log out')")
    await page.wait_for_url("**/ui/login")
    assert not [c for c in await context.cookies() if c["name"] == "waypoint_user"]
    await page.goto("/ui")
    assert "/ui/login" in page.url  # signed out


async def test_a_signed_in_users_write_is_audited_by_subject_and_the_token_is_kept_nowhere(
    api: ApiServer, issuer: OidcIssuer, engine: AsyncEngine, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = issuer.token()  # Alice, an operator by her `wp-ops` group
    r = await api.http.post("/threads", json={"metadata": {"who": "alice"}}, headers=bearer(token))
    assert r.status_code == 200, r.text
    thread = r.json()["thread_id"]
    viewer = issuer.token(groups=["wp-viewers"])
    r = await api.http.post("/threads", json={}, headers=bearer(viewer))
    assert r.status_code == 403 and r.json()["error"]["needs"] == "operator", r.text

    entries = (await Waypoint(None, engine, settings).audit.entries(actor="user:u-alice")).entries
    assert [(e.action, e.outcome, e.surface) for e in entries] == [
        ("thread.write", "refused", "protocol"),
        ("thread.write", "ok", "protocol"),
    ]
    assert entries[1].target_id == thread
    tables = await every_table_as_text(engine)
    assert thread in tables and "user:u-alice" in tables  # the search reads the rows the requests wrote
    for secret in (token, viewer):
        assert secret not in tables
        assert secret.split(".")[2] not in tables  # not even the signature
        assert secret not in caplog.text
