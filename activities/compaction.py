"""Compaction activities: choose the runs to compact, compact one run's range.

`compact_run` reads the run's events after its newest compaction (up to a seq
read when it starts, so turns that land meanwhile stay outside the range),
pins decisions, prunes tool outputs, summarizes (the run's model with a JSON
schema, or the extractive fallback), and writes one `compactions` row in one
transaction. Compactions of a run are cumulative: each covers from the first
event after the head to its `last_seq`, and folds the previous summary and pins
into its own, so the newest row alone describes the compacted view (its `pruned`
lists only what it pruned itself, so rows stay bounded).
The event log is only read.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy import Text, cast, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.heartbeat import heartbeating
from waypoint import compaction as logic
from waypoint.compaction_types import (
    COMPACT_RUN,
    SELECT_RUNS,
    CompactionSummary,
    CompactRunInput,
    RunRef,
    SelectRunsInput,
)
from waypoint.config import Settings
from waypoint.store.compactions import latest_compaction
from waypoint.store.schema import compactions, events, runs

# Events a compaction reads; the others (status changes, failed attempts) are bookkeeping.
COMPACTABLE = ("user_message", "decision", "model_response", "tool_result")


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    fact: str


class _Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step: int
    text: str


class StructuredSummary(BaseModel):
    """What the model must answer; validated before use."""

    model_config = ConfigDict(extra="forbid")
    summary: str
    decisions: list[_Decision]
    open_threads: list[str]
    key_facts: list[_Fact]


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


# Strict structured output: every property required, no others (the OpenAI json_schema rules).
SUMMARY_SCHEMA = _object(
    {
        "summary": {"type": "string"},
        "decisions": {"type": "array", "items": _object({"step": {"type": "integer"}, "text": {"type": "string"}})},
        "open_threads": {"type": "array", "items": {"type": "string"}},
        "key_facts": {"type": "array", "items": _object({"step": {"type": "integer"}, "fact": {"type": "string"}})},
    }
)

SYSTEM_PROMPT = """\
You compact the transcript of an AI agent's run. Your answer replaces these steps in the agent's \
working memory: the agent continues from it and will not see the original steps again (they stay \
in an audit log it does not read).

Keep what the agent needs to go on:
- the goal, and everything the user asked or told it;
- what was done and what came of it, in order;
- every concrete value it may need later: names, identifiers, numbers, dates, file paths, URLs, \
commands, error messages, results;
- what failed and why, so it is not retried blindly;
- what is still open.
Drop: repeated or superseded tool output, pleasantries, formatting. Lines in [brackets] stand for \
pruned tool outputs: use their summary, do not ask for the original.

Fields:
- summary: at most {words} words, past tense, chronological, dense; no facts that are not in the \
transcript or the summary so far.
- key_facts: each concrete fact as one short sentence with the step it came from (the [step N] \
prefix of its line). Include the facts of the summary so far that still matter.
- decisions: each decision taken (approvals, denials, choices the agent pinned) with its step, \
worded as in the transcript. They are also kept verbatim elsewhere: do not reinterpret them.
- open_threads: unfinished work, unanswered questions, failed calls not yet resolved.
Answer only with JSON that matches the schema."""


def user_prompt(task: str, previous: str | None, lines: list[tuple[int, str]]) -> str:
    parts = [f"The run's task: {task}"]
    if previous:
        parts.append(f"Summary so far (of earlier steps):\n{previous}")
    parts.append("Transcript to compact:\n" + "\n".join(f"[step {step}] {line}" for step, line in lines))
    return "\n\n".join(parts)


def _as_events(rows: Any) -> list[logic.LogEvent]:
    return [logic.LogEvent(seq=r.seq, step=r.step, kind=r.kind, payload=r.payload) for r in rows]


class CompactionActivities:
    def __init__(self, engine: AsyncEngine, settings: Settings):
        self.engine = engine
        self.settings = settings
        self._openai: openai.AsyncOpenAI | None = None

    @activity.defn(name=SELECT_RUNS)
    async def select_runs(self, inp: SelectRunsInput) -> list[RunRef]:
        """Runs (running or finished) whose history after their newest compaction passes the
        threshold, largest first. Tokens are estimated from the events' JSON (4 characters a token)."""
        done = (
            select(func.coalesce(func.max(compactions.c.last_seq), 0))
            .where(compactions.c.run_id == runs.c.run_id)
            .scalar_subquery()
        )
        tokens = func.coalesce(func.sum(func.length(cast(events.c.payload, Text))), 0) / 4
        query = (
            select(runs.c.run_id, runs.c.tenant_id, tokens.label("tokens"))
            .select_from(runs)
            .outerjoin(
                events,
                (events.c.run_id == runs.c.run_id) & events.c.kind.in_(COMPACTABLE) & (events.c.seq > done),
            )
            .group_by(runs.c.run_id, runs.c.tenant_id)
        )
        if inp.tenant_id is not None:
            query = query.where(runs.c.tenant_id == inp.tenant_id)
        if inp.run_id is not None:
            query = query.where(runs.c.run_id == inp.run_id)
        else:
            query = query.having(tokens >= inp.threshold_tokens)
        query = query.order_by(tokens.desc(), runs.c.run_id).limit(inp.limit)
        async with self.engine.connect() as conn:
            found = [RunRef(r.run_id, r.tenant_id, int(r.tokens)) for r in await conn.execute(query)]
        if inp.run_id is not None and not found:
            raise ApplicationError(
                f"no run {inp.run_id!r} for tenant {inp.tenant_id!r}: list runs with `waypoint runs`",
                type="NotFound",
                non_retryable=True,
            )
        return found

    @activity.defn(name=COMPACT_RUN)
    async def compact_run(self, inp: CompactRunInput) -> CompactionSummary:
        async with heartbeating(inp.run_id):
            return await self.compact(inp)

    async def compact(self, inp: CompactRunInput) -> CompactionSummary:
        def nothing(first: int = 0, last: int = 0, compaction_id: int | None = None) -> CompactionSummary:
            return CompactionSummary(inp.run_id, compaction_id, first, last, 0, 0, created=False)

        async with self.engine.connect() as conn:
            run = (
                await conn.execute(
                    select(runs.c.agent, runs.c.model, runs.c.task).where(
                        runs.c.run_id == inp.run_id, runs.c.tenant_id == inp.tenant_id
                    )
                )
            ).first()
            if run is None:
                raise ApplicationError(
                    f"no run {inp.run_id!r} for tenant {inp.tenant_id!r}: list runs with `waypoint runs`",
                    type="NotFound",
                    non_retryable=True,
                )
            previous = await latest_compaction(conn, inp.run_id)
            head = await conn.scalar(
                select(func.min(events.c.seq)).where(events.c.run_id == inp.run_id, events.c.kind == "run_started")
            )
            # Read once, now: events that land while we work stay outside the range.
            newest = await conn.scalar(select(func.max(events.c.seq)).where(events.c.run_id == inp.run_id))
            upto = min(inp.upto_seq, newest or 0) if inp.upto_seq is not None else (newest or 0)
            first_seq = (head or 0) + 1
            after = max(previous["last_seq"] if previous else 0, head or 0)
            steps = list(
                await conn.scalars(
                    select(events.c.step)
                    .where(
                        events.c.run_id == inp.run_id,
                        events.c.seq > after,
                        events.c.seq <= upto,
                        events.c.kind.in_(COMPACTABLE),
                    )
                    .group_by(events.c.step)
                    .order_by(events.c.step)
                )
            )
            keep = self.settings.compaction_keep_steps if inp.keep_steps is None else inp.keep_steps
            if len(steps) <= keep:
                return nothing(first_seq, after, previous["id"] if previous else None)
            cut_step = steps[-keep - 1] if keep else steps[-1]
            last_seq = await conn.scalar(
                select(func.max(events.c.seq)).where(
                    events.c.run_id == inp.run_id,
                    events.c.seq > after,
                    events.c.seq <= upto,
                    events.c.step <= cut_step,
                )
            )
            rows = await conn.execute(
                select(events.c.seq, events.c.step, events.c.kind, events.c.payload)
                .where(events.c.run_id == inp.run_id, events.c.seq > after, events.c.seq <= last_seq)
                .order_by(events.c.seq)
            )
            new = _as_events(rows)
        if not logic.range_messages([e for e in new if e.kind in COMPACTABLE]):
            return nothing(first_seq, after)

        pins = logic.find_pins(new)
        pruned = logic.plan_pruning(new, self.settings.compaction_oversize_tokens)
        spec = inp.model or run.model
        summary, fallback = await self.summarize(spec, run.task, previous, new, pruned)
        steps_range = (previous["first_step"] if previous else new[0].step, max(e.step for e in new))
        if summary.method == "model":
            block = logic.model_summary_text(summary, *steps_range)
        else:
            block = summary.text
        all_pins = [*(previous["pinned"] if previous else []), *(asdict(p) for p in pins)]
        tokens_before = (previous["tokens_before"] if previous else 0) + logic.messages_tokens(
            logic.range_messages(new)
        )
        after_messages = [{"role": "system", "content": block}]
        if all_pins:
            after_messages.insert(0, {"role": "system", "content": logic.pins_text(all_pins)})
        row = {
            "run_id": inp.run_id,
            "tenant_id": inp.tenant_id,
            "first_seq": first_seq,
            "last_seq": last_seq,
            "first_step": steps_range[0],
            "last_step": steps_range[1],
            "tokens_before": tokens_before,
            "tokens_after": logic.messages_tokens(after_messages),
            "summary": block,
            "structured": {
                "key_facts": summary.key_facts,
                "open_threads": summary.open_threads,
                "decisions": summary.decisions,
            },
            "pinned": all_pins,
            # Only what this compaction pruned (earlier rows hold the rest): rows stay bounded.
            "pruned": [asdict(p) for p in pruned],
            "method": summary.method,
            "model": spec if summary.method == "model" else None,
            "fallback_reason": fallback,
        }
        async with self.engine.begin() as conn:
            compaction_id, created = await write_compaction(conn, row, previous["id"] if previous else None)
        return CompactionSummary(
            run_id=inp.run_id,
            compaction_id=compaction_id,
            first_seq=first_seq,
            last_seq=last_seq,
            tokens_before=row["tokens_before"],
            tokens_after=row["tokens_after"],
            created=created,
            method=summary.method,
            agent=run.agent,
            tenant_id=inp.tenant_id,
            last_step=steps_range[1],
            summary=block,
        )

    async def summarize(
        self,
        spec: str,
        task: str,
        previous: dict[str, Any] | None,
        new: list[logic.LogEvent],
        pruned: list[logic.Pruned],
    ) -> tuple[logic.Summary, str | None]:
        """The model's structured summary, else the extractive one and why the model was not used."""
        budget = self.settings.compaction_summary_tokens
        earlier = (previous or {}).get("structured", {}).get("key_facts", [])
        provider, _, name = spec.partition(":")
        if provider != "openai" or not name:
            reason = f"the run's model {spec!r} is not an OpenAI-compatible model"
        elif self.settings.openai_api_key is None:
            reason = "OPENAI_API_KEY is not set on the worker"
        else:
            lines = logic.view_lines(new, pruned, output_words=self.settings.compaction_oversize_tokens // 2)
            prompt = user_prompt(task, previous["summary"] if previous else None, lines)
            try:
                return await self.model_summary(name, prompt, budget), None
            except (openai.OpenAIError, ValidationError, ValueError) as exc:
                reason = f"the model failed ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
                activity.logger.warning("compaction falls back to the extractive summary: %s", reason)
        first_step = previous["first_step"] if previous else None
        return logic.extractive_summary(new, pruned, budget, earlier_facts=earlier, first_step=first_step), reason

    async def model_summary(self, model: str, prompt: str, budget_tokens: int) -> logic.Summary:
        if self._openai is None:
            key = self.settings.openai_api_key
            assert key is not None
            self._openai = openai.AsyncOpenAI(
                api_key=key.get_secret_value(),
                base_url=self.settings.openai_base_url,
                max_retries=0,  # a failed summary falls back at once; the next pass tries again
                timeout=self.settings.model_timeout_seconds,
            )
        words = max(50, budget_tokens * 3 // 5)  # ~0.75 words a token, minus room for facts
        response = await self._openai.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT.format(words=words)},
                {"role": "user", "content": prompt},
            ],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "compaction", "strict": True, "schema": SUMMARY_SCHEMA},
            },
            max_tokens=budget_tokens * 2,
        )
        content = response.choices[0].message.content
        if not content:
            raise ValueError("the model answered no content")
        data = StructuredSummary.model_validate_json(content)
        if not data.summary.strip():
            raise ValueError("the model's summary is empty")
        return logic.Summary(
            text=data.summary,
            decisions=[d.model_dump() for d in data.decisions],
            open_threads=data.open_threads,
            key_facts=[f.model_dump() for f in data.key_facts],
            method="model",
        )


async def write_compaction(conn: AsyncConnection, row: dict[str, Any], previous_id: int | None) -> tuple[int, bool]:
    """Insert the row unless the range is compacted already; returns (id, created). Caller owns the
    transaction, so a crash leaves no row or a complete one."""
    # Two compactions of one run at once (the schedule and the agent's inline one): the second
    # waits here, then finds the first's row and writes nothing.
    await conn.execute(
        text("SELECT pg_advisory_xact_lock(hashtext('waypoint.compaction:' || :run))"), {"run": row["run_id"]}
    )
    newest = await latest_compaction(conn, row["run_id"])
    if newest is not None and newest["id"] != previous_id and newest["last_seq"] >= row["last_seq"]:
        return newest["id"], False
    inserted = await conn.scalar(
        insert(compactions)
        .values(**row)
        .on_conflict_do_nothing(constraint="compactions_run_range_key")
        .returning(compactions.c.id)
    )
    if inserted is not None:
        return inserted, True
    existing = await conn.scalar(
        select(compactions.c.id).where(
            compactions.c.run_id == row["run_id"],
            compactions.c.first_seq == row["first_seq"],
            compactions.c.last_seq == row["last_seq"],
        )
    )
    assert existing is not None
    return existing, False
