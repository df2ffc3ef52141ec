"""Time travel: a fork goes on from a run's state at a step, a rerun runs it again from there with
another model, agent or instructions, a batch reruns many and compares each. Both start through
`_start_from`: the source and its step are checked once, and the new run starts as any does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from waypoint.access import Action
from waypoint.checks import (
    check_budget,
    check_choice,
    check_count,
    check_idempotency_key,
    check_instructions,
    check_name,
    check_priority,
    check_seq,
    check_text,
    parse_selection,
)
from waypoint.client._catalog import Catalog
from waypoint.client._live import Live
from waypoint.client._scope import Scope
from waypoint.client._starts import StartedRun, Starts, assistant_fields
from waypoint.client._webhooks import Webhooks
from waypoint.errors import InvalidInput, NotFound, WaypointError
from waypoint.names import LineageKind, MemoryView, RunStatus, ToolMode
from waypoint.store import RunStore
from waypoint.store.rows import BatchItem, BatchReport, RunRow
from waypoint.types import Budget, ForkOrigin, RunInput


class Travel:
    def __init__(self, store: RunStore, scope: Scope, catalog: Catalog, starts: Starts, webhooks: Webhooks, live: Live):
        self._store = store
        self._scope = scope
        self._catalog = catalog
        self._starts = starts
        self._webhooks = webhooks
        self._live = live

    async def _start_from(
        self,
        run_id: str,
        step: int,
        input_of: Callable[[RunRow, str], RunInput],
        *,
        tenant_id: str | None,
        new_run_id: str | None,
        idempotency_key: str | None,
        checked: tuple[str, str | None, str | None, str | None, int | None],
    ) -> StartedRun:
        """Start a new run from `run_id`'s state at `step`: what every start from a run checks (the
        run and the step exist and are the tenant's; the agent and model can start), then the input
        `input_of(source row, tenant)` makes, started as any run is. `checked`: the start's (memory,
        webhook, instructions, model, priority), each checked before anything is read."""
        memory, webhook, instructions, model, priority = checked
        check_choice("memory", memory, MemoryView)
        self._webhooks.check_url(webhook)
        check_instructions(instructions)
        check_seq("the step", step)
        check_name("the model", model)
        check_priority(priority)
        check_idempotency_key(idempotency_key)
        tenant = self._scope.scoped(tenant_id, run_id, new_run_id)
        await self._store.owner_of_step(tenant, run_id, step)  # the run and the step exist
        source = await self._store.get_run(tenant, run_id)
        inp = input_of(source, tenant)
        await self._catalog.check_start(inp.agent, inp.model or (source.model if inp.agent == source.agent else None))
        return await self._starts.launch(new_run_id, inp, idempotency_key)

    async def fork(
        self,
        run_id: str,
        step: int,
        *,
        message: str | None = None,
        model: str | None = None,
        memory: str = MemoryView.THEN,
        tenant_id: str | None = None,
        new_run_id: str | None = None,
        priority: int | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
        budget: Budget | None = None,
        instructions: str | None = None,
        assistant: tuple[str, int] | None = None,
        message_only: bool = False,
    ) -> StartedRun:
        """Start a new run from the state of `run_id` at `step` (plus an optional user message).
        The parent is untouched; the new run records it and the fork step. `memory` (a MemoryView)
        is what it recalls from long-term memory: by default memory as it was at that step, never
        the parent's later episodes. It keeps the parent's priority unless given one.
        `idempotency_key` as for `start_run`; it has a webhook only if given one (`webhook`, as for
        `start_run`); `budget`, `instructions` (its own, in place of those it inherits) and `assistant`
        as for `start_run`. `message_only`: the fork only adds `message` to the state, as a new
        checkpoint at `step` (the Agent Protocol's update_state): it takes no step, calls no model,
        and ends `completed`; a later fork of it goes on from there."""
        async with self._scope.on_run(Action.FORK, tenant_id, run_id) as tenant_id:
            if message_only and not (message or "").strip():
                raise InvalidInput("a fork that only adds a message needs the message: give its text")
            if budget is not None:
                check_budget(asdict(budget))
            check_text("the message", message)

            def input_of(parent: RunRow, tenant: str) -> RunInput:
                return RunInput(
                    agent=parent.agent,
                    task=message if message is not None else parent.task,  # a thread's next turn is its own task
                    tenant_id=tenant,
                    model=model,
                    fork=ForkOrigin(
                        run_id=run_id, step=step, message=message, memory=MemoryView(memory), message_only=message_only
                    ),
                    pin_model=model is not None,
                    priority=priority or parent.priority,
                    webhook=webhook,
                    # A message-only fork's budget allows no step of its own (its steps go on from the fork
                    # step): a worker from before message_only ends it there too, if with `max_steps`.
                    budget=Budget(max_steps=step) if message_only and budget is None else budget,
                    instructions=instructions,
                    **assistant_fields(assistant),
                )

            return await self._start_from(
                run_id,
                step,
                input_of,
                tenant_id=tenant_id,
                new_run_id=new_run_id,
                idempotency_key=idempotency_key,
                checked=(memory, webhook, instructions, model, priority),
            )

    async def rerun(
        self,
        run_id: str,
        *,
        from_step: int = 0,
        model: str | None = None,
        agent: str | None = None,
        tools: str = ToolMode.RECORDED,
        instructions: str | None = None,
        memory: str = MemoryView.THEN,
        batch_id: str | None = None,
        tenant_id: str | None = None,
        new_run_id: str | None = None,
        rerun_children: bool = False,
        priority: int | None = None,
        webhook: str | None = None,
        idempotency_key: str | None = None,
    ) -> StartedRun:
        """Run `run_id` again from its state at `from_step` with another model, agent or
        `instructions` (the system prompt, in place of the agent's own), as a new run (lineage kind
        `rerun`). With `tools="recorded"` a tool call matching the original's at the same step and
        position gets the recorded result without running; `"live"` runs every tool. `memory` (a
        MemoryView) is what it recalls from long-term memory: `"then"` memory as it was when the
        original reached `from_step` (its start, from step 0), `"now"` as it is now; neither ever
        recalls the original's episodes after `from_step` (its final answer among them), `"all"`
        does. A sub-agent call is a recorded tool call too, answered from its recorded answer;
        `rerun_children=True` starts its sub-agent runs again instead, as the rerun's own children
        (`tools="live"` always does). The original is untouched; `compare(run_id, new_id)` shows what
        changed. It keeps the original's priority unless given one. `idempotency_key` as for
        `start_run`; it has a webhook only if given one (`webhook`, as for `start_run`)."""
        async with self._scope.on_run(Action.RERUN, tenant_id, run_id) as tenant_id:
            check_choice("tool mode", tools, ToolMode)
            check_choice("memory", memory, MemoryView)
            check_name("the agent", agent)

            def input_of(source: RunRow, tenant: str) -> RunInput:
                chosen = agent or source.agent
                return RunInput(
                    agent=chosen,
                    task=source.task,
                    tenant_id=tenant,
                    # else the source's model, with its agent's failover list
                    model=model or (source.model if chosen == source.agent else None),
                    pin_model=model is not None,
                    priority=priority or source.priority,
                    webhook=webhook,
                    fork=ForkOrigin(
                        run_id=run_id,
                        step=from_step,
                        kind=LineageKind.RERUN,
                        tools=ToolMode(tools),
                        batch_id=batch_id,
                        instructions=instructions,
                        memory=MemoryView(memory),
                        rerun_children=rerun_children,
                    ),
                )

            return await self._start_from(
                run_id,
                from_step,
                input_of,
                tenant_id=tenant_id,
                new_run_id=new_run_id,
                idempotency_key=idempotency_key,
                checked=(memory, webhook, instructions, model, priority),
            )

    async def rerun_batch(
        self,
        select: str,
        *,
        limit: int = 20,
        concurrency: int = 4,
        from_step: int = 0,
        model: str | None = None,
        agent: str | None = None,
        tools: str = ToolMode.RECORDED,
        instructions: str | None = None,
        memory: str = MemoryView.THEN,
        tenant_id: str | None = None,
        on_done: Callable[[BatchItem], None] | None = None,
        rerun_children: bool = False,
        priority: int | None = None,
    ) -> BatchReport:
        """Rerun the tenant's runs that `select` picks (`status=completed agent=X since=7d`, newest
        first, reruns left out, at most `limit`) with the same change, `concurrency` at a time; wait
        for each and compare it with its source. Every rerun is an ordinary run tagged with the
        batch id (`runs(batch_id=...)`); `memory`, `rerun_children` and `priority` as for `rerun`."""
        async with self._scope.act(Action.RERUN, tenant_id) as tenant_id:
            check_count("the limit", limit)
            check_priority(priority)
            check_count("the concurrency", concurrency, high=100)
            check_choice("tool mode", tools, ToolMode)
            check_choice("memory", memory, MemoryView)
            check_instructions(instructions)
            check_seq("the step", from_step)
            check_name("the model", model)
            check_name("the agent", agent)
            chosen = parse_selection(check_text("the selection", select))
            if "status" in chosen:
                check_choice("status", str(chosen["status"]), RunStatus)
            since = datetime.now(UTC) - timedelta(seconds=int(chosen["since"])) if "since" in chosen else None
            tenant = self._scope.tenant(tenant_id)
            sources = await self._store.list_runs(
                tenant,
                limit=limit,
                status=str(chosen["status"]) if "status" in chosen else None,
                agent=str(chosen["agent"]) if "agent" in chosen else None,
                since=since,
                originals=True,
            )
            if not sources:
                raise NotFound(f"no run matches {select!r}: list runs with `waypoint runs`")
            batch_id = f"batch-{uuid.uuid4().hex[:12]}"
            gate = asyncio.Semaphore(concurrency)

            async def one(source: RunRow) -> BatchItem:
                async with gate:
                    try:
                        new_id = await self.rerun(
                            source.run_id,
                            from_step=from_step,
                            model=model,
                            agent=agent,
                            tools=tools,
                            instructions=instructions,
                            memory=memory,
                            batch_id=batch_id,
                            tenant_id=tenant,
                            rerun_children=rerun_children,
                            priority=priority,
                        )
                    except WaypointError as exc:
                        item = BatchItem(source.run_id, None, error=str(exc))
                    else:
                        result = await self._live.result(new_id, tenant_id=tenant)
                        found = await self._store.compare.compare(tenant, source.run_id, new_id)
                        item = BatchItem(
                            source.run_id,
                            new_id,
                            status=result.status,
                            diverged=found.diverged,
                            first_divergence=found.first_divergence,
                            steps_delta=found.steps_delta,
                            tokens_delta=found.input_tokens_delta + found.output_tokens_delta,
                            cost_delta_usd=found.cost_delta_usd,
                            not_recorded=found.not_recorded_b,
                        )
                if on_done is not None:
                    on_done(item)
                return item

            items = await asyncio.gather(*(one(s) for s in sources))
            return BatchReport(batch_id, list(items))
