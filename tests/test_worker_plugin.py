"""Waypoint on a user's own Temporal Worker: `WaypointPlugin` adds Waypoint's workflows, activities and
interceptors beside the user's, in the time-skipping environment (real Postgres below the activities)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from datetime import timedelta

import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from waypoint import Settings, Waypoint, WaypointPlugin, worker_plugin
from waypoint.agents import AgentRegistry
from waypoint.app.plugin import WORKFLOWS
from waypoint.app.worker import build_worker
from waypoint.codec import EncryptionCodec
from waypoint.demo import DEMO_TASK, seed_workspace
from waypoint.demo import demo as demo_agent
from waypoint.errors import ConfigError
from waypoint.names import Activity, WorkflowSandbox
from waypoint.telemetry.temporal import StepInterceptor

pytestmark = pytest.mark.postgres


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn(sandboxed=False)
class ShoutWorkflow:
    """The user's own workflow, on the same worker as Waypoint's."""

    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))


async def until_registered(wp: Waypoint, agent: str) -> None:
    """The worker writes its catalog before it polls: wait for the row, not for a fixed time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while agent not in [a.name for a in await wp.agents()]:
        assert loop.time() < deadline, f"the plugin never registered {agent}"
        await asyncio.sleep(0.05)


async def test_a_users_worker_with_the_plugin_runs_an_agent_and_its_own_workflow(
    ts: WorkflowEnvironment, engine: AsyncEngine, settings: Settings
) -> None:
    seed_workspace(settings.resolved_workspace)
    plugin = WaypointPlugin(settings, agents=[demo_agent], engine=engine)
    worker = Worker(
        ts.client,
        task_queue=settings.task_queue,
        workflows=[ShoutWorkflow],
        activities=[shout],
        plugins=[plugin],
    )
    # The user's workflows and activities stay; Waypoint's come after them, with its interceptors.
    config = worker.config(active_config=True)
    assert list(config["workflows"]) == [ShoutWorkflow, *WORKFLOWS]
    names = {getattr(a, "__temporal_activity_definition").name for a in config["activities"]}
    assert {"shout", str(Activity.CALL_MODEL), str(Activity.RECORD_STEP), str(Activity.START_RUN)} <= names
    assert any(isinstance(i, StepInterceptor) for i in config["interceptors"])

    wp = Waypoint(ts.client, engine, settings)
    async with worker:
        await until_registered(wp, "demo")
        run_id = await wp.start_run(DEMO_TASK, agent="demo")
        result = await wp.result(run_id)
        mine = await ts.client.execute_workflow(
            ShoutWorkflow.run, "hi", id=f"shout-{uuid.uuid4().hex[:6]}", task_queue=settings.task_queue
        )
    assert result.status == "completed", result
    assert "62 words in 3 notes" in (result.output or "")
    assert [line.step for line in await wp.timeline(run_id)] == [1, 2, 3, 4, 5]
    assert mine == "HI"


async def test_build_worker_is_the_plugin_on_a_worker(ts: WorkflowEnvironment, engine: AsyncEngine, settings: Settings):
    worker = build_worker(ts.client, engine, settings, AgentRegistry([demo_agent]))
    config = worker.config(active_config=True)
    assert [type(p) for p in config["plugins"]] == [WaypointPlugin]
    assert list(config["workflows"]) == WORKFLOWS
    assert isinstance(worker_plugin(settings, engine=engine, agents=[demo_agent]), WaypointPlugin)


@pytest.mark.parametrize("sandbox", list(WorkflowSandbox))
async def test_the_workflow_sandbox_passes_waypoint_through_unless_told_not_to(
    ts: WorkflowEnvironment, engine: AsyncEngine, settings: Settings, sandbox: WorkflowSandbox
):
    worker = build_worker(
        ts.client, engine, settings.model_copy(update={"workflow_sandbox": sandbox}), AgentRegistry([])
    )
    runner = worker.config(active_config=True)["workflow_runner"]
    assert isinstance(runner, SandboxedWorkflowRunner)
    passed = runner.restrictions.passthrough_modules
    assert ("waypoint" in passed) == (sandbox == WorkflowSandbox.PASSTHROUGH)
    assert passed >= SandboxRestrictions.default.passthrough_modules  # the SDK's own list kept


async def test_codec_keys_with_a_client_that_does_not_encrypt_is_one_clear_error(
    ts: WorkflowEnvironment, engine: AsyncEngine, settings: Settings
) -> None:
    keyed = settings.model_copy(update={"codec_keys": SecretStr("k1:" + base64.b64encode(bytes(32)).decode())})
    with pytest.raises(ConfigError, match="plugins=\\[plugin\\]"):
        Worker(
            ts.client,
            task_queue=settings.task_queue,
            plugins=[WaypointPlugin(keyed, agents=[demo_agent], engine=engine)],
        )


async def test_on_the_client_the_plugin_brings_the_encrypting_converter_to_its_workers(
    ts: WorkflowEnvironment, engine: AsyncEngine, settings: Settings
) -> None:
    keyed = settings.model_copy(update={"codec_keys": SecretStr("k1:" + base64.b64encode(bytes(32)).decode())})
    plugin = WaypointPlugin(keyed, agents=[demo_agent], engine=engine)
    client = await Client.connect(ts.client.service_client.config.target_host, plugins=[plugin])
    assert isinstance(client.data_converter.payload_codec, EncryptionCodec)
    worker = Worker(client, task_queue=settings.task_queue)  # the client's plugin configures it: no error
    assert list(worker.config(active_config=True)["workflows"]) == WORKFLOWS
