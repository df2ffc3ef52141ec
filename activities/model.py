"""The `call_model` activity: read the step's working memory from Postgres, call the model.

The context never travels through Temporal history (it grows with the run); only the model's
answer does. A failed attempt is written to the event log before it is retried, so a 503 storm
is visible in Postgres, not only as an attempt counter in Temporal; the rules of what retries are
in `waypoint.retry`. With a `DeltaPublisher` injected, a streaming adapter's text and tool-call
pieces are published while the call runs, tagged with run, step and attempt (waypoint.deltas).

With episodic memory (`CallModelInput.memory`) the same activity runs on a worker that holds the
store: it stores the episodes of the steps not stored yet, in batches (`EPISODE_BATCH_STEPS` of them,
beside the model call; sooner when one has left the window, and before it returns when the run answers
or calls a sub-agent, whose run recalls its tree from its first step), and recalls memories for this
step. Memory never fails a step: a store that is away is logged, the step goes on without it, and the
next call stores what this one could not (`ModelTurn.remembered_through` tells record_step how far
memory got; the runs row, not the worker, knows what is stored, so a crash loses no episode).

Where one process holds the store and serves the run's own task queue as well (`run_worker`: the
default single worker), its main worker's model calls do memory themselves, and the workflow
schedules them there, where Temporal starts them eagerly. A call with memory that reaches a worker
without the store (another process owns it) raises MemoryElsewhere before anything runs, and the
workflow sends it to the memory task queue.

A call whose tree has a budget pool, or whose tenant a daily budget, reserves from them once its
context is assembled and before it goes out, is asked for no more output than they hold for it, and
settles what it spent after (activities/budget.py); one they cannot hold returns a wait or a refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, replace
from typing import Any

from temporalio import activity

from waypoint import retry, telemetry, working_memory
from waypoint.activities.boundary import boundary, heartbeating
from waypoint.activities.budget import Budgets, Held
from waypoint.activities.capacity import Capacity
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.deltas import DeltaPublisher
from waypoint.errors import ConfigError, MemoryElsewhere, ModelError, PayloadTooLarge
from waypoint.mcp import MCPHub
from waypoint.memory import EpisodicStore, RecallScope
from waypoint.memory.steps import (
    pending_episodes,
    recall_query,
    recall_scope,
    recall_search,
    recalled_memories,
    saved_memory,
)
from waypoint.models import ModelAdapter, ScriptedModel
from waypoint.models.spec import ModelSpec, Provider, check_extra, configured_providers, parse_model_spec
from waypoint.names import LOST_ATTEMPT, Activity
from waypoint.pricing import cost_usd
from waypoint.store import RunStore
from waypoint.store.hashing import hashed_json, text_digest
from waypoint.store.limits import Lease
from waypoint.store.working import EPISODE_BATCH_STEPS, ModelContext
from waypoint.telemetry import chat_span
from waypoint.tokens import text_tokens
from waypoint.typed_answers import check_turn
from waypoint.types import CallModelInput, CallRecord, CapacityWait, Memory, ModelTurn, RecalledRef
from waypoint.versions import AgentVersion, agent_tool_schemas, offered

log = logging.getLogger("waypoint.memory")

# Temporal refuses payloads over 2 MB; stay well under it.
MAX_TURN_BYTES = 1_000_000
# The model name `warm` builds each provider's adapter with: it makes the client, never a request.
WARM_MODEL = "warm-up"


def call_record(
    context: ModelContext, assembled: working_memory.Assembled, recalled_step: int | None = None
) -> CallRecord:
    """What the call received, by reference (see CallRecord); `recalled_step`: the step whose call
    recalled its episodes (with memory)."""
    recalled = assembled.recalled
    return CallRecord(
        compaction_id=context.compaction_id,
        recalled=[RecalledRef(m.run_id, m.step, m.kind, round(m.score, 4), text_digest(m.text)) for m in recalled],
        recalled_text=working_memory.recalled_message(recalled)["content"] if recalled else None,
        dropped_turns=assembled.dropped_turns,
        dropped_recalled=assembled.dropped_recalled,
        messages=len(assembled.messages),
        tokens=assembled.tokens,
        sha256=hashed_json(assembled.messages)[0],
        window_key=assembled.window_key if recalled_step is not None else None,
        recalled_step=recalled_step,
    )


class ModelActivities:
    def __init__(
        self,
        store: RunStore,
        agents: AgentRegistry,
        settings: Settings,
        *,
        memory: EpisodicStore | None = None,
        mcp: MCPHub | None = None,
        deltas: DeltaPublisher | None = None,
    ):
        self.store = store
        self.agents = agents
        self.settings = settings
        self.memory = memory  # the episodic store, on the worker that holds it
        self.mcp = mcp or MCPHub(store)
        self.deltas = deltas
        self._openai: Any = None
        # SDK clients of the other providers, one per (provider, key variable), made by their adapters.
        self._clients: dict[Any, Any] = {}
        self._scopes: dict[str, RecallScope] = {}
        # Agent versions: each run's fingerprint, each fingerprint's tool schemas (see version_tools).
        self._fingerprints: dict[str, str | None] = {}
        self._versions: dict[str, AgentVersion] = {}
        self.capacity = Capacity(store, settings)
        # Providers whose SDK this worker has imported (warm, or a call that did it off the loop).
        self._warmed: set[Provider] = {Provider.SCRIPTED}
        self.budgets = Budgets(store, settings)

    def adapter(self, agent_name: str, spec_text: str) -> ModelAdapter:
        agent = self.agents.get(agent_name)
        spec = parse_model_spec(spec_text)
        if spec.provider == Provider.SCRIPTED:
            if not isinstance(agent.model, ScriptedModel):
                raise ConfigError(
                    f"agent {agent_name!r} has no scripted turns; pick a model with --model openai:<name>"
                )
            return agent.model
        return self._sdk_adapter(spec, agent.provider_key_env)

    def _sdk_adapter(self, spec: ModelSpec, key_env: str | None) -> ModelAdapter:
        """The adapter of a provider's model, through its SDK (imported on first need), with the key
        from `key_env` (an agent's own variable) or the provider's usual ones."""
        if spec.provider != Provider.OPENAI:
            # Each SDK is imported by the workers that call it only; a missing extra names its pip install.
            check_extra(spec.provider)
            if spec.provider == Provider.ANTHROPIC:
                from waypoint.models.anthropic import make_adapter
            else:
                from waypoint.models.google import make_adapter
            return make_adapter(self.settings, spec.name, key_env, self._clients)
        # The openai SDK takes about half a second to import: only workers that call it pay that.
        from waypoint.models.openai import OpenAIChatModel, openai_client

        if self._openai is None:
            self._openai = openai_client(self.settings)
        return OpenAIChatModel(self._openai, spec.name)

    async def recall(self, inp: CallModelInput, context: ModelContext) -> list[Memory] | None:
        """This step's memories: by the task and the newest step's account, as the run's lineage lets
        it see them (`recall_scope`), never its own steps still in the window. Best-effort: a store
        that fails gives None (no memories, and none for the next call to hold)."""
        assert self.memory is not None
        last = inp.step - 1
        query = recall_query(context.task, last, context.last)
        scope = await self.scope(inp.tenant_id, inp.run_id)
        began = time.perf_counter()
        try:
            with telemetry.span(
                "qdrant search", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.step, tenant=inp.tenant_id
            ):
                hits = await recall_search(self.memory, inp.tenant_id, query, inp.recall_k * 2, inp.agent, scope)
        except Exception as exc:  # memory never fails a step
            log.warning("recall failed: run=%s step=%s: %s: %s", inp.run_id, inp.step, type(exc).__name__, exc)
            return None
        telemetry.record_recall_latency(time.perf_counter() - began, tenant=inp.tenant_id)
        return recalled_memories(hits, scope, context.window_start, inp.recall_k)

    async def scope(self, tenant_id: str, run_id: str) -> RecallScope:
        """What the run may recall (cached: a run's lineage never changes)."""
        if run_id not in self._scopes:
            scope = recall_scope(await self.store.working.fork_chain(tenant_id, run_id))
            if len(self._scopes) > 1024:
                self._scopes.clear()
            self._scopes[run_id] = scope
        return self._scopes[run_id]

    async def remember(self, inp: CallModelInput, context: ModelContext) -> int | None:
        """Store the episodes of every step not stored yet; the newest step stored, or None."""
        if not context.pending:
            return None
        assert self.memory is not None
        episodes = pending_episodes(inp.tenant_id, inp.agent, inp.run_id, context.pending, context.root_run_id)
        try:
            if episodes:
                with telemetry.span("qdrant upsert", {"db.system": "qdrant"}, run_id=inp.run_id, step=inp.step - 1):
                    await self.memory.upsert(episodes)
        except Exception as exc:  # memory never fails a step: the next call stores these
            log.warning("episodes not stored: run=%s step=%s: %s: %s", inp.run_id, inp.step, type(exc).__name__, exc)
            return None
        return max(context.pending)

    @staticmethod
    def flush_now(turn: ModelTurn, sub_agents: Collection[str]) -> bool:
        """Whether the steps whose episodes wait for their batch are stored before this call returns: when
        the run ends (an answer, no tool call: a sub-agent run does not store on its way out) or hands work
        to a sub-agent run, which recalls its tree's episodes from its first step on."""
        return not turn.tool_calls or any(call.name in sub_agents for call in turn.tool_calls)

    async def remember_deferred(self, inp: CallModelInput, context: ModelContext, steps: tuple[int, int]) -> int | None:
        """Store the episodes of the steps `steps` (first, through), read now; the newest step stored, or None."""
        try:
            pending = await self.store.working.deferred_steps(inp.run_id, *steps)
        except Exception as exc:  # memory never fails a step: the run's end or the next pass stores these
            log.warning("episodes not read: run=%s step=%s: %s: %s", inp.run_id, inp.step, type(exc).__name__, exc)
            return None
        return await self.remember(inp, replace(context, pending=pending))

    async def record_failure(
        self, inp: CallModelInput, error: ModelError, attempt: int, *, latency_ms: int | None = None
    ) -> None:
        payload = {
            "attempt": attempt,
            "model": inp.model,
            "error": str(error),
            "type": type(error).__name__,
            "retryable": error.retryable,
            "retry_in_seconds": error.retry_after.total_seconds() if error.retryable and error.retry_after else None,
            "status": error.status,
        }
        if latency_ms is not None:
            payload["latency_ms"] = latency_ms
        await self.store.log.record_model_failure(inp.tenant_id, inp.run_id, inp.step, payload, attempt=attempt)

    async def tool_schemas(self, inp: CallModelInput) -> list[dict[str, Any]]:
        """The tools of the agent version the run started with (its own tools, its sub-agents, the
        typed-answer tool), with the MCP tools the run recorded when it started: the same schemas for
        the whole run, whatever a later deploy or the servers list now. A run from before versions
        (no fingerprint) is offered the worker's agent as it is."""
        version = await self.run_version(inp.tenant_id, inp.run_id)
        if version is None:
            agent = self.agents.get(inp.agent)
            tools, with_mcp = agent_tool_schemas(agent, self.agents), bool(agent.mcp)
        else:
            tools, with_mcp = version.tools, bool(version.mcp_tools)
        mcp = []
        if with_mcp:
            mcp = [t.openai_schema() for t in (await self.mcp.recorded(inp.tenant_id, inp.run_id)).values()]
        return offered(tools, mcp)

    async def run_version(self, tenant_id: str, run_id: str) -> AgentVersion | None:
        """The agent version the run started with, None for a run from before versions. Cached: a
        run's fingerprint never changes, and a version is content-addressed, so it never changes
        either (one read per run and one per version, per worker process)."""
        if run_id not in self._fingerprints:
            if len(self._fingerprints) > 4096:
                self._fingerprints.clear()
            self._fingerprints[run_id] = await self.store.versions.run_fingerprint(tenant_id, run_id)
        fingerprint = self._fingerprints[run_id]
        if fingerprint is None:
            return None
        if fingerprint not in self._versions:
            if len(self._versions) > 1024:
                self._versions.clear()
            self._versions[fingerprint] = await self.store.versions.agent_version(tenant_id, fingerprint)
        return self._versions[fingerprint]

    def _holding(self, lease: Lease | None) -> AbstractAsyncContextManager[None]:
        return self.capacity.holding(lease) if lease is not None else contextlib.nullcontext()

    def _deltas(self, inp: CallModelInput, attempt: int, adapter: ModelAdapter) -> AbstractAsyncContextManager[Any]:
        """Where this attempt's deltas go: nowhere for adapters that do not stream."""
        if self.deltas is None or isinstance(adapter, ScriptedModel):
            return contextlib.nullcontext()
        return self.deltas.attempt(inp.run_id, inp.step, attempt)

    def warm(self) -> None:
        """Import the SDK of every provider this worker may call and make its client, at worker start:
        those the agents name (with each agent's own key variable) and every one whose key or base URL
        is set on the worker (`configured_providers`: a run's own `--model` may name it).

        The first call after a worker starts must not do it: an SDK import holds the event loop
        for half a second on an idle machine and seconds on a loaded one, long enough for the
        attempt to miss its heartbeat timeout and be made twice (billed twice by the provider).
        A provider this worker cannot call (no key, no extra) is left for the call to name."""
        wanted: dict[Provider, set[str | None]] = {p: {None} for p in configured_providers(self.settings)}
        for agent in self.agents:
            if isinstance(agent.model, ScriptedModel):
                continue
            for spec in agent.models:
                wanted.setdefault(parse_model_spec(spec).provider, set()).add(agent.provider_key_env)
        for provider, key_variables in wanted.items():
            self._warmed.add(provider)
            for key_env in key_variables:
                with contextlib.suppress(ConfigError):
                    self._sdk_adapter(ModelSpec(provider, WARM_MODEL), key_env)

    @activity.defn(name=Activity.CALL_MODEL)
    @boundary
    async def call_model(self, inp: CallModelInput) -> ModelTurn:
        # Heartbeats start with the attempt, not with the request: reading the context, recalling
        # and waiting for capacity all count against the heartbeat timeout.
        async with heartbeating(inp.step):
            attempt = activity.info().attempt
            if attempt > 1:
                await self.note_lost_attempt(inp, attempt - 1)
            return await self._call_model(inp)

    async def note_lost_attempt(self, inp: CallModelInput, attempt: int) -> None:
        """Log attempt `attempt` as `model_attempt_failed` if it ended without saying why: its worker
        died or it missed its heartbeat timeout, so the provider may have answered it (and billed
        it). One that failed in its own words logged itself already (`record_failure`)."""
        payload = {
            "attempt": attempt,
            "model": inp.model,
            "error": (
                f"attempt {attempt} ended without an answer: its worker stopped, or it sent no heartbeat "
                f"within {retry.HEARTBEAT_TIMEOUT.total_seconds():g} s"
            ),
            "type": LOST_ATTEMPT,
            "retryable": True,
            "retry_in_seconds": None,
            "status": None,
        }
        await self.store.log.record_lost_model_attempt(inp.tenant_id, inp.run_id, inp.step, payload, attempt=attempt)

    async def _call_model(self, inp: CallModelInput) -> ModelTurn:
        if inp.memory and self.memory is None:
            raise MemoryElsewhere(
                f"this worker does not hold episodic memory: step {inp.step}'s model call goes to the memory task queue"
            )
        provider = parse_model_spec(inp.model).provider
        if provider in self._warmed:
            adapter = self.adapter(inp.agent, inp.model)
        else:
            # A provider no agent names (a run's own --model): its SDK's import, seconds on a loaded
            # machine, runs off the event loop, so this attempt keeps heartbeating meanwhile.
            adapter = await asyncio.to_thread(self.adapter, inp.agent, inp.model)
            self._warmed.add(provider)
        agent = self.agents.get(inp.agent)
        tools = await self.tool_schemas(inp)
        with_memory = inp.memory and self.memory is not None
        capacity = self.capacity if self.capacity.on(agent) and not isinstance(adapter, ScriptedModel) else None
        lease: Lease | None = None
        held: Held | None = None  # the call's reservation in its budgets (its tree's pool, its tenant's day)
        if capacity is not None and not capacity.counts_tokens(inp, agent):
            # Asked before anything is read: a call that must wait costs one transaction, not a context.
            taken = await capacity.take(inp, agent, 0)
            if isinstance(taken, CapacityWait):  # the call does not go out: the workflow waits, not this worker
                return ModelTurn(model=inp.model, wait=taken)
            lease = taken
        try:
            context = await self.store.working.model_context(
                inp.tenant_id, inp.run_id, inp.step, memory=with_memory, batch=EPISODE_BATCH_STEPS
            )
            # A batch of episodes due is written beside the recall and the model call, off the step's path.
            remembering = asyncio.create_task(self.remember(inp, context)) if context.pending else None
            parts = replace(context.parts, recalled=list(inp.recalled), user_messages=list(inp.user_messages))
            recalling = with_memory and inp.recall_k > 0
            recalled_step: int | None = None
            fresh = saved_memory(context.last, agent.agent_names)  # what the last step saved, recalled now
            held_recall = context.held if recalling and not fresh else None
            holding = working_memory.assemble_held(parts, agent.context_tokens, held_recall, inp.step)
            if held_recall is not None and holding is not None:
                # The window has not moved: the previous call's episodes stay, and with them the prefix.
                assembled, recalled_step = holding, held_recall.step
            else:
                found = await self.recall(inp, context) if recalling else None
                if found is not None:
                    parts.recalled, recalled_step = found, inp.step
                assembled = working_memory.assemble(parts, agent.context_tokens)
            if capacity is not None and lease is None:  # a tokens-a-minute limit needs the call's size
                taken = await capacity.take(inp, agent, assembled.tokens)
                if isinstance(taken, CapacityWait):
                    if remembering is not None:
                        await remembering
                    return ModelTurn(model=inp.model, wait=taken)
                lease = taken
            # The budgets last: a call that waits for capacity holds no reservation meanwhile.
            if self.budgets.on(inp):
                reserved = await self.budgets.reserve(inp, assembled.tokens + text_tokens(json.dumps(tools)))
                if isinstance(reserved, ModelTurn):  # a wait, or a budget spent: the call does not go out
                    if capacity is not None and lease is not None:
                        await capacity.give_back(lease, None)
                    if remembering is not None:
                        await remembering
                    return reserved
                held = reserved
        except BaseException:
            if capacity is not None and lease is not None:
                await capacity.give_back(lease, None)
            raise
        messages = assembled.messages
        attempt = activity.info().attempt
        record = call_record(context, assembled, recalled_step)
        # The recalled message is kept in Postgres while the model thinks, not carried in the result; a
        # message held from the previous call is there already (its text came from that row).
        digest = text_digest(record.recalled_text) if record.recalled_text else None
        keeping = (
            asyncio.create_task(self.store.working.keep_recalled_text(inp.tenant_id, inp.run_id, record.recalled_text))
            if record.recalled_text and digest != context.kept_recalled
            else None
        )
        turn: ModelTurn | None = None
        called = time.perf_counter()  # a failed attempt's event says how long it took (the waterfall's bar)
        try:
            async with self._holding(lease):
                with chat_span(
                    inp.model,
                    messages,
                    run_id=inp.run_id,
                    step=inp.step,
                    tenant=inp.tenant_id,
                    attempt=attempt,
                    failed_over_from=inp.failed_over_from,
                ) as chat:
                    bound: dict[str, Any] = {}
                    if held is not None:  # the model is asked for no more than the budgets hold for it
                        bound = {"max_tokens": held.max_tokens}
                        pool = held.reservation.pool
                        chat.budget(
                            pool=inp.budget_pool,
                            reserved=held.reservation.tokens,
                            reserved_cost_usd=held.reservation.cost_usd,
                            max_tokens=held.max_tokens,
                            used=pool.used_tokens if pool is not None else None,
                            left=pool.left_tokens - held.reservation.tokens
                            if pool is not None and pool.left_tokens is not None
                            else None,
                        )
                    async with self._deltas(inp, attempt, adapter) as sink:
                        turn = await adapter.complete(
                            messages, tools, step=inp.step, attempt=attempt, retry=inp.retry, deltas=sink, **bound
                        )
                    chat.record(turn)
        except ModelError as error:
            await self.record_failure(inp, error, attempt, latency_ms=round((time.perf_counter() - called) * 1000))
            if capacity is not None:
                await capacity.outcome(capacity.key(inp, agent), error)
            error.details.setdefault("attempt", attempt)  # how many attempts a failover came after
            raise
        finally:
            if capacity is not None and lease is not None:
                await capacity.give_back(lease, turn)
            if held is not None and turn is None:  # failed or cancelled: its reservation goes back
                await self.budgets.settle(held, None)
            remembered = await remembering if remembering is not None else None
            kept = await keeping if keeping is not None else digest
        if turn is not None and context.deferred is not None and self.flush_now(turn, agent.agent_names):
            remembered = await self.remember_deferred(inp, context, context.deferred)
        turn = replace(
            turn,
            cost_usd=cost_usd(turn.model, turn.usage, self.settings.prices),
            attempt=attempt,
            spec=inp.model,
            request=replace(record, recalled_text=None, recalled_sha256=kept),
            remembered_through=remembered,
        )
        if held is not None:  # what it spent, in place of what it held
            await self.budgets.settle(held, turn)
        if capacity is not None:
            await capacity.outcome(capacity.key(inp, agent), None)
        if agent.output_type is not None and agent.output_schema is not None:
            turn = replace(turn, answer=check_turn(agent.output_type, agent.output_schema, turn))
        size = len(json.dumps(asdict(turn)))
        if size > MAX_TURN_BYTES:
            raise PayloadTooLarge(
                f"the model's answer is {size} bytes, over the {MAX_TURN_BYTES}-byte limit for Temporal payloads: "
                "ask for shorter answers, or have a tool store large content and return a reference"
            )
        return turn
