"""Determinism: recorded histories must replay against the current workflow code.

To re-record after an intended, versioned change to the workflow:
    WAYPOINT_RECORD_HISTORIES=1 pytest tests/test_replay.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.changed_workflow import ChangedAgentRunWorkflow
from waypoint.client import Waypoint
from workflows.agent_run import AgentRunWorkflow

HISTORIES = Path(__file__).parent / "histories"
RECORD = os.environ.get("WAYPOINT_RECORD_HISTORIES") == "1"


def recorded() -> list[Path]:
    return sorted(HISTORIES.glob("*.json"))


@pytest.mark.parametrize("path", recorded(), ids=lambda p: p.stem)
async def test_recorded_history_replays(path: Path):
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    result = await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
    assert result.replay_failure is None


def test_histories_are_checked_in():
    assert {p.stem for p in recorded()} >= {"agent_run_calculator", "agent_run_clumsy"}


@pytest.mark.postgres
@pytest.mark.parametrize("agent", ["calculator", "clumsy"])
async def test_fresh_history_replays(client: Client, engine, settings, worker, agent: str):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("replay me", agent=agent)
    assert (await wp.result(run_id)).status == "completed"
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
    if RECORD:
        (HISTORIES / f"agent_run_{agent}.json").write_text(history.to_json())


async def test_replay_catches_a_nondeterministic_change():
    path = HISTORIES / "agent_run_calculator.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    with pytest.raises(NondeterminismError):
        await Replayer(workflows=[ChangedAgentRunWorkflow]).replay_workflow(history)
