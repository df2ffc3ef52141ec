"""Helpers to try and test agents offline, for Waypoint's own tests and yours.

- `embedded_stack()`, `stack_settings()`: a running Temporal dev server + PostgreSQL + Qdrant folder.
- `run_scripted()`, `time_skipping()`: an agent's run in Temporal's time-skipping environment with
  scripted model answers, no database (`ScriptedRun` says what it did).
- `FakeOpenAI`, `FakeAnthropic`, `FakeGemini` (with `Turn`, `Reply`): real local servers that speak
  the providers' APIs, answering scripted turns (`python -m waypoint.testing.fake_openai` runs one);
  each fills in the hooks of one base, `waypoint.testing.fake_server.FakeServer` (routes, error bodies,
  wire format), which holds the script, the request log, bursts and capacity.

Names are imported on first use: importing one fake server loads neither the stack nor Temporal.
The stack and time-skipping helpers stand on the app (`waypoint/app/embedded.py`, `scripted.py`),
which uses the fake servers (`waypoint demo --chaos`): this package only hands their names on.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "FakeAnthropic": "waypoint.testing.fake_anthropic",
    "FakeGemini": "waypoint.testing.fake_gemini",
    "FakeOpenAI": "waypoint.testing.fake_openai",
    "Reply": "waypoint.testing.fake_openai",
    "ScriptedRun": "waypoint.app.scripted",
    "Turn": "waypoint.testing.fake_openai",
    "embedded_stack": "waypoint.app.embedded",
    "run_scripted": "waypoint.app.scripted",
    "stack_settings": "waypoint.app.embedded",
    "time_skipping": "waypoint.app.scripted",
}

__all__ = [
    "FakeAnthropic",
    "FakeGemini",
    "FakeOpenAI",
    "Reply",
    "ScriptedRun",
    "Turn",
    "embedded_stack",
    "run_scripted",
    "stack_settings",
    "time_skipping",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'waypoint.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
