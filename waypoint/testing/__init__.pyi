"""Types of `waypoint.testing`'s lazily imported names (the module imports them on first use)."""

from waypoint.app.embedded import embedded_stack as embedded_stack
from waypoint.app.embedded import stack_settings as stack_settings
from waypoint.app.scripted import ScriptedRun as ScriptedRun
from waypoint.app.scripted import run_scripted as run_scripted
from waypoint.app.scripted import time_skipping as time_skipping
from waypoint.testing.fake_anthropic import FakeAnthropic as FakeAnthropic
from waypoint.testing.fake_gemini import FakeGemini as FakeGemini
from waypoint.testing.fake_openai import FakeOpenAI as FakeOpenAI
from waypoint.testing.fake_openai import Reply as Reply
from waypoint.testing.fake_openai import Turn as Turn

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
