"""Interrupts and `Command(resume=...)`: Waypoint's durable approvals, as Agent Protocol clients see them.

A run that waits for approval (a tool declared `requires_approval`, or the built-in `ask_human`)
is an interrupted thread. There is no second state: each interrupt is read from the run's pending
approvals (its live progress), or, in a stream, from its log (the model's calls and the
`status_changed` event that names the calls that wait). Its id is `<run_id>:<call_id>`; its value
says what waits:

    {"type": "approval", "call_id": ..., "tool": ..., "input": {...}, "question": "approve pay(...)?"}
    {"type": "ask_human", "call_id": ..., "tool": "ask_human", "input": {...}, "question": "..."}

A resume answers through the same approve/deny updates as the CLI, the viewer and `/v1`:

| resume value                                        | approval                     | ask_human            |
|-----------------------------------------------------|------------------------------|----------------------|
| `true`, `"approve"`, `{"action": "approve"}`        | approve                      | -                    |
| `false`, `"deny"`, `{"action": "deny", "reason"}`   | deny, the model reads why    | deny                 |
| `{"action": "edit", "input": {...}}`                | approve with edited input    | -                    |
| `"text"`, `{"answer": "text"}`                      | -                            | the call's result    |
| `{"<interrupt id>": value, ...}`                    | one value per waiting call   |                      |

A value that fits nothing is a Mismatch (422) naming what the interrupt expects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from waypoint.app.http.problems import not_supported
from waypoint.app.http.state import ApiState
from waypoint.client import EventRow, RunRow
from waypoint.errors import Conflict, InvalidInput, Mismatch
from waypoint.names import ASK_HUMAN_TOOL, EventKind, RunStatus
from waypoint.types import PendingApproval

APPROVE = (True, "approve", "approved", "accept", "yes")
DENY = (False, "deny", "denied", "reject", "no")
ACTIONS = ("approve", "deny", "reject", "edit", "accept")
NO_GOTO = (
    "command.goto and command.update are not supported: a Waypoint agent is one loop (model, then tools). "
    "Answer an interrupt with command={'resume': ...}; change what the agent sees with a new run on the "
    "thread (input), or start from an earlier step with checkpoint_id"
)


def interrupt_id(run_id: str, call_id: str) -> str:
    return f"{run_id}:{call_id}"


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments


def interrupt(run_id: str, call_id: str, tool: str, arguments: str, *, asks_human: bool) -> dict[str, Any]:
    given = _input(arguments)
    if asks_human:
        question = str(given.get("question", "")) if isinstance(given, dict) else str(given)
    else:
        question = f"approve {tool}({arguments})?"
    value = {
        "type": "ask_human" if asks_human else "approval",
        "call_id": call_id,
        "tool": tool,
        "input": given,
        "question": question,
    }
    return {"value": value, "id": interrupt_id(run_id, call_id)}


def of_pending(run_id: str, waiting: Sequence[PendingApproval]) -> list[dict[str, Any]]:
    return [interrupt(run_id, p.call_id, p.tool, p.arguments, asks_human=p.asks_human) for p in waiting]


async def pending(api: ApiState, tenant: str, row: RunRow | None) -> list[PendingApproval]:
    """What the run waits for now: its live pending approvals (none unless its row says it waits)."""
    if row is None or row.status != RunStatus.WAITING_APPROVAL:
        return []
    try:
        return list((await api.wp.progress(row.run_id, tenant_id=tenant)).pending_approvals)
    except (Conflict, InvalidInput):  # ended meanwhile
        return []


async def interrupts(api: ApiState, tenant: str, row: RunRow | None) -> list[dict[str, Any]]:
    return of_pending(row.run_id, await pending(api, tenant, row)) if row is not None else []


def task(run_id: str, step: int, found: list[dict[str, Any]]) -> dict[str, Any]:
    """The pending `tools` node of a step whose calls wait, as LangGraph lists a task."""
    return {
        "id": f"{run_id}:{step}:tools",
        "name": "tools",
        "path": ["__pregel_pull", "tools"],
        "error": None,
        "interrupts": found,
        "checkpoint": None,
        "state": None,
        "result": None,
    }


def from_log(row: EventRow, live: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The interrupts a `status_changed` event to waiting_approval stands for: `live[seq]` (read from
    the run's pending approvals as the stream passed it), else the calls its detail names
    (`<tool> (<call id>), ...`; their input is in the step's model response, logged after the wait)."""
    if row.kind != EventKind.STATUS_CHANGED or row.payload.get("status") != RunStatus.WAITING_APPROVAL:
        return []
    if live.get(row.seq):
        return live[row.seq]
    named = re.findall(r"(\S+) \(([^()]*)\)", str(row.payload.get("detail") or ""))
    return [interrupt(row.run_id, call, tool, "", asks_human=tool == ASK_HUMAN_TOOL) for tool, call in named]


def is_wait(row: EventRow | None) -> bool:
    return (
        row is not None
        and row.kind == EventKind.STATUS_CHANGED
        and row.payload.get("status") == RunStatus.WAITING_APPROVAL
    )


# --- resume -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    call_id: str
    approved: bool
    reason: str | None = None
    edited_input: dict[str, Any] | None = None
    answer: str | None = None


def check_command(command: dict[str, Any]) -> Any:
    """The resume value of a command; goto/update are refused (501) naming what to do."""
    if command.get("goto") or command.get("update"):
        raise not_supported(NO_GOTO)
    if "resume" not in command:
        raise InvalidInput("a command answers an interrupt: send command={'resume': <value>}")
    return command["resume"]


def answers(run_id: str, waiting: Sequence[PendingApproval], value: Any) -> list[Answer]:
    """The decisions a resume value stands for, every one checked before any is delivered."""
    ids = {interrupt_id(run_id, p.call_id): p for p in waiting}
    if isinstance(value, dict) and isinstance(value.get("decisions"), list):
        # LangChain's human-in-the-loop shape (what `useStream` front ends send): one decision per
        # waiting call, in order.
        decisions = value["decisions"]
        if len(decisions) != len(waiting):
            raise Mismatch(f"{len(decisions)} decisions for {len(waiting)} waiting calls: send one per call, in order")
        return [_answer(p, _decision(d)) for p, d in zip(waiting, decisions, strict=True)]
    if isinstance(value, dict) and value and all(k in ids or ":" in k for k in value):
        unknown = [k for k in value if k not in ids]
        if unknown:
            raise Mismatch(f"no interrupt {', '.join(unknown)} waits: the waiting ones are {', '.join(ids)}")
        return [_answer(ids[k], v) for k, v in value.items()]
    if len(waiting) > 1:
        raise Mismatch(f"{len(waiting)} interrupts wait ({', '.join(ids)}): resume with a map of interrupt id to value")
    return [_answer(waiting[0], value)]


def _decision(decision: Any) -> Any:
    """A LangChain human-in-the-loop decision (`{"type": "approve"|"reject"|"edit", ...}`) as a resume value."""
    kind = decision.get("type") if isinstance(decision, dict) else None
    if kind == "approve":
        return {"action": "approve"}
    if kind == "reject":
        return {"action": "deny", "reason": decision.get("message")}
    if kind == "edit":
        action = decision.get("edited_action")
        return {"action": "edit", "input": action.get("args") if isinstance(action, dict) else None}
    raise Mismatch(f"{json.dumps(decision)[:200]}: a decision is {{'type': 'approve' | 'reject' | 'edit', ...}}")


def _answer(p: PendingApproval, value: Any) -> Answer:
    action = value.get("action", "approve" if "answer" in value else None) if isinstance(value, dict) else None
    reason = value.get("reason") if isinstance(value, dict) else None
    if reason is not None and not isinstance(reason, str):
        raise Mismatch(f"the reason for {p.call_id} must be text")
    if value is False or (not p.asks_human and value in DENY) or action in ("deny", "reject"):
        return Answer(p.call_id, False, reason or "denied through an Agent Protocol resume")
    if p.asks_human:
        text = value if isinstance(value, str) else value.get("answer") if isinstance(value, dict) else None
        if not isinstance(text, str):
            raise Mismatch(
                f"interrupt {p.call_id} asks a question ({p.tool}): resume with the answer as text or "
                "{'answer': '...'} (or {'action': 'deny', 'reason': ...})"
            )
        return Answer(p.call_id, True, reason, answer=text)
    expected = (
        f"interrupt {p.call_id} waits for an approval of {p.tool}: resume with true / 'approve' / "
        "{'action': 'approve'}, false / {'action': 'deny', 'reason': ...}, or {'action': 'edit', 'input': {...}}"
    )
    if value in APPROVE or action in ("approve", "accept"):
        if isinstance(value, dict) and "answer" in value:
            raise Mismatch(f"an answer does not fit: {expected}")
        return Answer(p.call_id, True, reason)
    if action == "edit":
        edited = value.get("input", value.get("args"))
        if not isinstance(edited, dict):
            raise Mismatch(f"an edit carries the tool's arguments as an object in 'input': {expected}")
        return Answer(p.call_id, True, reason, edited_input=edited)
    raise Mismatch(f"{json.dumps(value)[:200]} does not fit: {expected}")


async def deliver(api: ApiState, tenant: str, run_id: str, chosen: Sequence[Answer]) -> None:
    for a in chosen:
        if a.approved:
            await api.wp.approve(
                run_id, a.call_id, a.reason, edited_input=a.edited_input, answer=a.answer, tenant_id=tenant
            )
        else:
            await api.wp.deny(run_id, a.call_id, a.reason, tenant_id=tenant)


async def resume(api: ApiState, tenant: str, row: RunRow | None, status: str, where: str, value: Any) -> str:
    """Answer what `row` (the run of `where`, a thread or a run) waits for with a resume value; returns
    the run's id (the same run goes on). Conflict when nothing waits, naming the status."""
    waiting = await pending(api, tenant, row)
    if row is None or not waiting:
        raise Conflict(f"{where} is {status}, not interrupted: there is no interrupt to resume")
    await deliver(api, tenant, row.run_id, answers(row.run_id, waiting, value))
    return row.run_id
