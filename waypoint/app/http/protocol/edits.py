"""Agent Protocol state edits (`threads.update_state`), mapped onto Waypoint's fork.

A thread's checkpoints are steps of its runs (`<run_id>:<step>`), written once and never changed.
`POST /threads/{id}/state` adds a checkpoint instead: it forks the thread's newest run (or the
run and step `checkpoint_id` names) at that step with the new user message, as a message-only fork
(`Waypoint.fork(message_only=True)`): it takes no step and calls no model, and ends at once,
`completed` (the Agent Protocol's `success`), holding the old state plus the message. It takes the
thread's next place, so the thread's state and history show it, and the next run on the thread goes
on from it; the checkpoint it forked stays as it was.

Only a user message can be added this way (a fork's input is one); the checkpoint's metadata
(`PATCH /threads/{id}/state`) has nowhere to live: checkpoints are derived from the run log.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.problems import not_supported
from waypoint.app.http.protocol.threads import checkpoint_ref
from waypoint.errors import Conflict, InvalidInput
from waypoint.names import RunStatus

router = APIRouter(tags=["agent protocol: threads"])

# The nodes a user message may be added "as": the graph's entry (or none named).
# How long an update waits for its fork to end before it answers (a worker that is down: at once after).
SETTLE_SECONDS = 30.0
AS_NODES = (None, "__start__", "human", "user")
SUPPORTED = (
    'values {"messages": [<user messages>]} (role user or type human, text content), '
    'optionally with checkpoint_id and as_node "__start__"'
)


class StateUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore")
    values: dict[str, Any] | list[Any] | None = None
    as_node: str | None = None
    checkpoint_id: str | None = None
    checkpoint: dict[str, Any] | None = None
    task_id: str | None = None


def _text(message: Any) -> str:
    """The text of one user message; InvalidInput for anything else (an ai or tool message...)."""
    if isinstance(message, str):
        return message
    if not isinstance(message, dict):
        raise InvalidInput(f"update_state adds user messages, not {type(message).__name__}: {SUPPORTED}")
    kind = message.get("type") or message.get("role")
    if kind not in ("human", "user"):
        raise InvalidInput(
            f"update_state adds only user messages, not a {kind!r} message (a fork's input is a user message): "
            f"{SUPPORTED}"
        )
    content = message.get("content")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput(f"a user message given to update_state needs text content: {SUPPORTED}")
    return content


def user_message(body: StateUpdate) -> str:
    """The one message the fork adds: the user messages given, in order, as one turn."""
    if body.as_node not in AS_NODES:
        raise InvalidInput(
            f"update_state as node {body.as_node!r} is not supported: a user message enters at the graph's "
            f"start (as_node omitted or '__start__'); {SUPPORTED}"
        )
    if body.task_id is not None:
        raise InvalidInput(f"update_state with a task_id is not supported: {SUPPORTED}")
    values = body.values
    if isinstance(values, list):
        raise InvalidInput(f"update_state takes one update, not a list of them: {SUPPORTED}")
    if not values or "messages" not in values:
        raise InvalidInput(f"update_state needs a user message to add: {SUPPORTED}")
    if others := sorted(k for k in values if k != "messages"):
        raise InvalidInput(f"update_state changes only messages, not {', '.join(others)}: {SUPPORTED}")
    found = values["messages"]
    messages = found if isinstance(found, list) else [found]
    if not messages:
        raise InvalidInput(f"update_state needs a user message to add: {SUPPORTED}")
    return "\n\n".join(_text(m) for m in messages)


@router.post("/threads/{thread_id}/state")
async def update_state(thread_id: str, body: StateUpdate, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Add a user message to the thread's state (or to an earlier checkpoint's: a branch) as a new
    checkpoint: a fork that ends before its first step. Answers the new checkpoint."""
    message = user_message(body)
    wanted = body.checkpoint_id or (body.checkpoint or {}).get("checkpoint_id")
    checkpoint = str(wanted) if wanted else None
    run_id, step = await api.wp.threads.add_message(thread_id, message, checkpoint=checkpoint, tenant_id=tenant)
    # The fork ends in moments (no model call); answering after it ends means the thread is idle
    # again and its state shows the new checkpoint when the client reads it next.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_SECONDS):
            ended = await api.wp.result(run_id, tenant_id=tenant)
            if ended.status == RunStatus.FAILED:
                raise Conflict(f"the state update (run {run_id}) failed: {ended.error}")
    ref = checkpoint_ref(thread_id, run_id, step)
    return {"checkpoint": ref, "configurable": {k: v for k, v in ref.items() if k != "checkpoint_map"}}


@router.patch("/threads/{thread_id}/state")
async def patch_state(thread_id: str, api: Api, tenant: Tenant) -> None:
    await api.wp.threads.get(thread_id, tenant_id=tenant)
    raise not_supported(
        "a checkpoint's metadata is not stored: checkpoints are steps of the run log, their metadata "
        "(run_id, step, source) derived from it. Keep your own keys on the thread (PATCH /threads/{thread_id} "
        "with metadata)"
    )
