"""Optional encryption of every Temporal payload (AES-256-GCM), and the codec server the Web UI calls.

With `WAYPOINT_CODEC_KEYS="k1:<base64 key>,k2:<base64 key>"` the client and every worker built from it
encrypt workflow inputs, results, activity arguments and results, memos and failures before they
reach the Temporal server, so the server's history holds ciphertext only. Each encrypted payload
names its key in the metadata, so keys rotate without re-encrypting history: add a new key at the
end (it encrypts from then on), keep the old ones as long as histories written with them exist.

The Temporal Web UI and CLI cannot read encrypted payloads themselves; `waypoint codec-server` serves
Temporal's remote codec protocol (POST /decode and /encode, proto3-JSON `{"payloads": [...]}`) with the
same keys, so the UI decodes in the browser of whoever may reach that server.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import os
import threading
from collections.abc import Iterable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.common import HeaderCodecBehavior
from temporalio.converter import DataConverter, PayloadCodec

from waypoint.config import Settings
from waypoint.errors import ConfigError

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
CIPHER = b"AES256-GCM"
NONCE_BYTES = 12
NEW_KEY_HINT = 'make one with: python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())"'


def parse_keys(value: str) -> list[tuple[str, bytes]]:
    """`id:base64key,id:base64key` (newest last) into (id, key) pairs; every error names the fix."""
    keys: list[tuple[str, bytes]] = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id:
            raise ConfigError(f"WAYPOINT_CODEC_KEYS: an entry is not `id:base64key` ({NEW_KEY_HINT})")
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"WAYPOINT_CODEC_KEYS: key {key_id!r} is not base64 ({NEW_KEY_HINT})") from None
        if len(key) != 32:
            raise ConfigError(
                f"WAYPOINT_CODEC_KEYS: key {key_id!r} has {len(key)} bytes, AES-256 needs 32 ({NEW_KEY_HINT})"
            )
        if any(known == key_id for known, _ in keys):
            raise ConfigError(f"WAYPOINT_CODEC_KEYS: key id {key_id!r} appears twice: give each key its own id")
        keys.append((key_id, key))
    if not keys:
        raise ConfigError(f"WAYPOINT_CODEC_KEYS is set but holds no key ({NEW_KEY_HINT})")
    return keys


class EncryptionCodec(PayloadCodec):
    """AES-GCM over the whole serialized payload (data and metadata), so even the encoding of a
    value stays private. The key id is bound into the ciphertext as associated data: a payload
    relabelled with another key id does not decrypt."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise ConfigError(f"the payload codec needs at least one key ({NEW_KEY_HINT})")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys}
        self.current_key_id = keys[-1][0]

    @classmethod
    def from_settings(cls, settings: Settings) -> EncryptionCodec | None:
        # Empty counts as unset, so compose's `${WAYPOINT_CODEC_KEYS:-}` leaves encryption off.
        if settings.codec_keys is None or not settings.codec_keys.get_secret_value().strip():
            return None
        return cls(parse_keys(settings.codec_keys.get_secret_value()))

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(p) for p in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        key_id = self.current_key_id
        nonce = os.urandom(NONCE_BYTES)  # random 96-bit nonces: safe for far more payloads than a key will see
        sealed = self._ciphers[key_id].encrypt(nonce, payload.SerializeToString(), key_id.encode())
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID: key_id.encode(), "encryption-cipher": CIPHER},
            data=nonce + sealed,
        )

    def _decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was turned on: readable as it is
        key_id = payload.metadata.get(KEY_ID, b"").decode()
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise ValueError(
                f"payload encrypted with key {key_id!r}, which WAYPOINT_CODEC_KEYS does not hold: "
                "keep old keys in the list while histories written with them exist"
            )
        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise ValueError(
                f"payload does not decrypt with key {key_id!r}: it was altered or the key is wrong"
            ) from None
        return Payload.FromString(plain)


def data_converter(settings: Settings) -> DataConverter:
    """Temporal's default converter, plus encryption when WAYPOINT_CODEC_KEYS is set."""
    codec = EncryptionCodec.from_settings(settings)
    if codec is None:
        return DataConverter.default
    return dataclasses.replace(DataConverter.default, payload_codec=codec)


def header_codec_behavior(settings: Settings) -> HeaderCodecBehavior:
    """With encryption on, headers (trace context, anything an interceptor adds) are encrypted too."""
    return HeaderCodecBehavior.CODEC if EncryptionCodec.from_settings(settings) else HeaderCodecBehavior.NO_CODEC


# --- the remote codec server (for the Temporal Web UI and CLI) ----------------------------------------


def _payloads_from_json(body: bytes) -> list[Payload]:
    message = Payloads()
    json_format.Parse(body or b"{}", message)
    return list(message.payloads)


def _payloads_to_json(payloads: Iterable[Payload]) -> bytes:
    return json.dumps(json_format.MessageToDict(Payloads(payloads=list(payloads)))).encode()


class CodecServer:
    """`CodecServer(codec, origin).start(host, port)` serves POST /decode and /encode (also under a
    `/{namespace}/` prefix, as the CLI's `--codec-endpoint` template sends) until `.stop()`."""

    def __init__(self, codec: EncryptionCodec, ui_origin: str) -> None:
        self.codec = codec
        self.ui_origin = ui_origin.rstrip("/")
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "the codec server is not started"
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self, host: str = "127.0.0.1", port: int = 8888) -> CodecServer:
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        codec, origin = self.codec, self.ui_origin

        class Handler(BaseHTTPRequestHandler):
            def _cors(self) -> None:
                # The UI calls from the browser, with the user's credentials: allow exactly its origin.
                if self.headers.get("Origin", "").rstrip("/") == origin:
                    self.send_header("Access-Control-Allow-Origin", origin)
                    self.send_header("Access-Control-Allow-Credentials", "true")
                    self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
                    self.send_header("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")
                    self.send_header("Vary", "Origin")

            def _answer(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
                self.send_response(status)
                self._cors()
                if body:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _route(self) -> str | None:
                last = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                return last if last in ("decode", "encode") else None

            def do_OPTIONS(self) -> None:  # noqa: N802 - the http.server naming
                self._answer(204 if self._route() else 404)

            def do_POST(self) -> None:  # noqa: N802
                route = self._route()
                if route is None:
                    self._answer(404, b'{"error": "not found: POST /decode or /encode"}')
                    return
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    payloads = _payloads_from_json(raw)
                    run = codec.decode if route == "decode" else codec.encode
                    result = asyncio.run(run(payloads))
                except (json_format.ParseError, ValueError) as exc:
                    self._answer(400, json.dumps({"error": str(exc)}).encode())
                    return
                self._answer(200, _payloads_to_json(result))

            def do_GET(self) -> None:  # noqa: N802
                self._answer(405 if self._route() else 404)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the server logs nothing: request bodies are exactly what must stay private

        return Handler
