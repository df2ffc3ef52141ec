"""Two runs side by side, step by step (`waypoint compare`): the tool calls each made (name and
canonical arguments), the answer text, tokens, cost, model time and how each ended; and their
trees: the sub-agent calls of both, paired by (step, call index), each pair's answers, ends and
what their child runs used.

Both runs are read for the tenant (another tenant's run is "not found"); a fork or a rerun is read
with the steps it inherited from its parent, so steps line up by number.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.calls import CallLine, canonical_arguments
from waypoint.names import EventKind, ToolOutcome
from waypoint.store.base import StoreBase
from waypoint.store.rows import AgentCall, RunRow
from waypoint.store.schema import events
from waypoint.store.tree_travel import inherited_calls

COMPARED_KINDS = (EventKind.MODEL_RESPONSE, EventKind.TOOL_RESULT)


@dataclass(frozen=True)
class StepSide:
    """What one run did at one step: the model's answer, its tool calls and what they cost."""

    model: str | None
    content: str | None
    calls: list[CallLine] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    model_ms: int = 0


@dataclass(frozen=True)
class StepComparison:
    """One step of two runs side by side; `a` or `b` is None when that run has no such step."""

    step: int
    a: StepSide | None
    b: StepSide | None
    same_calls: bool
    same_answer: bool
    answer_diff: list[str] = field(default_factory=list)  # unified diff lines of the answer text

    @property
    def same(self) -> bool:
        return self.same_calls and self.same_answer


@dataclass(frozen=True)
class ChildPair:
    """The sub-agent calls of two runs at the same (step, call index), side by side (`compare`);
    `a` or `b` is None when only one run made it. `shared`: both sides are the same child run (a fork
    inherits the calls before its fork step)."""

    step: int
    call_index: int
    a: AgentCall | None
    b: AgentCall | None
    same_answer: bool
    same_status: bool
    shared: bool = False
    steps_delta: int = 0  # b - a
    tokens_delta: int = 0
    cost_delta_usd: float = 0.0
    answer_diff: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return self.a is not None and self.b is not None and self.same_answer and self.same_status


@dataclass(frozen=True)
class RunComparison:
    """Two runs step by step (`waypoint compare`): where they part and what that costs."""

    a: RunRow
    b: RunRow
    steps: list[StepComparison]
    first_divergence: int | None  # the first step that differs, None when every step is the same
    same_output: bool
    output_diff: list[str] = field(default_factory=list)
    steps_delta: int = 0  # b - a, counted over the steps compared
    input_tokens_delta: int = 0
    output_tokens_delta: int = 0
    cost_delta_usd: float = 0.0
    model_ms_delta: int = 0
    # Tool calls a rerun with recorded tools refused (no recorded call matched, not replay-safe).
    not_recorded_a: int = 0
    not_recorded_b: int = 0
    # The instructions each run started with, as a diff (a rerun with `--instructions`); empty when the same.
    instructions_diff: list[str] = field(default_factory=list)
    # Their sub-agent calls paired by (step, call index), when either run made any.
    children: list[ChildPair] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return (
            self.first_divergence is not None
            or not self.same_output
            or self.a.status != self.b.status
            or not all(c.same for c in self.children)
        )


def text_diff(a: str | None, b: str | None) -> list[str]:
    """Unified diff lines (no headers) of two texts; empty when they are equal."""
    if (a or "") == (b or ""):
        return []
    lines = difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), "a", "b", n=1, lineterm="")
    return [line for line in lines if not line.startswith(("---", "+++"))]


def step_sides(rows: list[tuple[int, str, dict[str, Any]]]) -> dict[int, StepSide]:
    """(step, kind, payload) in log order -> what the run did at each step."""
    sides: dict[int, StepSide] = {}
    outcomes: dict[tuple[int, str], str] = {}
    for step, kind, payload in rows:
        if kind == EventKind.TOOL_RESULT:
            outcomes[(step, payload.get("call_id", ""))] = payload.get("outcome") or (
                "tool_error" if payload.get("is_error") else "ok"
            )
    for step, kind, payload in rows:
        if kind != EventKind.MODEL_RESPONSE:
            continue
        usage = payload.get("usage") or {}
        calls = [
            CallLine(c["name"], canonical_arguments(c.get("arguments")), outcomes.get((step, c.get("id", ""))))
            for c in payload.get("tool_calls") or []
        ]
        sides[step] = StepSide(
            model=payload.get("model"),
            content=payload.get("content"),
            calls=calls,
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cost_usd=float(payload.get("cost_usd") or 0),
            model_ms=int(payload.get("latency_ms") or 0),
        )
    return sides


def compare_sides(
    a: RunRow,
    b: RunRow,
    sides_a: dict[int, StepSide],
    sides_b: dict[int, StepSide],
    instructions: tuple[str | None, str | None] = (None, None),
    children: list[ChildPair] | None = None,
) -> RunComparison:
    compared: list[StepComparison] = []
    for n in sorted(set(sides_a) | set(sides_b)):
        x, y = sides_a.get(n), sides_b.get(n)
        same_calls = x is not None and y is not None and x.calls == y.calls
        same_answer = x is not None and y is not None and (x.content or "") == (y.content or "")
        diff = text_diff(x.content if x else None, y.content if y else None)
        compared.append(StepComparison(n, x, y, same_calls, same_answer, diff))
    first = next((c.step for c in compared if not c.same), None)

    def total(sides: dict[int, StepSide], attr: str) -> Any:
        return sum(getattr(s, attr) for s in sides.values())

    return RunComparison(
        a=a,
        b=b,
        steps=compared,
        first_divergence=first,
        same_output=(a.output or "") == (b.output or ""),
        output_diff=text_diff(a.output, b.output),
        steps_delta=len(sides_b) - len(sides_a),
        input_tokens_delta=total(sides_b, "input_tokens") - total(sides_a, "input_tokens"),
        output_tokens_delta=total(sides_b, "output_tokens") - total(sides_a, "output_tokens"),
        cost_delta_usd=round(total(sides_b, "cost_usd") - total(sides_a, "cost_usd"), 6),
        model_ms_delta=total(sides_b, "model_ms") - total(sides_a, "model_ms"),
        not_recorded_a=not_recorded(sides_a),
        not_recorded_b=not_recorded(sides_b),
        instructions_diff=text_diff(*instructions),
        children=children or [],
    )


def compare_children(calls_a: list[AgentCall], calls_b: list[AgentCall]) -> list[ChildPair]:
    """The sub-agent calls of two runs paired by (step, call index): same answer, same end (the
    child's status, else the call's outcome), and b - a of the child runs' steps, tokens and cost."""
    by_a = {(c.step, c.call_index): c for c in calls_a}
    by_b = {(c.step, c.call_index): c for c in calls_b}
    pairs = []
    for key in sorted(set(by_a) | set(by_b)):
        x, y = by_a.get(key), by_b.get(key)
        both = x is not None and y is not None
        answers = (x.answer if x else None, y.answer if y else None)
        ids = (x.child_run_id if x else None, y.child_run_id if y else None)
        pairs.append(
            ChildPair(
                step=key[0],
                call_index=key[1],
                a=x,
                b=y,
                same_answer=both and (answers[0] or "") == (answers[1] or ""),
                same_status=both and _end(x) == _end(y),
                shared=ids[0] is not None and ids[0] == ids[1],
                steps_delta=(y.steps if y else 0) - (x.steps if x else 0),
                tokens_delta=(y.tokens if y else 0) - (x.tokens if x else 0),
                cost_delta_usd=round((y.cost_usd if y else 0.0) - (x.cost_usd if x else 0.0), 6),
                answer_diff=text_diff(*answers),
            )
        )
    return pairs


def _end(call: AgentCall | None) -> str | None:
    """How a call ended: its outcome in the ledger (a call answered from a record has no child run,
    and ends as the recorded call did), else its child run's status (still running)."""
    if call is None:
        return None
    return call.outcome or call.status


def not_recorded(sides: dict[int, StepSide]) -> int:
    return sum(c.outcome == ToolOutcome.NOT_RECORDED for s in sides.values() for c in s.calls)


class Compare(StoreBase):
    async def compared_events(self, conn: AsyncConnection, tenant_id: str, run: RunRow) -> list[tuple[int, str, Any]]:
        """The run's model answers and tool results in step order, with those it inherited (a fork's
        or a rerun's steps up to its fork step, read from its ancestors)."""
        found: list[tuple[int, str, Any]] = []
        upto: int | None = None
        current: RunRow | None = run
        while current is not None:
            query = select(events.c.step, events.c.kind, events.c.payload).where(
                events.c.run_id == current.run_id, events.c.kind.in_(COMPARED_KINDS)
            )
            if upto is not None:
                query = query.where(events.c.step <= upto)
            rows = [(r.step, r.kind, r.payload) for r in await conn.execute(query.order_by(events.c.seq))]
            found = rows + found
            if current.parent_run_id is None or current.fork_step is None:
                break
            upto = current.fork_step if upto is None else min(upto, current.fork_step)
            current = await self._run(conn, tenant_id, current.parent_run_id)
        return found

    async def compare(self, tenant_id: str, run_a: str, run_b: str) -> RunComparison:
        """Runs `run_a` and `run_b` of the tenant, step by step."""
        async with self.engine.connect() as conn:
            a = await self._run(conn, tenant_id, run_a)
            b = await self._run(conn, tenant_id, run_b)
            sides_a = step_sides(await self.compared_events(conn, tenant_id, a))
            sides_b = step_sides(await self.compared_events(conn, tenant_id, b))
            instructions = (await _instructions(conn, a.run_id), await _instructions(conn, b.run_id))
            children = compare_children(
                await inherited_calls(conn, tenant_id, a), await inherited_calls(conn, tenant_id, b)
            )
        return compare_sides(a, b, sides_a, sides_b, instructions, children)


async def _instructions(conn: AsyncConnection, run_id: str) -> str | None:
    """The instructions the run started with (its `run_started` event; a rerun's override is there)."""
    payload = await conn.scalar(
        select(events.c.payload).where(events.c.run_id == run_id, events.c.kind == EventKind.RUN_STARTED).limit(1)
    )
    return None if payload is None else payload.get("instructions")
