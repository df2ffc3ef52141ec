"""Tool outputs are stored once: in the `tool_effects` ledger, where `run_tool` wrote them.

A `tool_result` event of a call the ledger holds carries `output_ref` (the output's SHA-256 and
length) instead of the output, so the event stays small and the hash chain still covers the
output: `verify` checks the ledger's text against the hash. Outcomes the workflow decides itself
(denied, cancelled, failed) keep their short output in the event. Events written before this
(with `output` inline) read as they are. Every read of events that needs outputs joins the
ledger through `EVENTS_WITH_OUTPUTS` and `resolved()`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from waypoint.store.hashing import text_digest
from waypoint.store.rows import EventRow
from waypoint.store.schema import events, tool_effects

OUTPUT_REF = "output_ref"

# Events with the ledger's output of their call beside them (NULL for every other event).
EVENTS_WITH_OUTPUTS = events.outerjoin(
    tool_effects, tool_effects.c.idempotency_key == events.c.payload["idempotency_key"].astext
)
LEDGER_OUTPUT = tool_effects.c.output.label("ledger_output")


def output_ref(output: str) -> dict[str, Any]:
    return {"sha256": output_digest(output), "chars": len(output)}


def output_digest(output: str) -> str:
    return text_digest(output)


def resolved(payload: dict[str, Any], ledger_output: str | None) -> dict[str, Any]:
    """The payload with its output in place (from the ledger when the event holds a reference)."""
    if OUTPUT_REF not in payload or "output" in payload:
        return payload
    if ledger_output is None:
        return {**payload, "output": "[the output of this call is missing from the tool ledger]"}
    return {**payload, "output": ledger_output}


def event_row(row: Any) -> EventRow:
    """An event read with `LEDGER_OUTPUT`, its tool output in place."""
    event = EventRow.of(row)
    return replace(event, payload=resolved(event.payload, row["ledger_output"]))


def mismatch(payload: dict[str, Any], ledger_output: str | None) -> str | None:
    """Why a referenced output does not match its event (missing, or changed), or None."""
    ref = payload.get(OUTPUT_REF)
    if ref is None:
        return None
    if ledger_output is None:
        return "its output is missing from the tool ledger"
    if output_digest(ledger_output) != ref.get("sha256"):
        return "the tool ledger's output does not match the hash the event holds"
    return None
