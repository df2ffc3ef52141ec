"""A local OpenID Connect issuer for the single sign-on tests: a real HTTP server (a thread of this
process) serving discovery, its signing keys (JWKS), an authorization endpoint that signs in one
configured user at once (no login form), and a token endpoint that checks the code, its PKCE verifier,
the redirect URI and the client's secret, then answers an ID token. Its keys are ones the test makes
with `cryptography`; `rotate()` replaces them, `token()` mints a bearer token, `forge()` makes the
tokens no issuer would sign (unsigned, HMAC keyed with the public key)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

AUDIENCE = "waypoint-api"
CLIENT_ID = "waypoint-viewer"


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    @classmethod
    def make(cls, alg: str = "ES256") -> SigningKey:
        private = (
            rsa.generate_private_key(65537, 2048) if alg.startswith("RS") else ec.generate_private_key(ec.SECP256R1())
        )
        return cls(f"k-{secrets.token_hex(4)}", alg, private)

    def named(self, kid: str) -> SigningKey:
        """This private key under another key's id (a token no key of that id verifies)."""
        return SigningKey(kid, self.alg, self.private)

    def public_jwk(self) -> dict[str, Any]:
        algorithm = jwt.get_algorithm_by_name(self.alg)
        data: dict[str, Any] = json.loads(algorithm.to_jwk(self.private.public_key()))
        return {**data, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


@dataclass
class Grant:
    claims: dict[str, Any]
    challenge: str
    redirect_uri: str


@dataclass
class OidcIssuer:
    host: str = "127.0.0.1"
    client_secret: str | None = None
    consent: bool = False  # /authorize answers a page with a link back, as a real provider's sign-in page
    user: dict[str, Any] = field(default_factory=dict)  # the claims of whoever signs in at /authorize
    keys: list[SigningKey] = field(default_factory=lambda: [SigningKey.make()])
    hits: Counter[str] = field(default_factory=Counter)  # requests per path
    grants: dict[str, Grant] = field(default_factory=dict)

    def start(self) -> OidcIssuer:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                issuer.hits[path] += 1
                if path == "/.well-known/openid-configuration":
                    self._json(200, issuer.discovery())
                elif path == "/jwks":
                    self._json(200, {"keys": [k.public_jwk() for k in issuer.keys]})
                elif path == "/authorize":
                    self._authorize({k: v[0] for k, v in parse_qs(query).items()})
                else:
                    self._json(404, {"error": "not_found"})

            def _authorize(self, q: dict[str, str]) -> None:
                if q.get("client_id") != CLIENT_ID or q.get("code_challenge_method") != "S256":
                    self._json(400, {"error": "invalid_request"})
                    return
                code = secrets.token_urlsafe(16)
                claims = {**issuer.user, "nonce": q["nonce"]}
                issuer.grants[code] = Grant(claims, q["code_challenge"], q["redirect_uri"])
                back = f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q['state']})}"
                if issuer.consent:  # a page of the issuer's own sends the browser back: a cross-site navigation
                    name = html.escape(str(issuer.user.get("name")))
                    link = f'<a id="consent" href="{html.escape(back)}">Continue as {name}</a>'
                    data = f"<!doctype html><title>Sign in</title>{link}".encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                else:
                    data = b""
                    self.send_response(302)
                    self.send_header("Location", back)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                issuer.hits[self.path] += 1
                form = {
                    k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()
                }
                if self.path != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                if issuer.client_secret is not None:
                    expected = base64.b64encode(f"{CLIENT_ID}:{issuer.client_secret}".encode()).decode()
                    if self.headers.get("Authorization") != f"Basic {expected}":
                        self._json(401, {"error": "invalid_client"})
                        return
                grant = issuer.grants.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
                if grant is None or challenge != grant.challenge or form.get("redirect_uri") != grant.redirect_uri:
                    self._json(400, {"error": "invalid_grant"})
                    return
                id_token = issuer.token(aud=CLIENT_ID, **grant.claims)
                self._json(200, {"id_token": id_token, "access_token": "opaque", "token_type": "Bearer"})

        self._server = ThreadingHTTPServer((self.host if self.host != "localhost" else "127.0.0.1", 0), Handler)
        self.url = f"http://{self.host}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._server.server_close()

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "jwks_uri": f"{self.url}/jwks",
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        }

    def rotate(self, alg: str = "ES256") -> SigningKey:
        """A new signing key; the old ones are no longer published."""
        self.keys = [SigningKey.make(alg)]
        return self.keys[0]

    def token(self, *, key: SigningKey | None = None, **claims: Any) -> str:
        """A token signed with `key` (the current one): this issuer's, for the API's audience, valid
        for five minutes, for the claims `user` holds, then `claims` (None: left out)."""
        key = key or self.keys[0]
        now = int(time.time())
        payload = {"iss": self.url, "aud": AUDIENCE, "iat": now, "exp": now + 300, **self.user, **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key.private, algorithm=key.alg, headers={"kid": key.kid})

    def forge(self, alg: str, *, key: SigningKey | None = None) -> str:
        """A token of this issuer's claims no issuer signs: alg `none` (no signature), or HS256 with
        the public key's PEM as the HMAC secret (the classic algorithm confusion)."""
        key = key or self.keys[0]
        now = int(time.time())
        header = {"alg": alg, "typ": "JWT", "kid": key.kid}
        payload = {"iss": self.url, "aud": AUDIENCE, "iat": now, "exp": now + 300, **self.user}
        body = ".".join(_b64(json.dumps(part).encode()) for part in (header, payload))
        if alg == "none":
            return body + "."
        return body + "." + _b64(hmac.new(key.public_pem(), body.encode(), hashlib.sha256).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def host_of(url: str) -> str:
    return urlsplit(url).netloc
