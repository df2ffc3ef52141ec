"""Model prices, for cost budgets: USD per million input and output tokens, and per million
input tokens read from the provider's prompt cache and written to it.

The table is a default, not the truth: providers change prices. Override or
extend it with WAYPOINT_PRICES, e.g. `{"my-model": [0.5, 1.5]}`, or with the cache prices too:
`{"my-model": [0.5, 1.5, 0.05, 0.625]}` (input, output, cache read, cache write).

Cached tokens are priced apart from the rest of the input (`Usage.input_tokens` counts them all).
Without a cache price for a model, the provider's usual share of its input price applies
(`CACHE_SHARES`: OpenAI reads at half price and writes at the input price, Anthropic reads at a
tenth and writes at 1.25 times, Gemini reads at a quarter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from waypoint.models.spec import model_label
from waypoint.types import Usage

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "o4-mini": (1.10, 4.40),
    # Gemini (Developer API, standard tier, prompts up to 200k tokens; longer prompts cost more on Pro)
    "gemini-3.1-pro": (2.00, 12.00),
    "gemini-3-pro": (2.00, 12.00),
    "gemini-3-flash": (0.50, 3.00),
    "gemini-3.1-flash-lite": (0.25, 1.50),
    "gemini-2.5-pro": (1.25, 10.00),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
    "gemini-2.0-flash-lite": (0.075, 0.30),
    # Anthropic (platform.claude.com/docs/en/about-claude/pricing). Cached input counts at the input
    # price here: reads cost less (0.1x), 5-minute writes more (1.25x).
    "claude-fable-5": (10.00, 50.00),
    "claude-fable-5-1": (10.00, 50.00),
    "claude-mythos-5": (10.00, 50.00),
    "claude-mythos-5-1": (10.00, 50.00),
    "claude-opus-5": (5.00, 25.00),
    "claude-opus-4-8": (5.00, 25.00),
    "claude-opus-4-7": (5.00, 25.00),
    "claude-opus-4-6": (5.00, 25.00),
    "claude-opus-4-5": (5.00, 25.00),
    "claude-opus-4-1": (15.00, 75.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-sonnet-4-6": (3.00, 15.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-haiku": (0.25, 1.25),
    "scripted": (0.0, 0.0),
}

# USD per million cached input tokens (read, written), where the provider documents them.
DEFAULT_CACHE_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (1.25, 2.50),
    "gpt-4o-mini": (0.075, 0.15),
    "gpt-4.1": (0.50, 2.00),
    "gpt-4.1-mini": (0.10, 0.40),
    "gpt-4.1-nano": (0.025, 0.10),
    "o4-mini": (0.275, 1.10),
}

# (model name prefix, cache read, cache write) as shares of the input price; the first match wins.
CACHE_SHARES: tuple[tuple[str, float, float], ...] = (
    ("claude", 0.10, 1.25),
    ("gemini", 0.25, 1.00),
    ("", 0.50, 1.00),  # OpenAI and the rest
)


def format_usd(amount: float) -> str:
    """`$0.00001`, `$0.0123`, `$12.50`: small amounts keep their digits, never `$0.0000`."""
    if amount >= 1:
        return f"${amount:,.2f}"
    text = f"{amount:.8f}".rstrip("0").rstrip(".")
    return f"${text if text != '0' or amount == 0 else f'{amount:.2e}'}"


def _key(name: str, table: dict[str, Any]) -> str | None:
    # Providers answer with dated names (gpt-4o-mini-2024-07-18): the longest matching prefix wins.
    matches = [key for key in table if name == key or name.startswith(key + "-")]
    return max(matches, key=len) if matches else None


def prices_of(model: str, overrides: Mapping[str, Sequence[float]] | None = None) -> tuple[float, float, float, float]:
    """USD per million (input, output, cache read, cache write) tokens of a model; 0 when unknown."""
    name = model_label(model)[1]
    table: dict[str, Sequence[float]] = {**DEFAULT_PRICES, **(overrides or {})}
    key = _key(name, table)
    found = list(table[key]) if key else [0.0, 0.0]
    per_input, per_output = found[0], found[1]
    if len(found) >= 4:
        return per_input, per_output, found[2], found[3]
    cache_key = _key(name, DEFAULT_CACHE_PRICES)
    if cache_key is not None and (key is None or key not in (overrides or {})):
        return per_input, per_output, *DEFAULT_CACHE_PRICES[cache_key]
    read, write = next((r, w) for prefix, r, w in CACHE_SHARES if name.startswith(prefix))
    return per_input, per_output, per_input * read, per_input * write


def cost_usd(model: str, usage: Usage, overrides: Mapping[str, Sequence[float]] | None = None) -> float:
    """Cost of one call; an unknown model costs 0 (and a cost budget cannot see it). Input tokens
    read from or written to the prompt cache are priced at the cache prices, the rest at the input price."""
    per_input, per_output, per_read, per_write = prices_of(model, overrides)
    read, write = usage.cache_read_tokens, usage.cache_write_tokens
    plain = max(usage.input_tokens - read - write, 0)
    return (plain * per_input + read * per_read + write * per_write + usage.output_tokens * per_output) / 1_000_000
