"""Waypoint's rows in the Agent Protocol's shapes (the JSON of LangGraph Server), in one place.

- an assistant is a tenant's configured agent (`wp.assistants`, versioned), or an agent of the
  catalog (its built-in assistant: its id and graph id are the agent's name, version 1);
- a thread's values are `{"messages": [...]}`: the conversation of its newest run, read from the
  log of that run and of the runs it was forked from (LangChain message dicts: human, ai, tool);
- a checkpoint is a step of a run: `checkpoint_id` is `"<run_id>:<step>"`;
- a typed run's answer (its agent's `output_type`) is `structured_response` in its values, as
  LangGraph's `create_react_agent(response_format=...)` has it; the messages show the model's
  `final_answer` tool call and its result;
- run statuses: starting (no row yet), scheduled, queued, waiting_capacity -> pending; running, paused -> running;
  waiting_approval -> interrupted (it waits for a human: its thread is interrupted, a resume answers it
  and the same run goes on); completed, max_steps -> success; budget_exceeded -> timeout;
  cancelled -> interrupted; failed -> error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from waypoint.checks import duration_text
from waypoint.client import MULTITASK_STRATEGIES as STRATEGIES
from waypoint.client import AssistantRow, EventRow, RunRow, ScheduleRow, ThreadRow, builtin
from waypoint.errors import InvalidInput
from waypoint.names import MESSAGE_KINDS, STARTING, EventKind, RunStatus
from waypoint.transcript import event_messages
from waypoint.types import AgentInfo

if TYPE_CHECKING:
    from waypoint.client import Waypoint

RUN_STATUS = {
    RunStatus.RUNNING: "running",
    RunStatus.PAUSED: "running",
    RunStatus.WAITING_APPROVAL: "interrupted",  # stopped at an interrupt (see protocol/interrupts.py)
    RunStatus.WAITING_CAPACITY: "pending",  # queued for capacity: the spec's "pending" is a run not moving yet
    RunStatus.SCHEDULED: "pending",  # a delayed run (after_seconds) before its time
    RunStatus.QUEUED: "pending",  # an enqueued run (multitask_strategy enqueue, interrupt) before its turn
    RunStatus.COMPLETED: "success",
    RunStatus.MAX_STEPS: "success",
    RunStatus.BUDGET_EXCEEDED: "timeout",
    RunStatus.CANCELLED: "interrupted",
    RunStatus.FAILED: "error",
}
NODES = ("model", "tools")  # the "graph" every Waypoint agent runs: model, then tools, until an answer


def iso(at: datetime | None) -> str:
    return (at or datetime.now(UTC)).isoformat()


def run_status(row: RunRow | None) -> str:
    if row is None or row.status == STARTING:  # a run whose worker has not written its row yet
        return "pending"
    return RUN_STATUS.get(RunStatus(row.status), "running")


def thread_status(thread: ThreadRow) -> str:
    last = thread.last
    if last is None:
        return "idle"
    row = last.run
    if row is None or row.status in (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.SCHEDULED, RunStatus.QUEUED):
        return "busy"
    if row.status == RunStatus.WAITING_APPROVAL:
        return "interrupted"
    return "error" if row.status == RunStatus.FAILED else "idle"


def assistant(info: AgentInfo) -> dict[str, Any]:
    """A catalog agent as the protocol's Assistant (its built-in assistant)."""
    return assistant_json(builtin(info))


def assistant_json(row: AssistantRow, *, version_only: bool = False) -> dict[str, Any]:
    """An assistant (or, `version_only`, one of its versions: no `updated_at`) as the protocol's JSON."""
    shaped = {
        "assistant_id": row.assistant_id,
        "graph_id": row.graph_id,
        "name": row.name,
        "description": row.description,
        "config": row.config,
        "context": row.context,
        "metadata": row.metadata,
        "version": row.version,
        "created_at": iso(row.created_at),
    }
    return shaped if version_only else {**shaped, "updated_at": iso(row.updated_at)}


MESSAGES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "messages": {
            "type": "array",
            "description": "Chat messages; the last user message of the input is the run's task.",
            "items": {"type": "object", "properties": {"role": {"type": "string"}, "content": {}}},
        }
    },
    "required": ["messages"],
}
STRUCTURED = "structured_response"  # the values key of a typed answer (LangGraph's name for it)
CONFIG_SCHEMA = {  # waypoint.run_config: any other key is refused
    "type": "object",
    "properties": {
        "model": {"type": "string", "description": "Model spec overriding the agent's, e.g. openai:gpt-4o-mini."},
        "instructions": {"type": "string", "description": "The system prompt in place of the agent's own."},
        "max_steps": {"type": "integer", "minimum": 1},
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_cost_usd": {"type": "number", "exclusiveMinimum": 0},
        "deadline_seconds": {"type": "number", "exclusiveMinimum": 0},
        "priority": {"type": "integer", "minimum": 1, "maximum": 5, "description": "1 (first) to 5 (last); default 3."},
    },
    "additionalProperties": False,
}


def values(messages: list[dict[str, Any]], output_json: Any = None) -> dict[str, Any]:
    """A run's values: its conversation, and its typed answer when it ended with one."""
    return {"messages": messages, **({STRUCTURED: output_json} if output_json is not None else {})}


def schemas(info: AgentInfo) -> dict[str, Any]:
    output = MESSAGES_SCHEMA
    if (typed := info.settings.get("output_schema")) is not None:
        output = {**output, "properties": {"messages": MESSAGES_SCHEMA["properties"]["messages"], STRUCTURED: typed}}
    return {
        "graph_id": info.name,
        "input_schema": MESSAGES_SCHEMA,
        "output_schema": output,
        "state_schema": output,
        "config_schema": CONFIG_SCHEMA,
        "context_schema": CONFIG_SCHEMA,
        "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in info.tools],
    }


def graph(info: AgentInfo) -> dict[str, Any]:
    nodes = [{"id": n, "type": "runnable", "data": n} for n in ("__start__", *NODES, "__end__")]
    edges = [
        {"source": "__start__", "target": "model"},
        {"source": "model", "target": "tools", "conditional": True},
        {"source": "model", "target": "__end__", "conditional": True},
        {"source": "tools", "target": "model"},
    ]
    return {"nodes": nodes, "edges": edges}


def run_json(
    run_id: str,
    thread_id: str | None,
    assistant_id: str,
    row: RunRow | None,
    *,
    strategy: str | None = None,
) -> dict[str, Any]:
    """A run as the protocol's Run, from its row (the row a run just started will have: see
    `Waypoint.run_or_planned`); without one, a run starting as `assistant_id`. `strategy`: the
    multitask strategy it was created with (None: reject, the default)."""
    return {
        "run_id": run_id,
        "thread_id": thread_id,
        "assistant_id": (row.assistant_id or row.agent) if row else assistant_id,
        "created_at": iso(row.created_at if row else None),
        "updated_at": iso(row.updated_at if row else None),
        "status": run_status(row),
        "metadata": {
            "waypoint_status": row.status if row else STARTING,
            "steps": row.steps if row else 0,
            "assistant_version": row.assistant_version if row else None,
            # The agent version it started with (GET /v1/agent-versions/{fingerprint} shows it).
            "agent_fingerprint": row.agent_fingerprint if row else None,
            # The model it calls now (after a failover, not the one it started on) and every one it was on.
            "model": row.current_model if row else None,
            "models_used": row.models_used if row else [],
        },
        "multitask_strategy": strategy or STRATEGIES[0],
        "kwargs": {},
    }


# The open spec's run statuses (langchain-ai/agent-protocol 0.1.6) and its message roles.
SPEC_STATUSES = ("pending", "error", "success", "timeout", "interrupted")
ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}


def spec_run(shaped: dict[str, Any]) -> dict[str, Any]:
    """A run of `run_json` as the open spec's Run: its status set (a live run is `pending`), the
    agent as `agent_id` too, and no `thread_id` for a run on no thread."""
    spec = {**shaped, "agent_id": shaped["assistant_id"]}
    if spec["status"] not in SPEC_STATUSES:
        spec["status"] = "pending"  # running: the spec has no status between pending and its ends
    if spec["thread_id"] is None:
        del spec["thread_id"]  # a run on no thread: the spec's thread_id is a string when present
    return spec


def spec_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LangChain message dicts with the open spec's `role` (user, assistant, tool) beside `type`."""
    return [{**m, "role": ROLES.get(m.get("type", ""), m.get("type", ""))} for m in messages]


# --- messages -------------------------------------------------------------------------------------


def ai_id(run_id: str, step: int, attempt: int) -> str:
    """The id of a step's answer; its streamed chunks carry the same id (one per attempt)."""
    return f"{run_id}:{step}:{attempt}"


def lc_messages(row: EventRow, *, forked: bool = False) -> list[dict[str, Any]]:
    """The LangChain message dicts an event stands for; a fork's `run_started` stands for none (its
    conversation so far comes from its parent), nor do system messages (the agent's instructions)."""
    if row.kind == EventKind.RUN_STARTED and forked:
        return []
    out: list[dict[str, Any]] = []
    for m in event_messages(row.kind, row.payload):
        if m["role"] == "user":
            out.append({"type": "human", "content": m["content"], "id": f"{row.run_id}:{row.seq}"})
        elif m["role"] == "assistant":
            attempt = int(row.payload.get("attempt") or 1)
            calls = [
                {"id": c["id"], "name": c["name"], "args": _args(c["arguments"]), "type": "tool_call"}
                for c in row.payload.get("tool_calls") or []
            ]
            out.append(
                {
                    "type": "ai",
                    "content": m["content"] or "",
                    "id": ai_id(row.run_id, row.step, attempt),
                    "tool_calls": calls,
                }
            )
        elif m["role"] == "tool":
            out.append(
                {
                    "type": "tool",
                    "content": m["content"],
                    "tool_call_id": m["tool_call_id"],
                    "name": row.payload.get("name"),
                    "id": f"{row.run_id}:{row.seq}",
                    "status": "error" if row.payload.get("is_error") else "success",
                }
            )
    return out


def _args(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {"__raw__": arguments}


def task_of(value: Any) -> str:
    """The run's task: the last user message of `{"messages": [...]}` (LangChain or OpenAI shape)."""
    messages = value.get("messages") if isinstance(value, dict) else None
    if not isinstance(messages, list) or not messages:
        raise InvalidInput('the input must be {"messages": [...]} with a user message last: the run\'s task')
    for m in reversed(messages):
        if isinstance(m, str):
            return m
        if isinstance(m, dict) and (m.get("role") in ("user", "human") or m.get("type") == "human"):
            content = m.get("content")
            if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if isinstance(content, str) and content.strip():
                return content
    raise InvalidInput("input.messages has no user message with text: add one (role user, or type human)")


# --- a run's conversation, across the runs it was forked from ---------------------------------------


@dataclass(frozen=True)
class Entry:
    """One message-bearing event of a conversation, with the messages it stands for."""

    run_id: str
    step: int
    seq: int
    at: datetime
    messages: list[dict[str, Any]]


async def conversation(wp: Waypoint, tenant_id: str, run_id: str) -> list[Entry]:
    """Every message event of the run and of its ancestors (each up to the step its child forked at)."""
    # Each ancestor link carries the step its child forked at: the last step of it in the conversation.
    chain = [link for link in await wp.lineage(run_id, tenant_id=tenant_id) if link.relation == "ancestor"]
    upto = [(link.run_id, link.forked_at, i > 0) for i, link in enumerate(chain)]
    upto.append((run_id, None, bool(chain)))
    entries: list[Entry] = []
    for rid, last_step, forked in upto:
        for row in await wp.events(rid, kinds=list(MESSAGE_KINDS), tenant_id=tenant_id):
            if last_step is not None and row.step > last_step:
                break
            entries.append(Entry(rid, row.step, row.seq, row.created_at, lc_messages(row, forked=forked)))
    return entries


def flatten(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    return [m for e in entries for m in e.messages]


# --- crons: scheduled agents ---------------------------------------------------------------------

# A schedule's overlap policy as the multitask strategy a cron was made with (rollback was made as
# interrupt: both cancel the running run); allow_all (`waypoint cron --overlap allow_all`) has none.
STRATEGY_OF = {"skip": "reject", "buffer_one": "enqueue", "cancel_other": "interrupt"}


def cron_schedule(spec: dict[str, Any]) -> str:
    """The cron expression; a schedule made with an interval (`waypoint cron create --every 1h`)
    reads as Temporal's `@every 1h`."""
    return spec.get("cron") or f"@every {duration_text(spec.get('every') or 0)}"


def cron_json(row: ScheduleRow) -> dict[str, Any]:
    """A schedule as the protocol's Cron: `enabled` is not paused, `payload` what each fire starts."""
    spec = row.spec
    configurable = {k: spec[k] for k in ("model", "max_steps", "priority") if spec.get(k) is not None}
    payload: dict[str, Any] = {
        "assistant_id": row.agent,
        "input": {"messages": [{"role": "user", "content": row.task}]},
        "config": {"configurable": configurable},
        "multitask_strategy": STRATEGY_OF.get(spec.get("overlap", "skip")),
        "overlap": spec.get("overlap", "skip"),
    }
    if spec.get("webhook"):
        payload["webhook"] = spec["webhook"]
    return {
        "cron_id": row.schedule_id,
        "assistant_id": row.agent,
        "thread_id": row.thread_id,
        "user_id": row.tenant_id,
        "schedule": cron_schedule(spec),
        "timezone": spec.get("tz") or "UTC",
        "end_time": spec.get("end_at"),
        "next_run_date": row.next_runs[0].isoformat() if row.next_runs and not row.paused else None,
        "enabled": not row.paused,
        "on_run_completed": None if row.thread_id else "delete",
        "payload": payload,
        "metadata": {},
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at or row.created_at),
    }
