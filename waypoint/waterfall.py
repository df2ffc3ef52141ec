"""A run as a waterfall: one row per step, with bars for where its time went.

`derive(source)` turns the rows `RunStore.waterfall_source` reads into `Waterfall`: for each step,
bars for its model call (each failed attempt, the waits between attempts, the attempt that
answered), each tool call (a lane per call, so parallel calls lie side by side), approval and
capacity waits, compactions and the sub-agent runs its calls started; and the step's numbers
(tokens, cost, the cost so far, the context the model received).

Times are milliseconds from the run's start. Most are recorded: a failed attempt's event is
written when it fails, a status change when it happens, a tool's ledger row when it returns, a
step's checkpoint when it ends, a child run's row when it starts and ends. Two are derived: an
answered model call ends where the step's first tool call (or approval wait) starts, or where the
step ends, and lasts its recorded latency; a failed attempt starts where the wait after the attempt
before it ends (its latency, when its event has one). A bar never starts before its step does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from waypoint.names import FINISHED, EventKind, RunStatus
from waypoint.store.waterfall import WaterfallSource


class BarKind(StrEnum):
    """What a bar of the waterfall stands for."""

    MODEL = "model"  # the model call's attempt that answered
    FAILED_ATTEMPT = "failed_attempt"  # a model attempt that failed (its event is in the log)
    RETRY_WAIT = "retry_wait"  # the backoff between two attempts
    TOOL = "tool"
    APPROVAL = "approval"  # a tool call waiting for a human
    CAPACITY = "capacity"  # the run waiting for a model key's capacity (fleet limits)
    COMPACTION = "compaction"
    SUBAGENT = "subagent"  # a sub-agent run one of the step's calls started


@dataclass(frozen=True)
class Bar:
    kind: BarKind
    start_ms: int
    end_ms: int
    lane: int = 0  # 0: the model's; a tool call's (and its approval's, its sub-agent's) is its call index
    label: str = ""
    attempt: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    child_run_id: str | None = None
    open: bool = False  # still going: it ends at `now` for now

    @property
    def duration_ms(self) -> int:
        return self.end_ms - self.start_ms


@dataclass(frozen=True)
class WaterfallStep:
    step: int
    start_ms: int
    end_ms: int
    in_flight: bool = False  # the step a live run is in: no checkpoint yet
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    cumulative_cost_usd: float = 0.0  # the run's own steps up to this one
    context_tokens: int = 0  # the context the model received (its input tokens)
    model_ms: int = 0  # the answering attempt's latency
    attempts: int = 0  # model attempts, failed ones included
    compacted: bool = False  # a compaction finished during this step
    bars: list[Bar] = field(default_factory=list)


@dataclass(frozen=True)
class Waterfall:
    run_id: str
    status: str
    started_at: datetime
    ended_at: datetime | None
    duration_ms: int  # to the end, or to now while it runs
    context_budget: int | None  # the plan's context tokens
    compact_threshold: int | None  # input tokens past which it compacts inline
    steps: list[WaterfallStep]
    agent: str = ""  # what a sub-agent run's rows are labelled with when shown under its caller's


_BAR_FIELDS = ("label", "attempt", "input_tokens", "output_tokens", "error", "child_run_id", "open")
_STEP_FIELDS = (
    "step",
    "start_ms",
    "end_ms",
    "in_flight",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "cumulative_cost_usd",
    "context_tokens",
    "model_ms",
    "attempts",
    "compacted",
)


def waterfall_json(w: Waterfall) -> dict[str, Any]:
    """`w` as JSON (the shape of GET /v1/runs/{id}/timeline): a bar's empty fields (None, 0, False,
    "") but its lane are left out, so a 1,500-step run stays small; written out here because a generic
    conversion of ~6,000 bars costs more than deriving them."""
    steps = []
    for st in w.steps:
        data: dict[str, Any] = {name: getattr(st, name) for name in _STEP_FIELDS}
        data["bars"] = [
            {
                "kind": b.kind.value,
                "start_ms": b.start_ms,
                "end_ms": b.end_ms,
                "lane": b.lane,
                **{name: v for name in _BAR_FIELDS if (v := getattr(b, name))},
            }
            for b in st.bars
        ]
        steps.append(data)
    return {
        "run_id": w.run_id,
        "agent": w.agent,
        "status": w.status,
        "started_at": w.started_at.isoformat(),
        "ended_at": w.ended_at.isoformat() if w.ended_at else None,
        "duration_ms": w.duration_ms,
        "context_budget": w.context_budget,
        "compact_threshold": w.compact_threshold,
        "steps": steps,
    }


class _Clock:
    def __init__(self, origin: datetime):
        self.origin = origin

    def ms(self, at: datetime) -> int:
        return round((at - self.origin).total_seconds() * 1000)


def derive(source: WaterfallSource) -> Waterfall:
    """The waterfall of the steps `source` holds (its first row, a checkpoint before them, is where
    the next step starts)."""
    run = source.run
    origin = run.created_at or source.now
    clock = _Clock(origin)
    finished = run.status in FINISHED
    end = run.finished_at if finished and run.finished_at else source.now
    events_of: dict[int, list[dict[str, Any]]] = {}
    for e in source.events:
        # A status change is logged with the last recorded step: it belongs to the step in flight.
        owner = e["step"] + 1 if e["kind"] == EventKind.STATUS_CHANGED else e["step"]
        events_of.setdefault(owner, []).append(e)
    waits = _waits(source.events, end, clock, open_ended=not finished)
    effects = {(x["step"], x["call_index"]): x for x in source.effects}
    children: dict[int, list[dict[str, Any]]] = {}
    for c in source.children:
        children.setdefault(c["caller_step"], []).append(c)
    squeezes = [(clock.ms(c["at"]), c) for c in source.compactions]

    steps: list[WaterfallStep] = []
    rows = source.steps
    anchor = 0
    cumulative = source.cost_before
    for row in rows:
        if row["input_tokens"] is None or row["step"] <= source.after_step:
            # step 0, a fork's first checkpoint, the last step a page has: where the next step starts
            anchor = clock.ms(row["at"])
            continue
        start, stop = anchor, clock.ms(row["at"])
        cumulative += float(row["cost_usd"])
        parts = _StepParts(row["step"], start, stop, clock, source.now)
        bars = parts.bars(row, events_of.get(row["step"], []), waits, effects, children.get(row["step"], []), squeezes)
        steps.append(
            WaterfallStep(
                step=row["step"],
                start_ms=start,
                end_ms=stop,
                input_tokens=row["input_tokens"],
                output_tokens=row["output_tokens"],
                cache_read_tokens=row["cache_read_tokens"],
                cache_write_tokens=row["cache_write_tokens"],
                cost_usd=float(row["cost_usd"]),
                cumulative_cost_usd=round(cumulative, 6),
                context_tokens=row["input_tokens"],
                model_ms=row["latency_ms"],
                attempts=row["attempt"],
                compacted=any(start < at <= stop for at, _ in squeezes),
                bars=bars,
            )
        )
        anchor = stop
    if not finished and run.status not in (RunStatus.SCHEDULED, RunStatus.QUEUED):
        n = (rows[-1]["step"] if rows else run.steps) + 1
        stop = clock.ms(source.now)
        parts = _StepParts(n, anchor, stop, clock, source.now)
        bars = parts.bars(None, events_of.get(n, []), waits, effects, children.get(n, []), squeezes)
        failed = sum(1 for b in bars if b.kind == BarKind.FAILED_ATTEMPT)
        steps.append(
            WaterfallStep(
                step=n,
                start_ms=anchor,
                end_ms=stop,
                in_flight=True,
                cumulative_cost_usd=round(cumulative, 6),
                attempts=failed,
                compacted=any(anchor < at for at, _ in squeezes),
                bars=bars,
            )
        )
    threshold = None
    if source.context_tokens and source.compact_at:
        threshold = int(source.context_tokens * source.compact_at)
    return Waterfall(
        run_id=run.run_id,
        status=run.shown_status,
        started_at=origin,
        ended_at=run.finished_at if finished else None,
        duration_ms=clock.ms(end),
        context_budget=source.context_tokens,
        compact_threshold=threshold,
        steps=steps,
        agent=run.agent,
    )


@dataclass(frozen=True)
class _Wait:
    kind: BarKind
    start_ms: int
    end_ms: int
    detail: str
    open: bool


def _waits(events: list[dict[str, Any]], end: datetime, clock: _Clock, *, open_ended: bool) -> dict[int, list[_Wait]]:
    """Approval and capacity waits by the seq of the status change that began them: each lasts to the
    next status change (or the run's end, or now)."""
    changes = [e for e in events if e["kind"] == EventKind.STATUS_CHANGED]
    found: dict[int, list[_Wait]] = {}
    kinds = {RunStatus.WAITING_APPROVAL: BarKind.APPROVAL, RunStatus.WAITING_CAPACITY: BarKind.CAPACITY}
    for i, e in enumerate(changes):
        kind = kinds.get(e["payload"].get("status"))
        if kind is None:
            continue
        nxt = changes[i + 1]["at"] if i + 1 < len(changes) else None
        stop = clock.ms(nxt or end)
        wait = _Wait(kind, clock.ms(e["at"]), stop, e["payload"].get("detail") or "", open_ended and nxt is None)
        found.setdefault(e["step"] + 1, []).append(wait)
    return found


class _StepParts:
    """The bars of one step between `start` and `stop` (ms)."""

    def __init__(self, step: int, start: int, stop: int, clock: _Clock, now: datetime):
        self.step, self.start, self.stop, self.clock, self.now = step, start, stop, clock, now

    def clamp(self, ms: int) -> int:
        return max(self.start, min(self.stop, ms))

    def bars(
        self,
        row: dict[str, Any] | None,
        events: list[dict[str, Any]],
        waits: dict[int, list[_Wait]],
        effects: dict[tuple[int, int], dict[str, Any]],
        children: list[dict[str, Any]],
        squeezes: list[tuple[int, dict[str, Any]]],
    ) -> list[Bar]:
        bars: list[Bar] = []
        results = [e for e in events if e["kind"] == EventKind.TOOL_RESULT]
        lanes = {e["payload"].get("call_id"): i for i, e in enumerate(results)}
        cursor = self.start  # where the model's first attempt may start
        for at, c in squeezes:
            if self.start < at <= self.stop:
                label = f"compaction: {c['tokens_before']:,} → {c['tokens_after']:,} tokens ({c['method']})"
                bars.append(Bar(BarKind.COMPACTION, self.start, at, label=label))
                cursor = max(cursor, at)
        first_call = self.stop
        decisions = {e["payload"].get("call_id"): e["payload"] for e in events if e["kind"] == EventKind.DECISION}
        for w in waits.get(self.step, []):
            if w.kind == BarKind.CAPACITY:
                bars.append(Bar(w.kind, w.start_ms, w.end_ms, label=f"waiting for capacity of {w.detail}", open=w.open))
                cursor = max(cursor, w.end_ms)
            else:
                call_id = w.detail.rsplit("(", 1)[-1].rstrip(")") if "(" in w.detail else None
                label = f"waiting for approval: {w.detail}"
                decided = decisions.get(call_id)
                if decided is not None and decided.get("actor"):  # who decided (runs since the audit log)
                    label += f"; {decided.get('decision', 'decided')} by {decided['actor']}"
                bars.append(Bar(w.kind, w.start_ms, w.end_ms, lane=lanes.get(call_id, 0), label=label, open=w.open))
                first_call = min(first_call, w.start_ms)
        tools = self._tools(results, effects, children)
        for t in tools:
            first_call = min(first_call, t.start_ms)
        bars += self._model(row, events, cursor, first_call)
        bars += tools
        return bars

    def _model(self, row: dict[str, Any] | None, events: list[dict[str, Any]], cursor: int, ends: int) -> list[Bar]:
        failures = sorted(
            (e for e in events if e["kind"] == EventKind.MODEL_ATTEMPT_FAILED), key=lambda e: (e["attempt"], e["seq"])
        )
        bars: list[Bar] = []
        for f in failures:
            p = f["payload"]
            stop = self.clamp(self.clock.ms(f["at"]))
            began = stop - int(p["latency_ms"]) if p.get("latency_ms") is not None else cursor
            began = min(max(self.start, began), stop)
            if bars and began > bars[-1].end_ms:
                bars.append(
                    Bar(BarKind.RETRY_WAIT, bars[-1].end_ms, began, label="retry wait", attempt=p.get("attempt"))
                )
            error = f"HTTP {p['status']}: {p.get('error')}" if p.get("status") else p.get("error")
            label = f"model attempt {p.get('attempt', f['attempt'])} failed"
            bars.append(Bar(BarKind.FAILED_ATTEMPT, began, stop, label=label, attempt=p.get("attempt"), error=error))
            wait = p.get("retry_in_seconds")
            cursor = min(stop + int(wait * 1000), self.stop) if wait else stop
        if row is None:
            return bars
        stop = self.clamp(ends)
        began = max(cursor, stop - int(row["latency_ms"]))
        began = min(began, stop)
        if bars and began > bars[-1].end_ms:
            bars.append(Bar(BarKind.RETRY_WAIT, bars[-1].end_ms, began, label="retry wait", attempt=row["attempt"]))
        label = f"model call ({row['model']})" if row.get("model") else "model call"
        bars.append(
            Bar(
                BarKind.MODEL,
                began,
                stop,
                label=label,
                attempt=row["attempt"],
                input_tokens=row["input_tokens"],
                output_tokens=row["output_tokens"],
            )
        )
        return bars

    def _tools(
        self,
        results: list[dict[str, Any]],
        effects: dict[tuple[int, int], dict[str, Any]],
        children: list[dict[str, Any]],
    ) -> list[Bar]:
        bars: list[Bar] = []
        started = {c["caller_call_index"]: c for c in children}
        for i, e in enumerate(results):
            p = e["payload"]
            error = p.get("outcome") if p.get("is_error") or p.get("outcome") not in (None, "ok") else None
            child = started.pop(i, None)
            if child is not None:
                bars.append(self._child(child, i, error))
                continue
            ledger = effects.get((self.step, i))
            if ledger is not None:
                stop = self.clamp(self.clock.ms(ledger["at"]))
                duration = int(ledger["duration_ms"])
                attempt = int(ledger["attempt"])
            else:  # not in the ledger (denied, answered by a human, cancelled): it ended with the step
                stop, duration, attempt = self.stop, int(p.get("duration_ms") or 0), 1
            label = f"tool {p.get('name', '?')}"
            bars.append(
                Bar(
                    BarKind.TOOL,
                    max(self.start, stop - duration),
                    stop,
                    lane=i,
                    label=label,
                    attempt=attempt,
                    error=error,
                )
            )
        for i, child in started.items():  # in flight: its call has no result yet
            bars.append(self._child(child, i, None))
        return bars

    def _child(self, child: dict[str, Any], lane: int, error: str | None) -> Bar:
        running = child["finished_at"] is None
        stop = self.clock.ms(child["finished_at"] or self.now)
        label = f"sub-agent {child['agent']}: {child['status']}, {child['steps']} steps"
        return Bar(
            BarKind.SUBAGENT,
            max(self.start, self.clock.ms(child["created_at"])),
            max(stop, self.start),
            lane=lane,
            label=label,
            error=error,
            child_run_id=child["run_id"],
            open=running,
        )
