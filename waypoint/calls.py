"""A tool call as runs are compared and scored by it: its name, its arguments as canonical JSON and
how it ended. Pure, on the ground floor: the store's comparisons and the evaluations' scorers both
read calls this way, and importing it loads no database driver."""

from __future__ import annotations

import json
from dataclasses import dataclass


def canonical_arguments(arguments: str | None) -> str:
    """A tool call's arguments as canonical JSON (keys sorted), or the raw text when it is not JSON."""
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except json.JSONDecodeError:
        return arguments or ""


@dataclass(frozen=True)
class CallLine:
    """One tool call of a step, as `compare` matches them: the name, the arguments as canonical JSON
    (keys sorted), and how it ended (a ToolOutcome, or None when no result was recorded)."""

    name: str
    arguments: str
    outcome: str | None = None
