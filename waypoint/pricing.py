"""Model prices, for cost budgets: USD per million input and output tokens.

The table is a default, not the truth: providers change prices. Override or
extend it with WAYPOINT_PRICES, e.g. `{"my-model": [0.5, 1.5]}`.
"""

from __future__ import annotations

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


def format_usd(amount: float) -> str:
    """`$0.00001`, `$0.0123`, `$12.50`: small amounts keep their digits, never `$0.0000`."""
    if amount >= 1:
        return f"${amount:,.2f}"
    text = f"{amount:.8f}".rstrip("0").rstrip(".")
    return f"${text if text != '0' or amount == 0 else f'{amount:.2e}'}"


def cost_usd(model: str, usage: Usage, overrides: dict[str, tuple[float, float]] | None = None) -> float:
    """Cost of one call; an unknown model costs 0 (and a cost budget cannot see it)."""
    prices = {**DEFAULT_PRICES, **(overrides or {})}
    name = model_label(model)[1]
    # Providers answer with dated names (gpt-4o-mini-2024-07-18): the longest matching prefix wins.
    matches = [key for key in prices if name == key or name.startswith(key + "-")]
    per_input, per_output = prices[max(matches, key=len)] if matches else (0.0, 0.0)
    return (usage.input_tokens * per_input + usage.output_tokens * per_output) / 1_000_000
