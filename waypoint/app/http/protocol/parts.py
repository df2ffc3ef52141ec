"""The stream modes that describe a run as LangGraph's graph would (model node, then tools node,
one checkpoint per step): `messages`, `events`, `tools`, `debug`, `tasks` and `checkpoints`.

`ProtocolFormat` (stream.py) reads the run's log and deltas and calls one `Lens` per requested
mode at the points of the run a graph would report: a step's model call begins (its first token,
or its answer when the model did not stream), a token delta, the answer, a tool result, the
step's tools done, the run's start and end. Each lens answers the SSE events of its mode.

Ids are stable across reconnects: a step's answer is `<run>:<step>:<attempt>` (as in
`messages-tuple`), a node's task `<run>:<step>:model|tools`, a checkpoint `<run>:<step>`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from sse_starlette import ServerSentEvent

from waypoint.app.http.protocol.shapes import ai_id, values
from waypoint.deltas import AttemptText

if TYPE_CHECKING:
    from waypoint.client import EventRow


class RunView(Protocol):
    """What a lens reads of the run it describes: its id, the conversation so far, its typed answer
    and a part's metadata. `ProtocolFormat` (stream.py, which builds the lenses) is one; the lenses
    name only this, so they do not import the module above them."""

    run_id: str
    messages: list[dict[str, Any]]
    output_json: Any

    def meta(self, step: int, node: str, attempt: int | None = None, spec: str | None = None) -> dict[str, Any]: ...


GRAPH = "LangGraph"  # the name LangGraph gives the whole graph's chain in `events`


def sse(event: str, data: Any) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data), event=event)


def now() -> str:
    return datetime.now(UTC).isoformat()


def partial_ai(run_id: str, text: AttemptText) -> dict[str, Any]:
    """The answer so far as a LangChain AI message dict: its text and the tool calls whose
    arguments parse already (all of them, as raw chunks, in `tool_call_chunks`)."""
    calls, chunks = [], []
    for i, c in sorted(text.tool_calls.items()):
        chunks.append({"index": i, "id": c["id"], "name": c["name"], "args": c["arguments"], "type": "tool_call_chunk"})
        try:
            args = json.loads(c["arguments"] or "{}")
        except json.JSONDecodeError:
            continue
        calls.append({"id": c["id"], "name": c["name"], "args": args, "type": "tool_call"})
    return {
        "type": "ai",
        "id": ai_id(run_id, text.step, text.attempt),
        "content": text.text,
        "tool_calls": calls,
        "tool_call_chunks": chunks,
        "invalid_tool_calls": [],
        "additional_kwargs": {},
        "response_metadata": {},
    }


class Lens:
    """One mode's view of a run: each hook answers that mode's parts (none by default)."""

    def __init__(self, fmt: RunView):
        self.fmt = fmt

    def run_started(self, row: EventRow, new: list[dict[str, Any]]) -> list[ServerSentEvent]:
        return []

    def model_begins(self, step: int, attempt: int, at: str, first_of_step: bool) -> list[ServerSentEvent]:
        return []

    def model_delta(self, so_far: AttemptText, piece: AttemptText) -> list[ServerSentEvent]:
        return []

    def model_answered(self, row: EventRow, ai: dict[str, Any]) -> list[ServerSentEvent]:
        return []

    def tool_answered(self, row: EventRow, message: dict[str, Any]) -> list[ServerSentEvent]:
        return []

    def tools_done(self, row: EventRow, messages: list[dict[str, Any]]) -> list[ServerSentEvent]:
        return []

    def run_finished(self, row: EventRow) -> list[ServerSentEvent]:
        return []


class MessagesLens(Lens):
    """`messages`: `messages/metadata` once per message, `messages/partial` with the answer so far
    after each token delta, `messages/complete` with each answer and tool result."""

    def __init__(self, fmt: RunView):
        super().__init__(fmt)
        self.announced: set[str] = set()

    def _metadata(self, message_id: str, step: int, node: str, attempt: int | None = None) -> list[ServerSentEvent]:
        if message_id in self.announced:
            return []
        self.announced.add(message_id)
        return [sse("messages/metadata", {message_id: {"metadata": self.fmt.meta(step, node, attempt)}})]

    def model_delta(self, so_far: AttemptText, piece: AttemptText) -> list[ServerSentEvent]:
        ai = partial_ai(self.fmt.run_id, so_far)
        return [*self._metadata(ai["id"], so_far.step, "model", so_far.attempt), sse("messages/partial", [ai])]

    def model_answered(self, row: EventRow, ai: dict[str, Any]) -> list[ServerSentEvent]:
        attempt = int(row.payload.get("attempt") or 1)
        return [*self._metadata(ai["id"], row.step, "model", attempt), sse("messages/complete", [ai])]

    def tool_answered(self, row: EventRow, message: dict[str, Any]) -> list[ServerSentEvent]:
        return [*self._metadata(message["id"], row.step, "tools"), sse("messages/complete", [message])]


class EventsLens(Lens):
    """`events`: LangChain's astream_events (v2) for the graph, each node, the chat model and each tool."""

    def _event(self, kind: str, name: str, run_id: str, step: int, node: str, data: dict[str, Any]) -> ServerSentEvent:
        meta = self.fmt.meta(step, node)
        return sse(
            "events", {"event": kind, "name": name, "run_id": run_id, "tags": [], "metadata": meta, "data": data}
        )

    def _ids(self, step: int, node: str) -> str:
        return f"{self.fmt.run_id}:{step}:{node}"

    def run_started(self, row: EventRow, new: list[dict[str, Any]]) -> list[ServerSentEvent]:
        return [self._event("on_chain_start", GRAPH, self.fmt.run_id, row.step, "", {"input": {"messages": new}})]

    def model_begins(self, step: int, attempt: int, at: str, first_of_step: bool) -> list[ServerSentEvent]:
        out = []
        if first_of_step:
            state = {"messages": list(self.fmt.messages)}
            out.append(
                self._event("on_chain_start", "model", self._ids(step, "model"), step, "model", {"input": state})
            )
        chat = ai_id(self.fmt.run_id, step, attempt)
        out.append(
            self._event(
                "on_chat_model_start",
                "chat_model",
                chat,
                step,
                "model",
                {"input": {"messages": [list(self.fmt.messages)]}},
            )
        )
        return out

    def model_delta(self, so_far: AttemptText, piece: AttemptText) -> list[ServerSentEvent]:
        chunk = {**partial_ai(self.fmt.run_id, piece), "type": "AIMessageChunk", "tool_calls": []}
        chat = ai_id(self.fmt.run_id, so_far.step, so_far.attempt)
        return [self._event("on_chat_model_stream", "chat_model", chat, so_far.step, "model", {"chunk": chunk})]

    def model_answered(self, row: EventRow, ai: dict[str, Any]) -> list[ServerSentEvent]:
        step = row.step
        out = [
            self._event("on_chat_model_end", "chat_model", ai["id"], step, "model", {"output": ai}),
            self._event(
                "on_chain_end", "model", self._ids(step, "model"), step, "model", {"output": {"messages": [ai]}}
            ),
        ]
        if ai["tool_calls"]:  # the tools node starts at once, every call of it with it
            tools = self._ids(step, "tools")
            out.append(self._event("on_chain_start", "tools", tools, step, "tools", {"input": {"messages": [ai]}}))
            for call in ai["tool_calls"]:
                out.append(
                    self._event("on_tool_start", call["name"], call["id"], step, "tools", {"input": call["args"]})
                )
        return out

    def tool_answered(self, row: EventRow, message: dict[str, Any]) -> list[ServerSentEvent]:
        call = message["tool_call_id"]
        return [self._event("on_tool_end", message["name"] or "tool", call, row.step, "tools", {"output": message})]

    def tools_done(self, row: EventRow, messages: list[dict[str, Any]]) -> list[ServerSentEvent]:
        tools = self._ids(row.step, "tools")
        return [self._event("on_chain_end", "tools", tools, row.step, "tools", {"output": {"messages": messages}})]

    def run_finished(self, row: EventRow) -> list[ServerSentEvent]:
        output = values(list(self.fmt.messages), self.fmt.output_json)
        return [self._event("on_chain_end", GRAPH, self.fmt.run_id, row.step, "", {"output": output})]


class TasksLens(Lens):
    """`debug`, `tasks` and `checkpoints`: a task per node run (`task`, then `task_result`) and a
    checkpoint per step, the first (the input's) before step 1's model task.

    debug:        {"type": "checkpoint"|"task"|"task_result", "timestamp", "step", "payload"}
    tasks:        the task and task_result payloads
    checkpoints:  the checkpoint payloads
    """

    def __init__(self, fmt: RunView, mode: str):
        super().__init__(fmt)
        self.mode = mode
        self.checkpointed = -1  # the step of the last checkpoint sent
        self.final: int | None = None  # the step that answered without tool calls: checkpointed at the end

    def _part(self, kind: str, step: int, at: str, payload: dict[str, Any]) -> list[ServerSentEvent]:
        if self.mode == "debug":
            return [sse("debug", {"type": kind, "timestamp": at, "step": step, "payload": payload})]
        if (self.mode == "checkpoints") == (kind == "checkpoint"):
            return [sse(self.mode, payload)]
        return []

    def _config(self, step: int) -> dict[str, Any]:
        checkpoint = f"{self.fmt.run_id}:{step}"
        return {"configurable": {"checkpoint_ns": "", "checkpoint_id": checkpoint, "run_id": self.fmt.run_id}}

    def _checkpoint(self, step: int, at: str, next_node: str | None, source: str) -> list[ServerSentEvent]:
        parent = self._config(self.checkpointed) if self.checkpointed >= 0 else None
        self.checkpointed = step
        task_id = f"{self.fmt.run_id}:{step + 1}:{next_node}"
        payload: dict[str, Any] = {
            "config": self._config(step),
            "parent_config": parent,
            "metadata": {"source": source, "step": step, "run_id": self.fmt.run_id},
            "values": values(list(self.fmt.messages), self.fmt.output_json),
            "next": [next_node] if next_node else [],
            "tasks": [{"id": task_id, "name": next_node, "interrupts": [], "state": None}] if next_node else [],
        }
        return self._part("checkpoint", step, at, payload)

    def _task(self, step: int, node: str, at: str, state: dict[str, Any]) -> list[ServerSentEvent]:
        task_id = f"{self.fmt.run_id}:{step}:{node}"
        return self._part(
            "task", step, at, {"id": task_id, "name": node, "input": state, "triggers": [f"branch:to:{node}"]}
        )

    def _result(self, step: int, node: str, at: str, messages: list[dict[str, Any]]) -> list[ServerSentEvent]:
        task_id = f"{self.fmt.run_id}:{step}:{node}"
        result = {"messages": messages}
        payload: dict[str, Any] = {"id": task_id, "name": node, "error": None, "result": result, "interrupts": []}
        return self._part("task_result", step, at, payload)

    def model_begins(self, step: int, attempt: int, at: str, first_of_step: bool) -> list[ServerSentEvent]:
        if not first_of_step:
            return []
        out = self._checkpoint(step - 1, at, "model", "input") if self.checkpointed < 0 else []
        return out + self._task(step, "model", at, values(list(self.fmt.messages)))

    def model_answered(self, row: EventRow, ai: dict[str, Any]) -> list[ServerSentEvent]:
        at = row.created_at.isoformat()
        out = self._result(row.step, "model", at, [ai])
        if ai["tool_calls"]:
            return out + self._task(row.step, "tools", at, values(list(self.fmt.messages)))
        self.final = row.step  # its checkpoint comes with the run's end (a typed answer is in its values)
        return out

    def tools_done(self, row: EventRow, messages: list[dict[str, Any]]) -> list[ServerSentEvent]:
        at = row.created_at.isoformat()
        return self._result(row.step, "tools", at, messages) + self._checkpoint(row.step, at, "model", "loop")

    def run_finished(self, row: EventRow) -> list[ServerSentEvent]:
        if self.final is None:  # stopped after a step's tools (cancelled, max steps): checkpointed then
            return []
        return self._checkpoint(self.final, row.created_at.isoformat(), None, "loop")


class ToolsLens(Lens):
    """`tools`: each tool call's lifecycle, in the payloads of LangGraph's `tools` stream mode (its
    StreamToolCallHandler): `tool-started` `{tool_call_id, tool_name, input}` when the model's
    answer asks for the call (the tools node starts every call of it at once, one that waits for a
    human's approval too), then `tool-finished` `{tool_call_id, output}` with its result, or
    `tool-error` `{tool_call_id, message}` when the call failed (a tool error, a bad call, a denial)."""

    def model_answered(self, row: EventRow, ai: dict[str, Any]) -> list[ServerSentEvent]:
        return [
            sse("tools", {"event": "tool-started", "tool_call_id": c["id"], "tool_name": c["name"], "input": c["args"]})
            for c in ai["tool_calls"]
        ]

    def tool_answered(self, row: EventRow, message: dict[str, Any]) -> list[ServerSentEvent]:
        call = message["tool_call_id"]
        if message.get("status") == "error":
            return [sse("tools", {"event": "tool-error", "tool_call_id": call, "message": message["content"]})]
        return [sse("tools", {"event": "tool-finished", "tool_call_id": call, "output": message["content"]})]


def lenses(fmt: RunView, modes: set[str]) -> list[Lens]:
    out: list[Lens] = []
    if "messages" in modes:
        out.append(MessagesLens(fmt))
    if "tools" in modes:
        out.append(ToolsLens(fmt))
    if "events" in modes:
        out.append(EventsLens(fmt))
    out += [TasksLens(fmt, m) for m in ("debug", "tasks", "checkpoints") if m in modes]
    return out
