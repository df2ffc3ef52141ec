"""The events hash chain: `hash = sha256(prev_hash || canonical JSON of the event)`."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def event_hash(prev_hash: str | None, *, run_id: str, seq: int, step: int, kind: str, payload: Any) -> str:
    return chained_event(prev_hash, run_id=run_id, seq=seq, step=step, kind=kind, payload=payload)[0]


def chained_event(
    prev_hash: str | None, *, run_id: str, seq: int, step: int, kind: str, payload: Any
) -> tuple[str, str]:
    """(the event's hash, the canonical JSON of its payload): the payload is serialized once, for
    the hash and for the insert. The body is exactly `canonical_json` of the whole event (keys in
    sorted order: kind, payload, run_id, seq, step), so `verify` can recompute it either way."""
    payload_json = canonical_json(payload)
    body = (
        f'{{"kind":{canonical_json(kind)},"payload":{payload_json},"run_id":{canonical_json(run_id)},'
        f'"seq":{canonical_json(seq)},"step":{canonical_json(step)}}}'
    )
    return hashlib.sha256(((prev_hash or "") + body).encode()).hexdigest(), payload_json


def text_digest(text: str) -> str:
    """SHA-256 of a text (a tool output, a recalled episode)."""
    return hashlib.sha256(text.encode()).hexdigest()


def state_hash(state: Any) -> str:
    return hashed_json(state)[0]


def hashed_json(value: Any) -> tuple[str, str]:
    """(sha256 of the canonical JSON, that JSON): one serialization for the hash and the insert."""
    text = canonical_json(value)
    return hashlib.sha256(text.encode()).hexdigest(), text
