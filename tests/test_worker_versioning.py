"""Worker Versioning on the real dev server: a worker that joins a Worker Deployment as a version,
made current with `waypoint deployment set-current`, runs a run, and Temporal records the version."""

from __future__ import annotations

import json
import uuid

import pytest
from temporalio.client import Client
from temporalio.common import VersioningBehavior

from tests.helpers import eventually, one_line_error, waypoint
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings

pytestmark = pytest.mark.postgres


@pytest.mark.timeout(180)
async def test_a_run_goes_to_the_current_version(client: Client, engine, settings: Settings, agents: AgentRegistry):
    name = f"wp-{uuid.uuid4().hex[:8]}"
    versioned = settings.model_copy(update={"worker_deployment": name, "worker_build_id": "b1"})
    wp = Waypoint(client, engine, versioned)
    async with build_worker(client, engine, versioned, agents):

        async def made_current() -> bool:  # the deployment exists once the worker's pollers reached it
            done = await waypoint(versioned, "deployment", "set-current", name, "b1", "--json")
            return done.code == 0 and json.loads(done.out)["current"] == "b1"

        await eventually(made_current, timeout=60, interval=0.5, what=f"making {name}.b1 current")
        run_id = await wp.start_run("versioned", agent="teller")
        assert (await wp.result(run_id)).status == "completed"

    info = (await client.get_workflow_handle(run_id).describe()).raw_description.workflow_execution_info
    assert (
        info.versioning_info.deployment_version.deployment_name,
        info.versioning_info.deployment_version.build_id,
    ) == (
        name,
        "b1",
    )
    assert info.versioning_info.behavior == VersioningBehavior.AUTO_UPGRADE.value
    assert await wp.deployment(name) == ("b1", ["b1"])
    shown = await waypoint(versioned, "deployment", "show", name)
    assert shown.code == 0 and f"{name}: current version b1" in shown.out, shown


async def test_bad_versions_are_one_line(settings: Settings):
    line = one_line_error(await waypoint(settings, "deployment", "set-current", "my.app", "b1"))
    assert "has a '.'" in line
    line = one_line_error(await waypoint(settings, "worker", "--build-id", "b1"))
    assert "--deployment" in line
    line = one_line_error(await waypoint(settings, "deployment", "set-current", "nobody", "b1"))
    assert "waypoint worker --deployment nobody --build-id b1" in line
