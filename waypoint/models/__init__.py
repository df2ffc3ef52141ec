"""Model adapters: the one seam between an agent and a language model.

A model spec names the adapter (`waypoint.models.spec`): `openai:<model>` for any
OpenAI-compatible endpoint (`waypoint.models.openai`, which imports the `openai` SDK),
`scripted` for the agent's own canned turns (demos, tests, offline). The provider adapters
(OpenAI, Anthropic, Gemini) fill in one template, `waypoint.models._base.StreamingAdapter`: it
owns `complete()` and its failure ladder, they open and join their SDK's stream. Messages use the
chat-completions shape, which is also how events render into working memory.
"""

from __future__ import annotations

from typing import Any, Protocol

from waypoint.deltas import DeltaSink
from waypoint.models.scripted import ScriptedModel, ScriptedTurn, TurnSource
from waypoint.models.spec import ModelSpec, parse_model_spec
from waypoint.types import Message, ModelTurn, RetrySpec


class ModelAdapter(Protocol):
    name: str

    async def complete(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        *,
        step: int | None = None,
        attempt: int = 1,
        retry: RetrySpec | None = None,
        deltas: DeltaSink | None = None,
        max_tokens: int | None = None,
    ) -> ModelTurn:
        """One model call. A failure raises a `waypoint.errors.ModelError` that says whether it may
        be retried and after how long. A streaming adapter hands each piece of the answer to
        `deltas` as it arrives; others may ignore it. `max_tokens`: the most the answer may take (what
        the run's budgets hold for it), sent to the provider; None leaves the provider's own."""
        ...


__all__ = ["ModelAdapter", "ModelSpec", "ScriptedModel", "ScriptedTurn", "TurnSource", "parse_model_spec"]
