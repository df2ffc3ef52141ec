"""Working memory by reference: a checkpoint lists event ranges, never message copies.

Every message a model sees is stored once, as an event (`run_started` holds the
instructions and the task, then `user_message`, `model_response` and
`tool_result`). A checkpoint's state is a list of segments
`[run_id, first_seq, last_seq, tokens]`: the head (instructions and task) and
one segment per step still in the window, with its estimated size. So a
checkpoint costs tens of bytes per step in the window, whatever the messages
hold, and storage grows linearly with run length. A fork's segments point into
its ancestors' events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, Text, bindparam, func, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import MESSAGE_KINDS, EventKind
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, resolved
from waypoint.store.schema import STATE_SCHEMA_VERSION, events
from waypoint.tokens import estimate_tokens
from waypoint.transcript import event_messages, is_pin, pin_text
from waypoint.types import Message
from waypoint.working_memory import DROP_TO

Segment = list[Any]  # [run_id, first_seq, last_seq, tokens]

# The ranges to read, as three arrays unnested into rows: one statement whatever the number of
# segments, so SQLAlchemy compiles it once (an OR of one BETWEEN per segment was compiled anew
# on every step, about 10 ms of each model call's time on 2 cores).
_RANGES = (
    func.unnest(
        bindparam("range_runs", type_=ARRAY(Text)),
        bindparam("range_firsts", type_=ARRAY(Integer)),
        bindparam("range_lasts", type_=ARRAY(Integer)),
    )
    .table_valued("run_id", "first_seq", "last_seq")
    .render_derived()
)
# Each range's events, read through the (run_id, seq) key: a LATERAL subquery, kept apart from the
# outer query by its ORDER BY (Postgres does not flatten a subquery that sorts), so the only plan is
# one index range scan per range, whatever the table's size. As a plain join of events to the
# ranges, the planner hashed the ranges and scanned all of `events` once per step while the table
# held up to some thousands of rows (its generic plan, once a connection had run it five times, kept
# doing so on bigger tables): Postgres work per step that grew with the fleet (issue 43).
_IN_RANGE = (
    select(events.c.run_id, events.c.seq, events.c.kind, events.c.payload, LEDGER_OUTPUT)
    .select_from(EVENTS_WITH_OUTPUTS)
    .where(
        events.c.run_id == _RANGES.c.run_id,
        events.c.seq.between(_RANGES.c.first_seq, _RANGES.c.last_seq),
        events.c.kind.in_((*MESSAGE_KINDS, EventKind.DECISION)),
    )
    .order_by(events.c.seq)
    .lateral("in_range")
)
_RANGE_READ = select(_IN_RANGE).select_from(_RANGES).join(_IN_RANGE, true())


@dataclass(frozen=True)
class Found:
    kind: str
    payload: dict[str, Any]


Pin = list[Any]  # [run_id, seq, step]: a decision event, or the result of a pin_decision call


def segment(run_id: str, first_seq: int, last_seq: int, messages: Iterable[Message]) -> Segment:
    return [run_id, first_seq, last_seq, estimate_tokens(list(messages))]


def trim(
    segments: list[Segment], budget_tokens: int, hidden: Callable[[Segment], bool] | None = None
) -> tuple[list[Segment], int]:
    """Once the window passes the budget, drop the oldest steps (never the head, never the newest
    step) until it is down to `DROP_TO` of the budget: a block at once, so the window's start (the
    prompt's prefix, which providers cache) stays put for the steps that fill it again (see
    `waypoint.working_memory`). `hidden`: the steps a compaction's summary stands for, which the
    model no longer sees: they go first, and if the rest fits the budget nothing the model sees
    moves. Returns the kept segments and how many were dropped."""
    kept = list(segments)
    total = sum(s[3] for s in kept)
    if total <= budget_tokens:
        return kept, 0
    dropped = 0
    while hidden is not None and len(kept) > 2 and total > budget_tokens * DROP_TO and hidden(kept[1]):
        total -= kept.pop(1)[3]
        dropped += 1
    if dropped and total <= budget_tokens:
        return kept, dropped
    while len(kept) > 2 and total > budget_tokens * DROP_TO:
        total -= kept.pop(1)[3]
        dropped += 1
    return kept, dropped


def state(segments: list[Segment], *, dropped_steps: int = 0, pinned: Sequence[Pin] = ()) -> dict[str, Any]:
    """A checkpoint's state (JSONB)."""
    return {
        "schema": STATE_SCHEMA_VERSION,
        "segments": segments,
        "dropped_steps": dropped_steps,
        "pinned": list(pinned),
    }


def pins_of(run_id: str, rows: Iterable[tuple[int, int, str, dict[str, Any]]]) -> list[Pin]:
    """The pins among a step's new events, given as (seq, step, kind, payload)."""
    return [[run_id, seq, step] for seq, step, kind, payload in rows if is_pin(kind, payload)]


async def render_parts(
    conn: AsyncConnection, segments: list[Segment], pins: Sequence[Pin] = ()
) -> tuple[list[list[Message]], list[tuple[int, str]]]:
    """One query: the messages of each segment (a group per segment, in order) and the text of
    each pin as (step, text)."""
    refs = [*((r, a, b) for r, a, b, _ in segments), *((r, seq, seq) for r, seq, _ in pins)]
    if not refs:
        return [], []
    params = {
        "range_runs": [r for r, _, _ in refs],
        "range_firsts": [a for _, a, _ in refs],
        "range_lasts": [b for _, _, b in refs],
    }
    found = {
        (row.run_id, row.seq): Found(row.kind, resolved(row.payload, row.ledger_output))
        for row in await conn.execute(_RANGE_READ, params)
    }
    groups: list[list[Message]] = []
    for run_id, first, last, _ in segments:
        group: list[Message] = []
        for seq in range(first, last + 1):
            row = found.get((run_id, seq))
            if row is not None:
                group += event_messages(row.kind, row.payload)
        groups.append(group)
    texts = [
        (step, pin_text(row.kind, row.payload))
        for run_id, seq, step in pins
        if (row := found.get((run_id, seq))) is not None
    ]
    return groups, texts


async def render(conn: AsyncConnection, segments: list[Segment]) -> list[Message]:
    """The messages of a window, in order, loaded in one query."""
    groups, _ = await render_parts(conn, segments)
    return [m for group in groups for m in group]
