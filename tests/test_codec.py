"""Payload encryption: the Temporal server only ever holds ciphertext, runs still complete and replay,
keys rotate, and the codec server decodes for the Web UI over a real socket."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from tests.helpers import payloads_in
from tests.ports import reserve_port
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.codec import ENCODING, CodecServer, EncryptionCodec, parse_keys
from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.gateway.temporal import connect as connect_temporal
from waypoint.workflows.agent_run import AgentRunWorkflow


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


SDK_MARKER_FIELDS = {
    "id",
    "deprecated",
    "seq",
    "attempt",
    "activity_id",
    "activity_type",
    "complete_time",
    "backoff",
    "original_schedule_time",
    "activation_index",
}
SDK_MARKER_DETAILS = {"core_local_activity": "data", "core_patch": "patch-data"}


def sdk_marker_data(event: HistoryEvent) -> Iterator[Payload]:
    """The payloads a marker holds for the SDK itself (not a run's data)."""
    if not event.HasField("marker_recorded_event_attributes"):
        return
    marker = event.marker_recorded_event_attributes
    key = SDK_MARKER_DETAILS.get(marker.marker_name)
    if key is not None and key in marker.details:
        yield from marker.details[key].payloads


@pytest.mark.postgres
async def test_history_holds_only_ciphertext_and_the_run_replays(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry
):
    secret = f"planted-plaintext-{uuid.uuid4().hex}"
    enc_settings = settings.model_copy(update={"codec_keys": SecretStr(f"old:{new_key()},new:{new_key()}")})
    enc_client = await connect_temporal(enc_settings)
    assert isinstance(enc_client.data_converter.payload_codec, EncryptionCodec)

    async with build_worker(enc_client, engine, enc_settings, agents):
        wp = Waypoint(enc_client, engine, enc_settings)
        run_id = await wp.start_run(f"add, and remember {secret}", agent="calculator")
        result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "The answer is 15.")

    # Read as the Temporal server (and anyone with access to it) sees the history: no codec.
    raw = await client.get_workflow_handle(run_id).fetch_history()
    payloads = [p for event in raw.events for p in payloads_in(event)]
    assert len(payloads) > 10  # inputs and results of the workflow and of every activity
    # Markers carry the SDK's own bookkeeping in plain JSON (a patch's id; a local activity's seq,
    # attempt and type), never a value of the run: the local activity's result beside it is sealed.
    bookkeeping = [p for event in raw.events for p in sdk_marker_data(event)]
    assert bookkeeping and all(json.loads(p.data).keys() <= SDK_MARKER_FIELDS for p in bookkeeping)
    # Patches also set the TemporalChangeVersion search attribute (search attributes are indexed by
    # the server, so never sealed): the patch ids, nothing else.
    upserts = [
        e.upsert_workflow_search_attributes_event_attributes.search_attributes
        for e in raw.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    indexed = [(name, value) for attrs in upserts for name, value in attrs.indexed_fields.items()]
    assert {name for name, _ in indexed} <= {"TemporalChangeVersion"}
    plain = [
        (dict(p.metadata), p.data[:60])
        for p in payloads
        if p.metadata.get("encoding") != ENCODING and p not in bookkeeping and p not in [v for _, v in indexed]
    ]
    assert not plain
    sealed = [p for p in payloads if p.metadata.get("encoding") == ENCODING]
    assert len(sealed) > 10
    assert {p.metadata["encryption-key-id"] for p in sealed} == {b"new"}  # the newest key encrypts
    assert secret.encode() not in raw.to_json().encode()
    assert all(secret.encode() not in p.data for p in payloads)
    assert b"calculator" not in b"".join(p.data for p in payloads)

    # The same history through the codec: the plaintext is there, and the workflow code replays it.
    codec = enc_client.data_converter.payload_codec
    assert codec is not None
    decoded = await codec.decode(payloads)
    assert any(secret.encode() in p.data for p in decoded)
    outcomes = await wp.replay(run_id)
    assert outcomes and all(o.error is None for o in outcomes)
    plain_replay = await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(raw, raise_on_replay_failure=False)
    assert plain_replay.replay_failure is not None  # without the key the history is unreadable


async def test_a_payload_encrypted_with_an_old_key_decrypts_after_rotation():
    k1, k2 = new_key(), new_key()
    before = EncryptionCodec(parse_keys(f"k1:{k1}"))
    original = (await DataConverter.default.encode([{"task": "rotate me"}]))[0]
    [sealed] = await before.encode([original])
    assert sealed.metadata["encryption-key-id"] == b"k1"

    after = EncryptionCodec(parse_keys(f"k1:{k1},k2:{k2}"))
    assert await after.decode([sealed]) == [original]
    [resealed] = await after.encode([original])
    assert resealed.metadata["encryption-key-id"] == b"k2"

    dropped_old = EncryptionCodec(parse_keys(f"k2:{k2}"))
    with pytest.raises(ValueError, match="key 'k1'.*keep old keys"):
        await dropped_old.decode([sealed])
    forged = Payload(metadata={**sealed.metadata, "encryption-key-id": b"k2"}, data=sealed.data)
    with pytest.raises(ValueError, match="does not decrypt"):
        await after.decode([forged])
    # Payloads written before encryption was turned on stay readable.
    assert await after.decode([original]) == [original]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nokey", "not `id:base64key`"),
        ("k1:not*base64", "not base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "has 5 bytes, AES-256 needs 32"),
        (f"k1:{new_key()},k1:{new_key()}", "appears twice"),
        (" , ", "holds no key"),
    ],
    ids=["no-colon", "not-base64", "short", "twice", "empty"],  # fixed: xdist workers must collect the same ids
)
def test_bad_keys_are_refused_with_the_fix(value: str, message: str):
    with pytest.raises(ConfigError, match=message) as info:
        parse_keys(value)
    assert "WAYPOINT_CODEC_KEYS" in str(info.value)


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers), response.read()


async def test_codec_server_decodes_for_the_web_ui_over_a_socket():
    codec = EncryptionCodec(parse_keys(f"k1:{new_key()}"))
    original = (await DataConverter.default.encode(["hello from the UI"]))[0]
    [sealed] = await codec.encode([original])
    server = CodecServer(codec, "http://localhost:8233").start("127.0.0.1", 0)
    host, port = server.address
    try:
        wire = {
            "payloads": [
                {
                    "metadata": {k: base64.b64encode(v).decode() for k, v in sealed.metadata.items()},
                    "data": base64.b64encode(sealed.data).decode(),
                }
            ]
        }
        ui = {"Content-Type": "application/json", "X-Namespace": "default", "Origin": "http://localhost:8233"}
        status, headers, body = post(f"http://{host}:{port}/default/decode", json.dumps(wire).encode(), ui)
        assert status == 200
        assert headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
        [answer] = json.loads(body)["payloads"]
        assert base64.b64decode(answer["data"]) == b'"hello from the UI"'
        assert base64.b64decode(answer["metadata"]["encoding"]) == b"json/plain"

        # encode then decode round-trips through the server
        plain = {"payloads": [{"metadata": wire["payloads"][0]["metadata"] | {}, "data": ""}]}
        plain["payloads"][0]["metadata"] = {"encoding": base64.b64encode(b"json/plain").decode()}
        plain["payloads"][0]["data"] = base64.b64encode(b'"round trip"').decode()
        _, _, encoded = post(f"http://{host}:{port}/encode", json.dumps(plain).encode(), ui)
        [enc] = json.loads(encoded)["payloads"]
        assert base64.b64decode(enc["metadata"]["encoding"]) == ENCODING
        _, _, back = post(f"http://{host}:{port}/decode", encoded, ui)
        assert base64.b64decode(json.loads(back)["payloads"][0]["data"]) == b'"round trip"'

        # the browser's preflight, and another origin gets no CORS grant
        preflight = urllib.request.Request(f"http://{host}:{port}/decode", method="OPTIONS", headers=ui)
        with urllib.request.urlopen(preflight, timeout=10) as response:
            assert response.status == 204
            assert "X-Namespace" in response.headers["Access-Control-Allow-Headers"]
        _, other, _ = post(
            f"http://{host}:{port}/decode", json.dumps(wire).encode(), ui | {"Origin": "http://evil.example"}
        )
        assert "Access-Control-Allow-Origin" not in other
    finally:
        server.stop()


def test_codec_server_command_without_keys_says_what_to_set(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "waypoint", "codec-server", "--port", str(reserve_port())],
        env=env | {"WAYPOINT_STATE_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "error: WAYPOINT_CODEC_KEYS is not set: the codec server needs the keys the workers use"
    ]
