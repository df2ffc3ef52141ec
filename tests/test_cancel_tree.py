"""A cancel mid-fan-out on the real stack, 20 times at moments spread over the tree's life (issue 40).

The tree: a lead calls three children and a tool at once; each child runs a tool, then two at once.
Every model turn and tool takes a moment and marks its start, so the test cancels the lead right as
a chosen one is in flight: 20 of the tree's 21 model and tool calls and its start, drawn with a
seed. (A deeper tree's cascade is in tests/test_cancel_logic.py.) After each cancel:

- the tree has ended as a whole when the lead has (the lead waits for its children's ends);
- every tool that started finished: none was cut half-way;
- no run's history schedules a model or tool call after the cancel reached it (the update accepted,
  or its caller's cancel request), and none in the tree later than 1 s after the lead accepted it
  (Temporal's event times: the server's clock, not the test's);
- `verify --all` finds nothing: every model call that completed in Temporal is recorded (client
  API after each tree; the CLI once at the end, exit 0).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import waypoint
from waypoint import Agent, ScriptedModel, ScriptedTurn, tool
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import Conflict
from waypoint.names import FINISHED, Activity, EventKind, RunStatus, Update
from waypoint.store.schema import events, runs

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

MODEL_SECONDS, TOOL_SECONDS = 0.08, 0.12
WORK = (Activity.CALL_MODEL.value, Activity.RUN_TOOL.value)
BOUND = timedelta(seconds=1)


class Marks:
    """What the tree started and finished so far (the worker runs in this event loop)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started: Counter[str] = Counter()  # "model" / "tool" -> how many started
        self.tools: Counter[str] = Counter()  # "started" / "finished" / "cut"
        self.changed = asyncio.Event()

    def mark(self, kind: str) -> None:
        self.started[kind] += 1
        self.changed.set()

    async def until(self, kind: str, n: int) -> None:
        while self.started[kind] < n:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 30)


MARKS = Marks()


def turn(**kw: Any) -> Any:
    async def play(messages: list[dict[str, Any]]) -> ScriptedTurn:
        MARKS.mark("model")
        await asyncio.sleep(MODEL_SECONDS)
        return ScriptedTurn(**kw)

    return play


@tool
async def chunk(part: str) -> str:
    """Work on a part for a moment."""
    MARKS.mark("tool")
    MARKS.tools["started"] += 1
    try:
        await asyncio.sleep(TOOL_SECONDS)
    except asyncio.CancelledError:
        MARKS.tools["cut"] += 1
        raise
    MARKS.tools["finished"] += 1
    return f"worked on {part}"


child = Agent(
    name="cancel_child",
    description="Works on one part, in steps.",
    instructions="Work.",
    model=ScriptedModel(
        [
            turn(tool_calls=[("chunk", {"part": "first"})]),
            turn(tool_calls=[("chunk", {"part": "second"}), ("chunk", {"part": "third"})]),
            turn(content="child done"),
        ]
    ),
    tools=(chunk,),
    memory=False,
)
lead = Agent(
    name="cancel_lead",
    instructions="Hand the work out.",
    model=ScriptedModel(
        [
            turn(tool_calls=[*(("cancel_child", {"task": part}) for part in "abc"), ("chunk", {"part": "lead"})]),
            turn(content="all done"),
        ]
    ),
    tools=(chunk,),
    agents=(child,),
    memory=False,
)
# Per tree: the lead's 2 model calls and 1 tool, each child's 3 and 3; 20 of these 22 moments are drawn.
MOMENTS = [("start", 0)] + [("model", n) for n in range(1, 12)] + [("tool", n) for n in range(1, 11)]
CANCELS = 20


async def step_cancelled(engine: AsyncEngine, run_id: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        found = await conn.scalars(
            select(events.c.payload).where(events.c.run_id == run_id, events.c.kind == EventKind.STEP_CANCELLED)
        )
        return list(found)


async def tree_of(engine: AsyncEngine, root: str) -> dict[str, str]:
    async with engine.connect() as conn:
        found = await conn.execute(select(runs.c.run_id, runs.c.status).where(runs.c.root_run_id == root))
        return {r.run_id: r.status for r in found}


@dataclass
class Seen:
    """What one run's history says of the cancel."""

    run_id: str
    late: list[str] = field(default_factory=list)  # model and tool calls scheduled after the cancel reached it
    scheduled: list[tuple[datetime, str]] = field(default_factory=list)  # every model and tool call: when, which
    reached: datetime | None = None  # when the cancel reached it (its update accepted, or its cancel request)
    accepted: bool = False  # by a `cancel` update (the lead)


async def seen(client: Client, run_id: str) -> Seen:
    found = Seen(run_id)
    async for e in client.get_workflow_handle(run_id).fetch_history_events():
        at = e.event_time.ToDatetime(UTC)
        if e.HasField("workflow_execution_update_accepted_event_attributes"):
            if e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == Update.CANCEL:
                found.reached, found.accepted = at, True
        elif e.HasField("workflow_execution_cancel_requested_event_attributes"):
            found.reached = found.reached or at
        elif e.HasField("activity_task_scheduled_event_attributes"):
            name = e.activity_task_scheduled_event_attributes.activity_type.name
            if name in WORK:
                found.scheduled.append((at, f"{name} (event {e.event_id})"))
                if found.reached is not None:
                    found.late.append(f"{run_id}: {name} (event {e.event_id})")
    return found


async def test_cancelling_a_parent_mid_fan_out_20_times_leaves_verify_all_clean(
    client: Client, engine: AsyncEngine, settings: Settings
):
    order = random.Random(40).sample(MOMENTS, CANCELS)
    cancelled = interrupted = 0
    async with build_worker(client, engine, settings, AgentRegistry([lead])):
        wp = Waypoint(client, engine, settings)
        for kind, n in order:
            MARKS.reset()
            since = datetime.now(UTC) - timedelta(seconds=1)
            root = await wp.start_run("go", agent="cancel_lead")
            if kind != "start":
                await MARKS.until(kind, n)
            try:
                await wp.cancel(root, f"cancel at {kind} {n}")
            except Conflict:  # it ended first (a busy machine): the tree is checked all the same
                pass
            result = await wp.result(root)
            cancelled += result.status == RunStatus.CANCELLED
            where = f"cancel at {kind} {n} of tree {root}"

            tree = await tree_of(engine, root)
            unfinished = {r: s for r, s in tree.items() if s not in FINISHED}
            assert not unfinished, f"{where}: the lead ended before {unfinished}"
            assert MARKS.tools["started"] == MARKS.tools["finished"] and not MARKS.tools["cut"], (where, MARKS.tools)
            facts = [await seen(client, r) for r in tree]
            assert [f.late for f in facts] == [[]] * len(tree), where
            if result.status == RunStatus.CANCELLED:
                accepted = next(f.reached for f in facts if f.accepted)
                assert accepted is not None, where
                for f in facts:
                    for at, what in f.scheduled:
                        reached = (
                            "never" if f.reached is None else f"at +{(f.reached - accepted).total_seconds():.3f} s"
                        )
                        assert at - accepted < BOUND, (
                            f"{where}: {f.run_id} scheduled {what} at +{(at - accepted).total_seconds():.3f} s; "
                            f"the cancel reached it {reached}"
                        )

            # The lead's step in flight (if the cancel came during one): what was in flight, and how it ended.
            for stopped in await step_cancelled(engine, root):
                assert stopped["in_flight"] and all("ended" in e for e in stopped["in_flight"]), (where, stopped)
                interrupted += 1

            report = await wp.verify_all(since)
            assert report.ok, f"{where}: " + "; ".join(v.line() for v in report.violations)
    assert cancelled >= CANCELS // 2, f"only {cancelled} of {CANCELS} trees were still running to cancel"
    assert interrupted >= CANCELS // 2, f"only {interrupted} cancels came during a step of the lead"
    done = await waypoint(settings, "verify", "--all", "--since", "1h")
    assert done.code == 0, (done.out, done.err)
    assert "0 violations" in done.out
