"""The events hash chain: `hash = sha256(prev_hash || canonical JSON of the event)`."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def event_hash(prev_hash: str | None, *, run_id: str, seq: int, step: int, kind: str, payload: Any) -> str:
    body = canonical_json({"run_id": run_id, "seq": seq, "step": step, "kind": kind, "payload": payload})
    return hashlib.sha256(((prev_hash or "") + body).encode()).hexdigest()


def state_hash(state: Any) -> str:
    return hashlib.sha256(canonical_json(state).encode()).hexdigest()
