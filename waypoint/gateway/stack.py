"""The stack a `waypoint dev` runs in a state folder, as another process finds it (`stack.json`,
held under `stack.lock` while the stack runs): where the client finds its database and Temporal."""

from __future__ import annotations

import fcntl
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StackInfo:
    temporal_address: str
    ui_url: str | None
    database_url: str
    qdrant_path: str
    pid: int
    worker: bool = False


def running_stack(state_dir: Path) -> StackInfo | None:
    """Endpoints of the stack another process owns in `state_dir`, or None."""
    lock_path, info_path = state_dir / "stack.lock", state_dir / "stack.json"
    if not lock_path.exists() or not info_path.exists():
        return None
    with open(lock_path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return StackInfo(**json.loads(info_path.read_text()))
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None
