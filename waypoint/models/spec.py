"""Model specs: `openai:<model>` or `scripted`, parsed in one place."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from waypoint.errors import InvalidInput


class Provider(StrEnum):
    OPENAI = "openai"  # any OpenAI-compatible chat-completions endpoint
    SCRIPTED = "scripted"  # the agent's own ScriptedModel


@dataclass(frozen=True)
class ModelSpec:
    provider: Provider
    name: str  # the provider's model name; "scripted" for a scripted model

    def __str__(self) -> str:
        return Provider.SCRIPTED.value if self.provider == Provider.SCRIPTED else f"{self.provider}:{self.name}"


def parse_model_spec(spec: str) -> ModelSpec:
    """`openai:gpt-4o-mini` -> ModelSpec(openai, gpt-4o-mini); InvalidInput names the accepted forms."""
    text = spec.strip()
    if text == Provider.SCRIPTED:
        return ModelSpec(Provider.SCRIPTED, Provider.SCRIPTED.value)
    provider, _, name = text.partition(":")
    if provider == Provider.OPENAI and name.strip():
        return ModelSpec(Provider.OPENAI, name.strip())
    raise InvalidInput(f"unknown model spec {spec!r}: use openai:<model> (e.g. openai:gpt-4o-mini) or scripted")


def model_label(spec: str) -> tuple[str, str]:
    """(provider, model name) for display and spans, whatever the spec: `scripted` -> (scripted, scripted)."""
    provider, _, name = spec.partition(":")
    return provider, name or provider
