"""The `call_model` activity: load the step's working memory from Postgres, call the model.

The context never travels through Temporal history (it grows with the run); only the
model's answer does. With a `DeltaPublisher` injected, a streaming adapter's text and tool-call
pieces are published while the call runs, tagged with run, step and attempt (waypoint.deltas).

A failed attempt is written to the event log before it is retried, so a
503 storm is visible in Postgres, not only as an attempt counter in Temporal; the rules of
what retries are in `waypoint.retry`.
"""

from __future__ import annotations

import contextlib
import json
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, replace
from typing import Any

from temporalio import activity

from activities.boundary import boundary, heartbeating
from waypoint import working_memory
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.deltas import DeltaPublisher
from waypoint.errors import ConfigError, ModelError, PayloadTooLarge, ScriptError, WaypointError
from waypoint.models import ModelAdapter, ScriptedModel
from waypoint.models.spec import Provider, parse_model_spec
from waypoint.names import Activity
from waypoint.pricing import cost_usd
from waypoint.store import RunStore
from waypoint.telemetry import chat_span
from waypoint.types import CallModelInput, Message, ModelTurn

# Temporal refuses payloads over 2 MB; stay well under it.
MAX_TURN_BYTES = 1_000_000


class ModelActivities:
    def __init__(
        self, store: RunStore, agents: AgentRegistry, settings: Settings, *, deltas: DeltaPublisher | None = None
    ):
        self.store = store
        self.agents = agents
        self.settings = settings
        self.deltas = deltas
        self._openai: object | None = None

    def adapter(self, agent_name: str, spec_text: str) -> ModelAdapter:
        agent = self.agents.get(agent_name)
        spec = parse_model_spec(spec_text)
        if spec.provider == Provider.SCRIPTED:
            if not isinstance(agent.model, ScriptedModel):
                raise ConfigError(
                    f"agent {agent_name!r} has no scripted turns; pick a model with --model openai:<name>"
                )
            return agent.model
        # The openai SDK takes about half a second to import: only workers that call it pay that.
        from waypoint.models.openai import OpenAIChatModel, openai_client

        if self._openai is None:
            self._openai = openai_client(self.settings)
        return OpenAIChatModel(self._openai, spec.name)  # type: ignore[arg-type]

    async def load_messages(self, inp: CallModelInput) -> list[Message]:
        """Working memory for this step (see waypoint.working_memory): the run's parts from the
        store, the recalled episodes, and the user messages sent since, within the agent's budget."""
        parts = await self.store.working_parts(inp.tenant_id, inp.run_id, inp.step)
        parts.recalled = list(inp.recalled)
        parts.user_messages = list(inp.user_messages)
        return working_memory.assemble(parts, self.agents.get(inp.agent).context_tokens).messages

    async def record_failure(self, inp: CallModelInput, error: ModelError, attempt: int) -> None:
        payload = {
            "attempt": attempt,
            "error": str(error),
            "type": type(error).__name__,
            "retryable": error.retryable,
            "retry_in_seconds": error.retry_after.total_seconds() if error.retryable and error.retry_after else None,
            "status": error.status,
        }
        await self.store.record_model_failure(inp.tenant_id, inp.run_id, inp.step, payload, attempt=attempt)

    def _deltas(self, inp: CallModelInput, attempt: int, adapter: ModelAdapter) -> AbstractAsyncContextManager[Any]:
        """Where this attempt's deltas go: nowhere for adapters that do not stream."""
        if self.deltas is None or isinstance(adapter, ScriptedModel):
            return contextlib.nullcontext()
        return self.deltas.attempt(inp.run_id, inp.step, attempt)

    @activity.defn(name=Activity.CALL_MODEL)
    @boundary
    async def call_model(self, inp: CallModelInput) -> ModelTurn:
        adapter = self.adapter(inp.agent, inp.model)
        tools = [t.openai_schema() for t in self.agents.get(inp.agent).tools]
        messages = await self.load_messages(inp)
        attempt = activity.info().attempt
        try:
            async with heartbeating(inp.step):
                with chat_span(
                    inp.model, messages, run_id=inp.run_id, step=inp.step, tenant=inp.tenant_id, attempt=attempt
                ) as chat:
                    async with self._deltas(inp, attempt, adapter) as sink:
                        turn = await adapter.complete(
                            messages, tools, step=inp.step, attempt=attempt, retry=inp.retry, deltas=sink
                        )
                    chat.record(turn)
        except ModelError as error:
            await self.record_failure(inp, error, attempt)
            raise
        except WaypointError:
            raise
        except Exception as exc:
            if isinstance(adapter, ScriptedModel):  # a bug in a script: the same input fails the same way
                raise ScriptError(f"scripted model failed: {type(exc).__name__}: {exc}") from exc
            raise
        turn = replace(turn, cost_usd=cost_usd(turn.model, turn.usage, self.settings.prices), attempt=attempt)
        size = len(json.dumps(asdict(turn)))
        if size > MAX_TURN_BYTES:
            raise PayloadTooLarge(
                f"the model's answer is {size} bytes, over the {MAX_TURN_BYTES}-byte limit for Temporal payloads: "
                "ask for shorter answers, or have a tool store large content and return a reference"
            )
        return turn
