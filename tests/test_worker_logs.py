"""A worker's terminal: expected failures (a 429, a 400, a run that cannot start) are one structured
line each, with the run, step, attempt and reason; a traceback would mean a bug."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError

from tests.helpers import eventually
from waypoint.app.devstack import READY_LINE
from waypoint.checks import new_run_id
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import Workflow
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn
from waypoint.types import RunInput

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


def start_worker(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = settings.child_environment(WAYPOINT_AGENTS="tests.agents", WAYPOINT_MEMORY="false")
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "waypoint", "worker"], env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 60
    while READY_LINE not in log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return proc


async def test_expected_failures_are_one_line_each(
    tmp_path: Path, client: Client, engine, settings: Settings, fake_openai: FakeOpenAI
):
    log = tmp_path / "worker.log"
    proc = start_worker(settings, log)
    try:
        wp = Waypoint(client, engine, settings)
        limited = Reply(429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after": "0"})
        rejected = Reply(400, {"error": {"message": "bad request: no such model", "type": "invalid_request"}})
        fake_openai.answer(limited, Turn(content="ok"), rejected)
        ok = await wp.result(await wp.start_run("hi", agent="remote"))
        failed_id = await wp.start_run("hi again", agent="remote")
        failed = await wp.result(failed_id)
        assert (ok.status, failed.status) == ("completed", "failed")
        # A run started past the client's checks (another SDK): its start fails on the worker.
        unstartable = new_run_id()
        inp = RunInput(agent="nobody", task="x", tenant_id=settings.tenant)
        await client.start_workflow(Workflow.AGENT_RUN, inp, id=unstartable, task_queue=settings.task_queue)
        with pytest.raises(WorkflowFailureError):
            await client.get_workflow_handle(unstartable).result()

        async def logged() -> str:
            text = log.read_text()
            return text if "UnknownAgent" in text else ""

        text = await eventually(logged, what="the unknown agent's line in the worker log")
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in text, text
    lines = text.splitlines()
    (rate_limited,) = [line for line in lines if "ModelUnavailable" in line]
    assert "call_model failed: run=" in rate_limited and "step=1 attempt=1" in rate_limited
    assert "HTTP 429" in rate_limited and "will retry" in rate_limited
    (bad_request,) = [line for line in lines if "ModelRequestRejected" in line]
    assert f"run={failed_id} step=1 attempt=1" in bad_request and "HTTP 400" in bad_request
    assert "not retried" in bad_request
    (unknown,) = [line for line in lines if "UnknownAgent" in line]
    assert f"start_run failed: run={unstartable}" in unknown and "unknown agent 'nobody'" in unknown
