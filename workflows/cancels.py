"""How a cancel stops a run and its tree, and what it leaves on record (patch `cancel-tree-1`).

A cancel is accepted once: the `cancel` update, or Temporal's cancel request of the workflow (its
caller's cancel, the parent-close policy, `temporal workflow cancel`). From that moment:

- no model call, tool call or sub-agent run starts: each checks before it starts;
- a model call in flight is cancelled (its heartbeat sees it, or it just ends between attempts);
- a tool call in flight finishes (its retries included): nothing cuts a tool half-way;
- each sub-agent run in flight is asked to cancel at once, with the reason, and the step waits for
  its end, so a whole tree stops together and every run in it records its own end;
- a step whose model answered is recorded as it ended: the answer, the results of the tools that ran,
  `cancelled` ("not run: ...") for the calls not started, how each sub-agent run ended. A step whose
  model call was cancelled has nothing to record, and no checkpoint;
- either way, `step_cancelled` names what was in flight when the cancel came and how each part
  ended, and whether the step is recorded; then the run ends `cancelled`.

Temporal delivers its cancel request as asyncio.CancelledError into the workflow's main task, and
into every `wait_condition` pending at the time. The run's body runs in a task of its own, shielded
from the first, and its waits take the second as the cancel itself: the request only sets the reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.names import Activity

TREE_CANCEL = "cancel-tree-1"
T = TypeVar("T")

# What each kind of work in flight is called in `step_cancelled` (its `activity`: the first in flight).
ACTIVITY_OF = {"model": Activity.CALL_MODEL.value, "tool": Activity.RUN_TOOL.value, "agent": "agents"}


class StepCancelled(Exception):
    """The run was cancelled while its step waited for `activity` (a model call, sub-agent runs)."""

    def __init__(self, step: int, why: str, activity: str = Activity.CALL_MODEL.value):
        super().__init__(why)
        self.step = step
        self.activity = activity


def describe(step: int, in_flight: list[dict[str, Any]], not_started: list[dict[str, Any]], recorded: bool) -> str:
    """One sentence: what step `step` had in flight when the cancel came, and how each part ended."""
    parts = []
    for e in in_flight:
        ended = e.get("ended", "ended")
        if e["call"] == "model":
            parts.append(f"its model call ({e['model']}) {ended}")
        elif e["call"] == "tool":
            parts.append(f"tool {e['name']} (call {e['call_index']}) {ended}")
        elif e["call"] == "agent":
            parts.append(f"sub-agent {e['name']} (call {e['call_index']}, run {e['run_id']}) ended {ended}")
        else:
            parts.append(f"its wait for a human on {', '.join(e['names'])} ended: {ended}")
    if not_started:
        parts.append("not started: " + ", ".join(f"{s['name']} (call {s['call_index']})" for s in not_started))
    record = "the step is recorded as it ended" if recorded else "the step has no record"
    return f"cancelled during step {step}: {'; '.join(parts) or 'nothing in flight'}; {record}"


class CancelRecord:
    """AgentRunWorkflow's cancel: what is in flight, the cancel's reason, and its record."""

    _run_id: str
    _caller: bool
    _cancel_reason: str | None
    _tree_cancel = False  # this execution took the cancel-tree-1 branch
    # What the current step has in flight, by key: one dict each, which says how it `ended` once it
    # has. What was in flight when the cancel came is kept (the same dicts), and what never started.
    _flight: dict[str, dict[str, Any]]
    _at_cancel: list[dict[str, Any]] | None = None
    _unstarted_calls: list[dict[str, Any]]
    _cancelled_record: dict[str, Any] | None = None  # a recorded step's `step_cancelled`, for the run's end

    def _accept_cancel(self, reason: str) -> None:
        self._cancel_reason = reason
        self._at_cancel = list(self._flight.values())

    def _cancel_requested(self) -> str | None:
        """The cancel's reason once one was accepted, else None. Temporal's request counts from the
        moment it arrives (cancel-tree-1), before the main task has seen it."""
        if self._cancel_reason is None and self._tree_cancel:
            requested = workflow.cancellation_reason()
            if requested is not None:
                self._accept_cancel(requested or ("its caller ended" if self._caller else "its workflow was cancelled"))
        return self._cancel_reason

    def _child_cancel_reason(self) -> str:
        return f"its caller {self._run_id} was cancelled: {self._cancel_reason}"

    async def _shielded(self, body: Awaitable[T]) -> T:
        """Run the workflow's body shielded from Temporal's cancel request, which only sets the reason."""
        task = asyncio.ensure_future(body)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.done():
                    return task.result()
                self._cancel_requested()

    async def _wait_condition(self, fn: Callable[[], bool], timeout: timedelta | None = None) -> None:
        """`workflow.wait_condition`, which a Temporal cancel request ends (cancel-tree-1) as a cancel:
        the SDK raises the request into every wait pending when it arrives."""
        try:
            await workflow.wait_condition(fn, timeout=timeout)
        except asyncio.CancelledError:
            if not self._tree_cancel or workflow.cancellation_reason() is None:
                raise
            self._cancel_requested()

    def _begin_step(self) -> None:
        self._flight = {}
        self._unstarted_calls = []

    @contextmanager
    def _flying(self, key: str, entry: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """`entry` is in flight while the block runs."""
        self._flight[key] = entry
        try:
            yield entry
        finally:
            self._flight.pop(key, None)

    def _skip(self, index: int, name: str) -> None:
        self._unstarted_calls.append({"call_index": index, "name": name})

    def _cancelled_step(
        self, step: int, *, recorded: bool, why: str | None = None, activity: str | None = None
    ) -> dict[str, Any]:
        """The `step_cancelled` payload of step `step`: {step, activity, why, recorded, in_flight,
        not_started}."""
        in_flight = [dict(e) for e in self._at_cancel or []]
        first = next((ACTIVITY_OF.get(e["call"], e["call"]) for e in in_flight), None)
        return {
            "step": step,
            "activity": activity or first or Activity.RUN_TOOL.value,
            "why": why or describe(step, in_flight, self._unstarted_calls, recorded),
            "recorded": recorded,
            "in_flight": in_flight,
            "not_started": list(self._unstarted_calls),
        }
