"""What the time-skipping workflow tests share (with tests/workflow_doubles.py): a run's plan,
waiting for a run's status, and the message a run failed with. The time-skipping environment
itself is the `ts` fixture in tests/conftest.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer

from tests.helpers import HISTORIES, RECORD
from tests.workflow_doubles import spec
from waypoint.names import Query
from waypoint.types import RunPlan, RunProgress
from waypoint.workflows.agent_run import AgentRunWorkflow

LEAD = "double"  # the agent of the doubles' runs (a sub-agent's caller, in the tree tests)


def plan(**kw: Any) -> RunPlan:
    return RunPlan(**{"model": "double", "max_steps": 20, "tools": [spec()], **kw})


async def progress(handle: WorkflowHandle[Any, Any]) -> RunProgress:
    found: RunProgress = await handle.query(Query.PROGRESS, result_type=RunProgress)
    return found


async def until_status(handle: WorkflowHandle[Any, Any], status: str, timeout: float = 20) -> RunProgress:
    async def probe() -> RunProgress | None:
        now = await progress(handle)
        return now if now.status == status else None

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (found := await probe()) is None:
        assert loop.time() < deadline, f"the run never became {status}: {await progress(handle)}"
        await asyncio.sleep(0.05)
    return found


async def failure(handle: WorkflowHandle[Any, Any]) -> str:
    with pytest.raises(WorkflowFailureError) as caught:
        await handle.result()
    cause = caught.value.cause
    assert isinstance(cause, ApplicationError)
    return cause.message


async def until(probe: Callable[[], bool], what: str, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not probe():
        assert loop.time() < deadline, f"{what} never happened"
        await asyncio.sleep(0.02)


async def until_history(client: Client, workflow_id: str, kind: EventType.ValueType, timeout: float = 20) -> None:
    """Wait until the workflow's history holds an event of `kind` (a request that reached it, say)."""
    deadline = time.monotonic() + timeout
    while True:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        if any(e.event_type == kind for e in history.events):
            return
        assert time.monotonic() < deadline, f"{workflow_id} has no {EventType.Name(kind)} after {timeout:g} s"
        await asyncio.sleep(0.05)


async def replayed(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """The run's history replays against the workflow code (and, recording, is checked in for
    tests/test_replay.py: the branch a new run took stays replayable by later code)."""
    history = await handle.fetch_history()
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
    if RECORD:
        (HISTORIES / name).write_text(history.to_json())
