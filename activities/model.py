"""The `call_model` activity: load the step's context from Postgres, call the model.

The context never travels through Temporal history (it grows with the run);
only the model's answer does.

Errors become ApplicationErrors the retry policy understands: 408/409/429/5xx,
timeouts and connection errors are retryable, after the provider's Retry-After
or an exponential backoff with jitter; other 4xx answers are non-retryable,
because the same request cannot succeed later. Every failed attempt is written
to the event log, so a 503 storm is visible in Postgres, not only as an
attempt counter in Temporal.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, replace
from datetime import timedelta

import openai
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.checkpoints import append_events
from activities.heartbeat import heartbeating
from waypoint import working_memory
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.errors import ConfigError, WaypointError
from waypoint.models import ModelAdapter, OpenAIChatModel, ScriptedModel
from waypoint.pricing import cost_usd
from waypoint.retry import backoff_seconds
from waypoint.store import context
from waypoint.store.compactions import latest_compaction
from waypoint.store.schema import checkpoints, runs
from waypoint.telemetry import chat_span
from waypoint.types import CALL_MODEL, CallModelInput, ModelTurn, RetrySpec

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# Temporal refuses payloads over 2 MB; stay well under it.
MAX_TURN_BYTES = 1_000_000


def retry_after(headers: object) -> timedelta | None:
    """Delay asked for by `retry-after-ms` or `retry-after` (seconds), if any."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = get(name)
        if value:
            try:
                return timedelta(seconds=float(value) * scale)
            except ValueError:
                continue
    return None


def model_error(exc: Exception, spec: RetrySpec, attempt: int) -> ApplicationError:
    """Translate an `openai` SDK error into a retryable or non-retryable ApplicationError."""
    backoff = timedelta(seconds=backoff_seconds(spec, attempt, random.uniform(0.5, 1.0)))
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status not in RETRYABLE_STATUS and status < 500:
            return ApplicationError(
                f"model endpoint answered HTTP {status}: {exc.message}",
                {"status": status},
                type="ModelRequestRejected",
                non_retryable=True,
            )
        return ApplicationError(
            f"model endpoint answered HTTP {status}: {exc.message}",
            {"status": status},
            type=f"ModelHTTP{status}",
            next_retry_delay=retry_after(exc.response.headers) or backoff,
        )
    if isinstance(exc, openai.APITimeoutError):
        return ApplicationError(f"model call timed out: {exc}", type="ModelTimeout", next_retry_delay=backoff)
    if isinstance(exc, openai.APIConnectionError):
        return ApplicationError(
            f"cannot reach the model endpoint: {exc}", type="ModelConnectionError", next_retry_delay=backoff
        )
    return ApplicationError(
        f"model call failed: {type(exc).__name__}: {exc}", type="ModelError", next_retry_delay=backoff
    )


class ModelActivities:
    def __init__(self, engine: AsyncEngine, agents: AgentRegistry, settings: Settings):
        self.engine = engine
        self.agents = agents
        self.settings = settings
        self._openai: openai.AsyncOpenAI | None = None

    def _openai_client(self) -> openai.AsyncOpenAI:
        if self._openai is None:
            key = self.settings.openai_api_key
            if key is None:
                raise ConfigError("OPENAI_API_KEY is not set on the worker: export it, or use a scripted model")
            self._openai = openai.AsyncOpenAI(
                api_key=key.get_secret_value(),
                base_url=self.settings.openai_base_url,
                max_retries=0,  # Temporal owns retries
                timeout=self.settings.model_timeout_seconds,
            )
        return self._openai

    def adapter(self, agent_name: str, spec: str) -> ModelAdapter:
        agent = self.agents.get(agent_name)
        if spec == "scripted":
            if not isinstance(agent.model, ScriptedModel):
                raise ConfigError(
                    f"agent {agent_name!r} has no scripted turns; pick a model with --model openai:<name>"
                )
            return agent.model
        provider, _, name = spec.partition(":")
        if provider == "openai" and name:
            return OpenAIChatModel(self._openai_client(), name)
        raise ConfigError(f"unknown model spec {spec!r}: use openai:<model> or scripted")

    async def load_messages(self, inp: CallModelInput) -> list[dict]:
        """Working memory for this step (see waypoint.working_memory): the previous checkpoint's
        window and pinned decisions, rendered from the events they reference, the run's latest
        compaction summary in place of the turns it covers, the recalled episodes, and the user
        messages sent since, within the agent's token budget."""
        async with self.engine.connect() as conn:
            state = await conn.scalar(
                select(checkpoints.c.state)
                .join(runs, runs.c.run_id == checkpoints.c.run_id)
                .where(
                    checkpoints.c.run_id == inp.run_id,
                    checkpoints.c.step == inp.step - 1,
                    runs.c.tenant_id == inp.tenant_id,
                )
            )
            if state is None:
                raise ApplicationError(
                    f"run {inp.run_id} has no checkpoint for step {inp.step - 1}", type="NotFound", non_retryable=True
                )
            segments = state["segments"]
            groups, pinned = await context.render_parts(conn, segments, state.get("pinned", []))
            compaction = await latest_compaction(conn, inp.run_id)
        turns = list(zip(segments[1:], groups[1:], strict=True))
        if compaction is not None:  # the summary stands for the turns it covers
            turns = [(seg, g) for seg, g in turns if seg[0] != inp.run_id or seg[2] > compaction["last_seq"]]
        parts = working_memory.Parts(
            head=groups[0] if groups else [],
            pinned=pinned,
            summary=compaction["summary"] if compaction else None,
            recalled=list(inp.recalled),
            turns=[g for _, g in turns],
            user_messages=list(inp.user_messages),
        )
        return working_memory.assemble(parts, self.agents.get(inp.agent).context_tokens).messages

    async def record_failure(self, inp: CallModelInput, error: ApplicationError) -> None:
        delay = error.next_retry_delay.total_seconds() if error.next_retry_delay else None
        payload = {
            "attempt": activity.info().attempt,
            "error": error.message,
            "type": error.type,
            "retryable": not error.non_retryable,
            "retry_in_seconds": delay,
            "status": (error.details or [{}])[0].get("status") if error.details else None,
        }
        async with self.engine.begin() as conn:
            await append_events(conn, inp.run_id, [(inp.step, "model_attempt_failed", payload)])

    @activity.defn(name=CALL_MODEL)
    async def call_model(self, inp: CallModelInput) -> ModelTurn:
        try:
            adapter = self.adapter(inp.agent, inp.model)
            tools = [t.openai_schema() for t in self.agents.get(inp.agent).tools]
        except WaypointError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
        messages = await self.load_messages(inp)
        attempt = activity.info().attempt
        try:
            async with heartbeating(inp.step):
                with chat_span(
                    inp.model, messages, run_id=inp.run_id, step=inp.step, tenant=inp.tenant_id, attempt=attempt
                ) as chat:
                    turn = await adapter.complete(messages, tools, step=inp.step)
                    chat.record(turn)
        except openai.OpenAIError as exc:
            error = model_error(exc, inp.retry, attempt)
            await self.record_failure(inp, error)
            raise error from exc
        except Exception as exc:
            if isinstance(adapter, ScriptedModel):  # a bug in a script: the same input fails the same way
                raise ApplicationError(
                    f"scripted model failed: {type(exc).__name__}: {exc}", type="ScriptError", non_retryable=True
                ) from exc
            raise
        turn = replace(turn, cost_usd=cost_usd(turn.model, turn.usage, self.settings.prices), attempt=attempt)
        size = len(json.dumps(asdict(turn)))
        if size > MAX_TURN_BYTES:
            raise ApplicationError(
                f"the model's answer is {size} bytes, over the {MAX_TURN_BYTES}-byte limit for Temporal payloads: "
                "ask for shorter answers, or have a tool store large content and return a reference",
                type="PayloadTooLarge",
                non_retryable=True,
            )
        return turn
