"""The `anthropic:<model>` adapter (being built: issue 25)."""

from __future__ import annotations

from typing import Any

from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.models import ModelAdapter


def make_adapter(settings: Settings, model: str, key_env: str | None, clients: dict[Any, Any]) -> ModelAdapter:
    """The adapter for one call of `model`; `clients` caches SDK clients per (provider, key variable)."""
    raise ConfigError("anthropic: models are not available in this build yet")
