"""Model specs: `openai:<model>` or `scripted`, parsed in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from waypoint.errors import InvalidInput
from waypoint.names import Provider

if TYPE_CHECKING:
    from waypoint.config import Settings

# The variables a worker reads each provider's API key from, in order (an agent's `provider_key_env`
# replaces them for its own calls).
KEY_VARIABLES = {
    Provider.OPENAI: ("OPENAI_API_KEY", "WAYPOINT_OPENAI_API_KEY"),
    Provider.ANTHROPIC: ("ANTHROPIC_API_KEY",),
    Provider.GOOGLE: ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}

# The variables that point a provider's SDK at another endpoint (a proxy, a gateway, a fake).
BASE_URL_VARIABLES = {
    Provider.OPENAI: ("OPENAI_BASE_URL", "WAYPOINT_OPENAI_BASE_URL"),
    Provider.ANTHROPIC: ("ANTHROPIC_BASE_URL",),
    Provider.GOOGLE: ("GOOGLE_GEMINI_BASE_URL",),
}

# The extra that installs each provider's SDK, and the module it imports.
PROVIDER_EXTRAS = {Provider.ANTHROPIC: ("anthropic", "anthropic"), Provider.GOOGLE: ("google", "google.genai")}


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
    if provider in (Provider.OPENAI, Provider.ANTHROPIC, Provider.GOOGLE) and name.strip():
        return ModelSpec(Provider(provider), name.strip())
    raise InvalidInput(
        f"unknown model spec {spec!r}: use openai:<model> (e.g. openai:gpt-4o-mini), anthropic:<model> "
        "(e.g. anthropic:claude-sonnet-4-5), google:<model> (e.g. google:gemini-2.5-flash) or scripted"
    )


def has_extra(provider: Provider) -> bool:
    """The provider's SDK is installed (always, for the built-in ones)."""
    import importlib.util

    if provider not in PROVIDER_EXTRAS:
        return True
    try:
        return importlib.util.find_spec(PROVIDER_EXTRAS[provider][1]) is not None
    except ModuleNotFoundError:
        return False


def configured_providers(settings: Settings) -> list[Provider]:
    """The providers this process is set up to call: a key or a base URL is set for it (the settings'
    for OpenAI, the provider's usual variables for the others) and its SDK is installed."""
    found = []
    for provider, keys in KEY_VARIABLES.items():
        if provider == Provider.OPENAI:
            configured = settings.openai_api_key is not None or settings.openai_base_url is not None
        else:
            configured = any(os.environ.get(name) for name in (*keys, *BASE_URL_VARIABLES[provider]))
        if configured and has_extra(provider):
            found.append(provider)
    return found


def check_extra(provider: Provider) -> None:
    """ConfigError naming the `pip install` that fixes it when the provider's SDK is not installed."""
    from waypoint.errors import ConfigError

    if not has_extra(provider):
        extra = PROVIDER_EXTRAS[provider][0]
        raise ConfigError(f"{provider}: models need the {extra} extra: pip install 'waypoint[{extra}]'")


def model_label(spec: str) -> tuple[str, str]:
    """(provider, model name) for display and spans, whatever the spec: `scripted` -> (scripted, scripted)."""
    provider, _, name = spec.partition(":")
    return provider, name or provider
