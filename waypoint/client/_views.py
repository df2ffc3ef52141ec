"""How the surfaces show what the client hands out: pure functions from the store's typed rows to
JSON-ready data and one-line texts, shared by the CLI, the HTTP API, the viewer and MCP.

The store reads and writes rows; turning them into JSON (timestamps as ISO 8601 text, decimals as
floats, each type's derived fields) or a line of text happens here, once, so every surface shows
the same thing the same way. Surfaces import these from `waypoint.client`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from waypoint.names import DeliveryStatus
from waypoint.store.audit import AuditVerdict
from waypoint.store.compare import ChildPair, RunComparison, StepComparison
from waypoint.store.integrity import Verdict
from waypoint.store.rows import BatchReport, EventRow, RunRow
from waypoint.store.trees import RunTree, TreeNode
from waypoint.store.webhooks import WebhookAttempt, WebhookDelivery
from waypoint.versions import AgentVersion


def as_json(value: Any) -> Any:
    """Dataclasses, datetimes, decimals and enums as JSON-ready values, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Verdict | AuditVerdict):
            data["ok"] = value.ok
        if isinstance(value, StepComparison | ChildPair):
            data["same"] = value.same
        if isinstance(value, RunComparison):
            data["diverged"] = value.diverged
        if isinstance(value, AgentVersion):
            data["fingerprint"] = value.fingerprint
        if isinstance(value, BatchReport):
            data.update(
                runs=value.runs,
                diverged_pct=value.diverged_pct,
                completed_pct=value.completed_pct,
                tokens_delta_p50_p95=list(value.tokens_delta),
                cost_delta_usd_p50_p95=list(value.cost_delta_usd),
            )
        return data
    if isinstance(value, Mapping):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Enum):
        return value.value
    return value


async def json_lines(rows: AsyncIterator[RunRow | EventRow]) -> AsyncIterator[str]:
    """A run's transcript as JSON lines: `{"type": "run", ...}` for its row, `{"type": "event", ...}`
    for each event."""
    async for row in rows:
        yield json.dumps({"type": "run" if isinstance(row, RunRow) else "event", **as_json(row)})


def caller_json(run: RunRow) -> dict[str, Any] | None:
    """The call that started a sub-agent run (None for a run no agent started)."""
    if run.caller_run_id is None:
        return None
    return {"run_id": run.caller_run_id, "step": run.caller_step, "call_index": run.caller_call_index}


def child_json(run: RunRow) -> dict[str, Any]:
    """A sub-agent run as its caller lists it: who, how far, what it cost, and the call (step,
    index) of the caller that started it."""
    return {
        "run_id": run.run_id,
        "agent": run.agent,
        "status": run.shown_status,
        "steps": run.steps,
        "step": run.caller_step,
        "call_index": run.caller_call_index,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost_usd": run.cost_usd,
    }


def node_json(node: TreeNode) -> dict[str, Any]:
    """One run of a tree: its figures, its depth and the call that started it."""
    r = node.run
    return {
        "run_id": r.run_id,
        "agent": r.agent,
        "status": r.shown_status,
        "steps": r.steps,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "tokens": r.input_tokens + r.output_tokens,
        "cost_usd": r.cost_usd,
        "depth": node.depth,
        "caller_run_id": r.caller_run_id,
        "caller_step": r.caller_step,
        "caller_call_index": r.caller_call_index,
    }


def tree_json(tree: RunTree) -> dict[str, Any]:
    """A tree as the surfaces answer it: each node's figures, depth and caller, then the totals, and its
    budget pool (limit, used, reserved and left per measure; null without one)."""
    nodes = [node_json(n) for n in tree.nodes]
    totals = tree.totals
    return {
        "run_id": tree.root.run_id,
        "nodes": nodes,
        "totals": {
            "runs": totals.runs,
            "steps": totals.steps,
            "input_tokens": totals.input_tokens,
            "output_tokens": totals.output_tokens,
            "tokens": totals.tokens,
            "cost_usd": totals.cost_usd,
        },
        "budget": tree.budget.to_json() if tree.budget is not None else None,
    }


def _attempts(n: int) -> str:
    return f"{n} attempt{'s' if n != 1 else ''}"


def delivery_summary(attempts: list[WebhookAttempt], deliveries: Sequence[WebhookDelivery] = ()) -> str:
    """One line on how a run's webhook fared: "delivered after 3 attempts (HTTP 200)". With the run's
    deliveries (newest first), the newest one's line; else (runs from before deliveries) the attempts'."""
    if deliveries:
        return delivery_line(deliveries[0])
    if not attempts:
        return "not posted yet"
    last = attempts[-1]
    if any(a.delivered for a in attempts):
        return f"delivered after {_attempts(len(attempts))} (HTTP {last.status_code})"
    return f"not delivered after {_attempts(len(attempts))}; last: {last.error}"


def delivery_line(d: WebhookDelivery) -> str:
    """One line on where a delivery stands: delivered, pending (when its next attempt is due) or failed."""
    if d.status == DeliveryStatus.DELIVERED:
        return f"delivered after {_attempts(d.attempts)} (HTTP {d.last_status_code})"
    last = f"; last: {d.last_error}" if d.last_error else ""
    if d.status == DeliveryStatus.FAILED:
        return f"failed after {_attempts(d.attempts)}, on the dead-letter list{last}"
    if d.attempts == 0:
        return "pending: not posted yet"
    due = f", next attempt at {d.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC" if d.next_attempt_at else ""
    return f"pending after {_attempts(d.attempts)}{due}{last}"
