"""A run's stream in the Agent Protocol's SSE format (what LangGraph clients read).

    event: metadata   data: {"run_id": ..., "attempt": 1}           first, once
    event: values     data: {"messages": [...]}                      the conversation after each node
    event: updates    data: {"model": {"messages": [...]}} or {"tools": {...}}
    event: messages   data: [message chunk, metadata]                "messages-tuple": token deltas (metadata:
                      run_id, thread_id, langgraph_step/_node/_checkpoint_ns, ls_provider, ls_model_name)
    event: tools      data: {"event": "tool-started", ...}           "tools": each call's start and end (parts.py)
    event: custom     data: {"event": {...}} or {"delta": {...}}     Waypoint's own log events and deltas
    event: messages/metadata, messages/partial, messages/complete    "messages" (parts.py)
    event: events     data: {"event": "on_chat_model_stream", ...}   "events": astream_events v2 (parts.py)
    event: debug, tasks, checkpoints                                  a task per node, a checkpoint per step
    event: error      data: {"error": ..., "message": ...}           a failed run, or a client cut off
    event: updates    data: {"__interrupt__": [{"value": ..., "id": ...}]}   the run waits for a human
                      (and `values` with `__interrupt__`); the stream ends there (protocol/interrupts.py)

With `stream_subgraphs`, the parts of the sub-agent runs below the run come too, each run's
rendered as above, their event names carrying the run's namespace as LangGraph servers send a
subgraph's (`values|<ns>`, `updates|<ns>`, ...; langgraph-sdk splits it on `|`): one
`<agent>:<run id>` per level below the run, e.g. `values|note_reader:<run>.1.0`.

The log event behind a part gives it its SSE id (its seq, on the last part it yields), so the
SDK's reconnect with Last-Event-ID resumes exactly; deltas carry no id. A failed attempt's
chunks carry their own message id (`<run>:<step>:<attempt>`), the retry's another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sse_starlette import ServerSentEvent

from waypoint.app.http.protocol.interrupts import from_log
from waypoint.app.http.protocol.parts import lenses
from waypoint.app.http.protocol.parts import now as parts_now
from waypoint.app.http.protocol.shapes import ai_id, lc_messages, values
from waypoint.app.http.streams import StreamItem, delta_data, event_data, merged
from waypoint.app.http.trees import TreeStream
from waypoint.client import EventRow
from waypoint.deltas import AttemptText
from waypoint.errors import InvalidInput
from waypoint.names import EventKind, RunStatus

SUPPORTED_MODES = (
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "events",
    "debug",
    "tasks",
    "checkpoints",
    "custom",
    "tools",
)
DELTA_MODES = {"messages", "messages-tuple", "events", "custom"}  # the modes that show a model's tokens


def stream_modes(value: str | Sequence[str] | None) -> list[str]:
    """The requested modes, `values` when none is; an empty one is none (langgraph-sdk's
    `join_stream` without `stream_mode` sends `?stream_mode=`)."""
    modes = [m for m in ([value] if isinstance(value, str) else list(value or [])) if m]
    unknown = [m for m in modes if m not in SUPPORTED_MODES]
    if unknown:
        raise InvalidInput(
            f"stream mode {', '.join(unknown)} is not supported: use {', '.join(SUPPORTED_MODES)} "
            "(messages and messages-tuple carry the model's tokens)"
        )
    return modes or ["values"]


def wants_deltas(modes: Iterable[str]) -> bool:
    return bool(DELTA_MODES.intersection(modes))


def sse(event: str, data: Any) -> ServerSentEvent:
    return ServerSentEvent(json.dumps(data), event=event)


class ProtocolFormat:
    """Renders a run's stream items; `prior` is the conversation before the run, `resume_after`
    the seq a reconnecting client saw last (earlier events update the state but are not sent)."""

    def __init__(
        self,
        run_id: str,
        modes: list[str],
        prior: list[dict[str, Any]],
        *,
        forked: bool,
        resume_after: int = 0,
        thread_id: str | None = None,
    ):
        self.run_id = run_id
        self.thread_id = thread_id  # the thread it runs on (its top run's, for a sub-agent run), if any
        self.spec: str | None = None  # the model spec its steps call (its plan's, until a failover)
        self.modes = set(modes)
        self.messages = list(prior)
        self.forked = forked
        self.resume_after = resume_after
        self.expected_tools: dict[int, int] = {}
        self.tool_messages: dict[int, list[dict[str, Any]]] = {}
        self.streamed: set[tuple[int, int]] = set()
        self.output_json: Any = None  # a typed answer, once the run ends with one
        self.interrupts: dict[int, list[dict[str, Any]]] = {}  # by seq of the wait's status event (read live)
        self.begun: set[tuple[int, int]] = set()  # (step, attempt) whose model call a lens was told of
        self.so_far: dict[tuple[int, int], AttemptText] = {}  # what each attempt in flight said so far
        self.lenses = lenses(self, self.modes)

    def opening(self) -> list[ServerSentEvent]:
        return [sse("metadata", {"run_id": self.run_id, "attempt": 1})]

    def render(self, item: StreamItem) -> list[ServerSentEvent]:
        if item.kind == "event" and item.event is not None:
            row = item.event
            out = self._event(row)
            if row.seq <= self.resume_after:
                return []
            if out:
                out[-1].id = str(row.seq)
            return out
        if item.kind == "snapshot" and item.snapshot is not None:
            return self._delta(item.snapshot, snapshot=True)
        if item.kind == "delta" and item.batch is not None:
            _, joined = merged(item.batch)
            return self._delta(joined, snapshot=False)
        message = (
            f"this client read too slowly and was cut off after event {item.last_seq}: "
            f"reconnect with Last-Event-ID: {item.last_seq}"
        )
        return [sse("error", {"error": "SlowClient", "message": message})]

    def meta(self, step: int, node: str, attempt: int | None = None, spec: str | None = None) -> dict[str, Any]:
        """A part's metadata, as LangGraph Server's: the run and thread, the node's step and task
        (its checkpoint namespace `<node>:<task id>`, the task ids of `tasks`), and for the model
        node the model it called (`ls_provider`, `ls_model_name`, from the spec `provider:model`)."""
        namespace = f"{node}:{self.run_id}:{step}:{node}"
        meta: dict[str, Any] = {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "langgraph_step": step,
            "langgraph_node": node,
            "langgraph_triggers": [f"branch:to:{node}"],
            "langgraph_checkpoint_ns": namespace,
            "checkpoint_ns": namespace,
        }
        if node == "model" and (spec := spec or self.spec):
            provider, _, name = spec.rpartition(":")
            meta.update({"ls_provider": provider} if provider else {}, ls_model_name=name, ls_model_type="chat")
        if attempt is not None:
            meta["waypoint_attempt"] = attempt
        return meta

    def _tell(self, hook: str, *args: Any) -> list[ServerSentEvent]:
        """Every lens's parts for one point of the run (`parts.Lens`'s hooks)."""
        return [part for lens in self.lenses for part in getattr(lens, hook)(*args)]

    def _begin(self, step: int, attempt: int, at: str) -> list[ServerSentEvent]:
        """What the lenses say when a step's model call shows first (a token, or its answer)."""
        if (step, attempt) in self.begun:
            return []
        first = not any(s == step for s, _ in self.begun)
        self.begun.add((step, attempt))
        return self._tell("model_begins", step, attempt, at, first)

    def _so_far(self, joined: AttemptText, *, snapshot: bool) -> AttemptText:
        key = (joined.step, joined.attempt)
        so_far = self.so_far.get(key)
        if snapshot or so_far is None:
            so_far = self.so_far[key] = AttemptText(joined.step, joined.attempt)
        so_far.text += joined.text
        for i, piece in joined.tool_calls.items():
            call = so_far.tool_calls.setdefault(i, {"index": i, "id": None, "name": None, "arguments": ""})
            call["id"] = call["id"] or piece["id"]
            call["name"] = call["name"] or piece["name"]
            call["arguments"] += piece["arguments"]
        return so_far

    def _delta(self, joined: AttemptText, *, snapshot: bool) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        if self.lenses and (joined.text or joined.tool_calls):
            so_far = self._so_far(joined, snapshot=snapshot)
            out += self._begin(joined.step, joined.attempt, parts_now())
            out += self._tell("model_delta", so_far, joined)
        if "custom" in self.modes:
            data = delta_data(self.run_id, joined.step, joined.attempt, joined.text, joined.tool_calls)
            out.append(sse("custom", {"delta": {**data, "snapshot": snapshot}}))
        if "messages-tuple" in self.modes and (joined.text or joined.tool_calls):
            self.streamed.add((joined.step, joined.attempt))
            chunk = {
                "type": "AIMessageChunk",
                "content": joined.text,
                "id": ai_id(self.run_id, joined.step, joined.attempt),
                "tool_call_chunks": [
                    {"index": i, "id": c["id"], "name": c["name"], "args": c["arguments"], "type": "tool_call_chunk"}
                    for i, c in sorted(joined.tool_calls.items())
                ],
            }
            out.append(sse("messages", [chunk, self.meta(joined.step, "model", joined.attempt)]))
        return out

    def _values(self) -> list[ServerSentEvent]:
        return [sse("values", values(list(self.messages), self.output_json))] if "values" in self.modes else []

    def _event(self, row: EventRow) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        if "custom" in self.modes:
            out.append(sse("custom", {"event": event_data(row)}))
        new = lc_messages(row, forked=self.forked)
        if row.kind == EventKind.RUN_STARTED:
            self.spec = (row.payload.get("plan") or {}).get("model") or self.spec
            out += self._tell("run_started", row, new)
        elif row.kind == EventKind.MODEL_FAILOVER:  # the step, and the run's later steps, call another model
            self.spec = row.payload.get("to") or self.spec
        elif row.kind == EventKind.MODEL_RESPONSE:  # the lenses see the state the model answered first
            out += self._begin(row.step, int(row.payload.get("attempt") or 1), row.created_at.isoformat())
        self.messages += new
        if row.kind in (EventKind.RUN_STARTED, EventKind.USER_MESSAGE) and new:
            out += self._values()
        elif row.kind == EventKind.MODEL_RESPONSE:
            attempt = int(row.payload.get("attempt") or 1)
            self.expected_tools[row.step] = len(row.payload.get("tool_calls") or [])
            if "messages-tuple" in self.modes and (row.step, attempt) not in self.streamed:
                whole = {**new[0], "type": "AIMessageChunk"}  # not streamed (a scripted model): all at once
                out.append(sse("messages", [whole, self.meta(row.step, "model", attempt, row.payload.get("spec"))]))
            self.so_far.pop((row.step, attempt), None)
            out += self._tell("model_answered", row, new[0])
            if "updates" in self.modes:
                out.append(sse("updates", {"model": {"messages": new}}))
            out += self._values()
        elif row.kind == EventKind.TOOL_RESULT:
            if "messages-tuple" in self.modes:
                out.append(sse("messages", [new[0], self.meta(row.step, "tools")]))
            out += self._tell("tool_answered", row, new[0])
            done = self.tool_messages.setdefault(row.step, [])
            done += new
            if len(done) == self.expected_tools.get(row.step, -1):
                out += self._tell("tools_done", row, done)
                if "updates" in self.modes:
                    out.append(sse("updates", {"tools": {"messages": done}}))
                out += self._values()
        elif found := from_log(row, self.interrupts):  # the run waits for a human: LangGraph's interrupt parts
            if "updates" in self.modes:
                out.append(sse("updates", {"__interrupt__": found}))
            if "values" in self.modes:
                out.append(sse("values", {**values(list(self.messages), self.output_json), "__interrupt__": found}))
        elif row.kind == EventKind.RUN_FINISHED:
            out += self._finished(row)
        return out

    def _finished(self, row: EventRow) -> list[ServerSentEvent]:
        out: list[ServerSentEvent] = []
        if row.payload.get("output_json") is not None:
            self.output_json = row.payload["output_json"]  # a typed answer: the last values carry it
        out += self._tell("run_finished", row)
        if self.output_json is not None:
            out += self._values()
        if row.payload.get("status") == RunStatus.FAILED:
            out.append(sse("error", {"error": "RunFailed", "message": row.payload.get("error") or "the run failed"}))
        return out


class SubgraphFormat:
    """The parts of a tree's stream: the top run's as `top` renders them, each run's below through a
    format of its own, its events named with its namespace. Those carry no SSE id: a reconnect
    joins the top run's stream after the top run's seq."""

    def __init__(self, top: ProtocolFormat, stream: TreeStream, modes: list[str]):
        self.top = top
        self.stream = stream
        self.modes = modes
        self.below: dict[str, ProtocolFormat] = {}

    def render(self, item: StreamItem) -> list[ServerSentEvent]:
        run_id = item.run_id
        if run_id in ("", self.stream.top):
            return self.top.render(item)
        fmt = self.below.get(run_id)
        if fmt is None:
            fmt = self.below[run_id] = ProtocolFormat(
                run_id, self.modes, [], forked=False, thread_id=self.top.thread_id
            )
        namespace = "|".join(self.stream.namespace(run_id))
        out = fmt.render(item)
        for part in out:
            part.event = f"{part.event}|{namespace}"
            part.id = None
        return out
