"""A run's stream as AG-UI events (`GET /v1/runs/{id}/stream?format=agui`).

    RUN_STARTED                      the run_started event
    STEP_STARTED / STEP_FINISHED     around each step ("step 3")
    TEXT_MESSAGE_START/CONTENT/END   the model's text: streamed deltas, or the whole answer at once
    TOOL_CALL_START/ARGS/END         the model's tool calls, the same way
    TOOL_CALL_RESULT                 each tool_result
    STATE_SNAPSHOT                   the run's status and counters, at each status change and step end
    CUSTOM                           waypoint.attempt_failed (with the failure), waypoint.attempt_discarded
                                     (drop that message's partial text: its attempt failed), waypoint.decision
    RUN_FINISHED / RUN_ERROR         the run_finished event (RUN_ERROR when it failed), or a cut-off

Each SSE message is `data: {"type": ...}` (camelCase fields, as AG-UI clients read them); the
last message derived from a log event carries the event's seq as its id, so Last-Event-ID
resumes as on the native stream.
"""

from __future__ import annotations

import json
from typing import Any

from sse_starlette import ServerSentEvent

from waypoint.app.http.protocol.shapes import ai_id
from waypoint.app.http.streams import StreamItem, merged
from waypoint.client import EventRow
from waypoint.deltas import AttemptText
from waypoint.names import EventKind, RunStatus


class AguiFormat:
    def __init__(self, run_id: str, *, thread_id: str, from_start: bool = True):
        self.run_id = run_id
        self.thread_id = thread_id
        # A stream from the start opens with RUN_STARTED, as AG-UI requires: the log and the deltas
        # are read side by side, and a model call started eagerly can stream its first delta before
        # the log's run_started is read, so deltas wait for it (a resumed stream has had it).
        self.held: list[dict[str, Any]] | None = [] if from_start else None
        self.step: int | None = None
        self.attempt: tuple[int, int] | None = None  # (step, attempt) whose deltas are open
        self.text_open: str | None = None
        self.calls_open: dict[int, str] = {}
        self.streamed: set[tuple[int, int]] = set()
        self.counters: dict[str, Any] = {"status": RunStatus.RUNNING, "step": 0}

    # --- rendering ---------------------------------------------------------------------------------

    def render(self, item: StreamItem) -> list[ServerSentEvent]:
        if item.kind == "event" and item.event is not None:
            events = self._event(item.event)
            out = [ServerSentEvent(json.dumps(e)) for e in events]
            if out:
                out[-1].id = str(item.event.seq)
            return out
        if item.kind == "snapshot" and item.snapshot is not None:
            return self._sse(self._hold(self._delta(item.snapshot, opens=True)))
        if item.kind == "delta" and item.batch is not None:
            opens, joined = merged(item.batch)
            return self._sse(self._hold(self._delta(joined, opens=opens)))
        message = f"cut off after event {item.last_seq}: this client read too slowly; reconnect with Last-Event-ID"
        return self._sse([{"type": "RUN_ERROR", "message": message, "code": "slow_client"}])

    def _hold(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`events` now, or (before RUN_STARTED, in a stream from the start) kept until it."""
        if self.held is None:
            return events
        self.held.extend(events)
        return []

    @staticmethod
    def _sse(events: list[dict[str, Any]]) -> list[ServerSentEvent]:
        return [ServerSentEvent(json.dumps(e)) for e in events]

    # --- steps and open messages --------------------------------------------------------------------

    def _enter_step(self, step: int) -> list[dict[str, Any]]:
        if step <= 0 or step == self.step:
            return []
        out = self._leave_step()
        self.step = step
        return [*out, {"type": "STEP_STARTED", "stepName": f"step {step}"}]

    def _leave_step(self) -> list[dict[str, Any]]:
        if self.step is None:
            return []
        step, self.step = self.step, None
        return [*self._close(), {"type": "STEP_FINISHED", "stepName": f"step {step}"}]

    def _close(self, *, discarded: bool = False) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.text_open is not None:
            out.append({"type": "TEXT_MESSAGE_END", "messageId": self.text_open})
            if discarded:
                out.append(
                    {"type": "CUSTOM", "name": "waypoint.attempt_discarded", "value": {"messageId": self.text_open}}
                )
        for call_id in self.calls_open.values():
            out.append({"type": "TOOL_CALL_END", "toolCallId": call_id})
        self.text_open = None
        self.calls_open = {}
        self.attempt = None
        return out

    def _delta(self, said: AttemptText, *, opens: bool) -> list[dict[str, Any]]:
        out = self._enter_step(said.step)
        key = (said.step, said.attempt)
        if opens or self.attempt != key:
            out += self._close(discarded=self.attempt is not None and self.attempt != key)
            self.attempt = key
        self.streamed.add(key)
        message_id = ai_id(self.run_id, said.step, said.attempt)
        if said.text:
            if self.text_open is None:
                self.text_open = message_id
                out.append({"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"})
            out.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": said.text})
        for index, call in sorted(said.tool_calls.items()):
            if index not in self.calls_open:
                call_id = call["id"] or f"{message_id}:{index}"
                self.calls_open[index] = call_id
                start = {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": call["name"] or ""}
                out.append({**start, "parentMessageId": message_id})
            if call["arguments"]:
                out.append({"type": "TOOL_CALL_ARGS", "toolCallId": self.calls_open[index], "delta": call["arguments"]})
        return out

    # --- log events ---------------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {"type": "STATE_SNAPSHOT", "snapshot": dict(self.counters)}

    def _event(self, row: EventRow) -> list[dict[str, Any]]:
        p = row.payload
        if row.kind == EventKind.RUN_STARTED:
            self.counters.update(step=row.step, task=p.get("task"), agent=p.get("agent"))
            held, self.held = self.held or [], None
            return [{"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id}, self._state(), *held]
        if row.kind == EventKind.RUN_FINISHED:
            self.counters.update(status=p.get("status"), output=p.get("output"), error=p.get("error"))
            out = [*self._leave_step(), self._state()]
            if p.get("status") == RunStatus.FAILED:
                return [*out, {"type": "RUN_ERROR", "message": p.get("error") or "the run failed", "code": "failed"}]
            result = {"status": p.get("status"), "output": p.get("output"), "error": p.get("error")}
            return [*out, {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id, "result": result}]
        if row.kind == EventKind.STATUS_CHANGED:
            self.counters.update(status=p.get("status"), detail=p.get("detail"))
            return [self._state()]
        out = self._enter_step(row.step)
        if row.kind == EventKind.MODEL_ATTEMPT_FAILED:
            return [
                *out,
                *self._close(discarded=True),
                {"type": "CUSTOM", "name": "waypoint.attempt_failed", "value": p},
            ]
        if row.kind == EventKind.USER_MESSAGE:
            mid = f"{self.run_id}:{row.seq}"
            return [
                *out,
                {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "user"},
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": p.get("content") or " "},
                {"type": "TEXT_MESSAGE_END", "messageId": mid},
            ]
        if row.kind == EventKind.DECISION:
            return [*out, {"type": "CUSTOM", "name": "waypoint.decision", "value": p}]
        if row.kind == EventKind.MODEL_FAILOVER:
            return [*out, {"type": "CUSTOM", "name": "waypoint.model_failover", "value": p}]
        if row.kind == EventKind.MODEL_RESPONSE:
            return [*out, *self._answer(row)]
        if row.kind == EventKind.TOOL_RESULT:
            result = {"type": "TOOL_CALL_RESULT", "messageId": f"{self.run_id}:{row.seq}", "toolCallId": p["call_id"]}
            return [*out, {**result, "content": p.get("output") or "", "role": "tool"}]
        return out

    def _answer(self, row: EventRow) -> list[dict[str, Any]]:
        p = row.payload
        attempt = int(p.get("attempt") or 1)
        usage = p.get("usage") or {}
        self.counters.update(
            step=row.step,
            input_tokens=self.counters.get("input_tokens", 0) + int(usage.get("input_tokens") or 0),
            output_tokens=self.counters.get("output_tokens", 0) + int(usage.get("output_tokens") or 0),
        )
        if (row.step, attempt) in self.streamed:
            return [*self._close(), self._state()]  # its text and calls went out as deltas
        out = self._close(discarded=self.attempt is not None)
        message_id = ai_id(self.run_id, row.step, attempt)
        if p.get("content"):
            out += [
                {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": p["content"]},
                {"type": "TEXT_MESSAGE_END", "messageId": message_id},
            ]
        for call in p.get("tool_calls") or []:
            start = {"type": "TOOL_CALL_START", "toolCallId": call["id"], "toolCallName": call["name"]}
            out.append({**start, "parentMessageId": message_id})
            if call.get("arguments"):
                out.append({"type": "TOOL_CALL_ARGS", "toolCallId": call["id"], "delta": call["arguments"]})
            out.append({"type": "TOOL_CALL_END", "toolCallId": call["id"]})
        return [*out, self._state()]
