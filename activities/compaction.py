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

from pydantic import BaseModel, ConfigDict, ValidationError
from temporalio import activity

from waypoint import compaction as logic
from waypoint.activities.boundary import boundary, heartbeating
from waypoint.compaction_types import CompactionSummary, CompactRunInput, RunRef, SelectRunsInput
from waypoint.config import Settings
from waypoint.errors import WaypointError
from waypoint.models.spec import Provider, parse_model_spec
from waypoint.names import Activity
from waypoint.store import RunStore
from waypoint.store.compactions import CompactionSource
from waypoint.tokens import messages_tokens


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


class CompactionActivities:
    def __init__(self, store: RunStore, settings: Settings):
        self.store = store
        self.settings = settings
        self._openai: Any = None

    @activity.defn(name=Activity.SELECT_RUNS)
    @boundary
    async def select_runs(self, inp: SelectRunsInput) -> list[RunRef]:
        """Runs (running or finished) whose history after their newest compaction passes the
        threshold, largest first."""
        return await self.store.compaction.runs_to_compact(
            threshold_tokens=inp.threshold_tokens, limit=inp.limit, tenant_id=inp.tenant_id, run_id=inp.run_id
        )

    @activity.defn(name=Activity.COMPACT_RUN)
    @boundary
    async def compact_run(self, inp: CompactRunInput) -> CompactionSummary:
        async with heartbeating(inp.run_id):
            return await self.compact(inp)

    async def compact(self, inp: CompactRunInput) -> CompactionSummary:
        keep = self.settings.compaction_keep_steps if inp.keep_steps is None else inp.keep_steps
        src = await self.store.compaction.compaction_source(
            inp.tenant_id, inp.run_id, keep_steps=keep, upto_seq=inp.upto_seq
        )
        previous = src.previous
        if not logic.range_messages(src.events):
            return self.nothing(src)
        new = src.events
        pins = logic.find_pins(new)
        pruned = logic.plan_pruning(new, self.settings.compaction_oversize_tokens)
        spec = inp.model or src.model
        summary, fallback = await self.summarize(spec, src.task, previous, new, pruned)
        steps_range = (previous["first_step"] if previous else new[0].step, max(e.step for e in new))
        if summary.method == "model":
            block = logic.model_summary_text(summary, *steps_range)
        else:
            block = summary.text
        all_pins = [*(previous["pinned"] if previous else []), *(asdict(p) for p in pins)]
        tokens_before = (previous["tokens_before"] if previous else 0) + messages_tokens(logic.range_messages(new))
        after_messages = [{"role": "system", "content": block}]
        if all_pins:
            after_messages.insert(0, {"role": "system", "content": logic.pins_text(all_pins)})
        row = {
            "run_id": inp.run_id,
            "tenant_id": inp.tenant_id,
            "first_seq": src.first_seq,
            "last_seq": src.last_seq,
            "first_step": steps_range[0],
            "last_step": steps_range[1],
            "tokens_before": tokens_before,
            "tokens_after": messages_tokens(after_messages),
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
        compaction_id, created = await self.store.compaction.write_compaction(row, previous["id"] if previous else None)
        return CompactionSummary(
            run_id=inp.run_id,
            compaction_id=compaction_id,
            first_seq=src.first_seq,
            last_seq=src.last_seq,
            tokens_before=tokens_before,
            tokens_after=messages_tokens(after_messages),
            created=created,
            method=summary.method,
            agent=src.agent,
            tenant_id=inp.tenant_id,
            last_step=steps_range[1],
            summary=block,
        )

    @staticmethod
    def nothing(src: CompactionSource) -> CompactionSummary:
        """Nothing new to compact: the newest compaction stands, and is what this answers."""
        previous = src.previous
        if previous is None:
            return CompactionSummary(
                src.run_id,
                None,
                src.first_seq,
                src.after,
                0,
                0,
                created=False,
                tenant_id=src.tenant_id,
                agent=src.agent,
            )
        return CompactionSummary(
            run_id=src.run_id,
            compaction_id=previous["id"],
            first_seq=previous["first_seq"],
            last_seq=previous["last_seq"],
            tokens_before=previous["tokens_before"],
            tokens_after=previous["tokens_after"],
            created=False,
            method=previous["method"],
            agent=src.agent,
            tenant_id=src.tenant_id,
            last_step=previous["last_step"],
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
        try:
            parsed = parse_model_spec(spec)
        except WaypointError:
            parsed = None
        if parsed is None or parsed.provider != Provider.OPENAI:
            reason = f"the run's model {spec!r} is not an OpenAI-compatible model"
        elif self.settings.openai_api_key is None:
            reason = "OPENAI_API_KEY is not set on the worker"
        else:
            from openai import OpenAIError  # the SDK is imported by workers that call a model only

            lines = logic.view_lines(new, pruned, output_words=self.settings.compaction_oversize_tokens // 2)
            prompt = user_prompt(task, previous["summary"] if previous else None, lines)
            try:
                return await self.model_summary(parsed.name, prompt, budget), None
            except (OpenAIError, ValidationError, ValueError, AttributeError, IndexError, TypeError) as exc:
                # ValueError: no or empty content; the others: a body that is not a completion.
                reason = f"the model failed ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
            activity.logger.warning("compaction falls back to the extractive summary: %s", reason)
        first_step = previous["first_step"] if previous else None
        return logic.extractive_summary(new, pruned, budget, earlier_facts=earlier, first_step=first_step), reason

    async def model_summary(self, model: str, prompt: str, budget_tokens: int) -> logic.Summary:
        from waypoint.models.openai import openai_client

        if self._openai is None:
            # No retries here either: a failed summary falls back at once; the next pass tries again.
            self._openai = openai_client(self.settings)
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
