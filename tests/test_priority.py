"""A run's priority on every surface (Python, CLI, HTTP, the viewer), on its Temporal workflow and
its sub-agent runs; and the dev server dispatching by priority, then by fair share."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio import activity, workflow
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.common import Priority
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.conftest import ApiServer
from tests.helpers import eventually, one_line_error, waypoint
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.demo_research import RESEARCH_TASK, research
from waypoint.errors import InvalidInput
from waypoint.store.schema import runs

pytestmark = pytest.mark.postgres


async def temporal_priority(client: Client, run_id: str) -> tuple[int, str, float]:
    info = (await client.get_workflow_handle(run_id).describe()).raw_description.workflow_execution_info
    return info.priority.priority_key, info.priority.fairness_key, info.priority.fairness_weight


async def test_a_runs_priority_is_on_its_row_its_workflow_and_its_sub_agent_runs(
    client: Client, engine: AsyncEngine, settings: Settings
):
    seed_workspace(settings.resolved_workspace)
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, AgentRegistry([research])):
        run_id = await wp.start_run(RESEARCH_TASK, agent="research", priority=1)
        assert (await wp.result(run_id)).status == "completed"
    async with engine.connect() as conn:
        found = (await conn.execute(select(runs.c.run_id, runs.c.priority).where(runs.c.root_run_id == run_id))).all()
    assert len(found) == 5 and {p for _, p in found} == {1}, found  # the lead and its four sub-agent runs
    # Temporal dispatches by it: the tenant is the fairness key, weight 1 when the limits file has none
    assert await temporal_priority(client, run_id) == (1, settings.tenant, 1.0)
    child = next(r for r, _ in found if r != run_id)
    assert await temporal_priority(client, child) == (1, settings.tenant, 1.0)
    # a fork keeps its parent's priority unless given one
    async with build_worker(client, engine, settings, AgentRegistry([research])):
        kept = await wp.fork(run_id, 1)
        changed = await wp.fork(run_id, 1, priority=4)
        for new_id in (kept, changed):
            await wp.result(new_id)
    assert [(await wp.run(i)).priority for i in (kept, changed)] == [1, 4]
    assert (await temporal_priority(client, changed))[0] == 4
    with pytest.raises(InvalidInput, match="invalid priority 0: a priority is 1 \\(first\\) to 5 \\(last\\)"):
        await wp.start_run("add", agent="calculator", priority=0)


async def test_run_priority_on_the_cli_its_status_and_a_bad_value(
    settings: Settings, worker, client: Client, engine: AsyncEngine
):
    done = await waypoint(settings, "run", "add 2 and 3", "--agent", "calculator", "--priority", "2")
    assert done.code == 0, done.err
    run_id = done.out.strip()
    wp = Waypoint(client, engine, settings)
    await wp.result(run_id)
    assert (await wp.run(run_id)).priority == 2
    assert (await temporal_priority(client, run_id))[0] == 2
    table = (await waypoint(settings, "status", run_id)).out
    assert re.search(r"priority\s+2\b", table), table
    listed = await waypoint(settings, "runs", "--json")
    assert '"priority": 2' in listed.out
    # a run given none shows none and runs at Temporal's default
    plain = await wp.start_run("add 1 and 1", agent="calculator")
    await wp.result(plain)
    assert "priority" not in (await waypoint(settings, "status", plain)).out
    assert (await temporal_priority(client, plain))[0] == 0  # unset: the server's default, 3
    line = one_line_error(await waypoint(settings, "run", "hi", "--agent", "calculator", "--priority", "9"))
    assert "invalid priority 9: a priority is 1 (first) to 5 (last); the default is 3" in line
    # A rerun keeps its source's priority, or takes the one given; so does a batch of reruns.
    kept = (await waypoint(settings, "rerun", run_id)).out.strip()
    moved = (await waypoint(settings, "rerun", run_id, "--priority", "4")).out.strip()
    for rerun_id in (kept, moved):
        await wp.result(rerun_id)
    assert [(await wp.run(r)).priority for r in (kept, moved)] == [2, 4]
    select = ("--select", "agent=calculator", "--limit", "1")
    batch = await waypoint(settings, "rerun", *select, "--priority", "5", "--json")
    assert batch.code == 0, batch.err
    (item,) = json.loads(batch.out)["items"]
    assert (await wp.run(item["run_id"])).priority == 5
    line = one_line_error(await waypoint(settings, "rerun", run_id, "--priority", "0"))
    assert "invalid priority 0" in line


async def test_priority_over_http_and_the_agent_protocol_and_on_the_viewer(api: ApiServer, worker):
    r = await api.http.post("/v1/runs", json={"task": "add 2 and 3", "agent": "calculator", "priority": 5})
    assert r.status_code == 201, r.text
    run_id = r.json()["run_id"]

    async def finished() -> dict | None:
        found = (await api.http.get(f"/v1/runs/{run_id}")).json()
        return found if found.get("status") == "completed" else None

    assert (await eventually(finished, what="the run's end"))["priority"] == 5
    bad = await api.http.post("/v1/runs", json={"task": "x", "agent": "calculator", "priority": 0})
    assert bad.status_code == 422
    assert bad.json()["error"]["message"] == (
        "the request does not fit this endpoint: priority: Input should be greater than or equal to 1"
    )
    schema = (await api.http.get("/openapi.json")).json()["components"]["schemas"]["StartRun"]
    assert (schema["properties"]["priority"]["anyOf"][0]) == {"type": "integer", "minimum": 1, "maximum": 5}
    # the Agent Protocol takes it in config.configurable, beside model and max_steps
    created = await api.http.post(
        "/runs",
        json={
            "assistant_id": "calculator",
            "input": {"messages": [{"role": "user", "content": "add 1 and 2"}]},
            "config": {"configurable": {"priority": 2}},
        },
    )
    assert created.status_code in (200, 201), created.text
    protocol_run = created.json()["run_id"]
    refused = await api.http.post(
        "/runs",
        json={
            "assistant_id": "calculator",
            "input": {"messages": [{"role": "user", "content": "x"}]},
            "config": {"configurable": {"priority": 7}},
        },
    )
    assert refused.status_code == 400 and "invalid priority 7" in refused.json()["error"]["message"], refused.text

    async def row_of(rid: str) -> dict | None:
        found = (await api.http.get(f"/v1/runs/{rid}")).json()
        return found if found.get("status") == "completed" else None

    assert (await eventually(lambda: row_of(protocol_run), what="the protocol run's end"))["priority"] == 2
    # the viewer's run page shows it
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as browser:
        form = (await browser.get("/ui/login")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        fields = {"key": api.key, "next": f"/ui/runs/{run_id}", **({"csrf": csrf.group(1)} if csrf else {})}
        page = await browser.post("/ui/login", data=fields, follow_redirects=True)
    assert page.status_code == 200, page.text[:300]
    assert re.search(r'<dd id="run-priority">5 ', page.text), page.text[:2000]


# --- the dev server's dispatch (the flags of waypoint/app/embedded.py) ------------------------------

DISPATCHED: list[str] = []


@activity.defn(name="priority_probe")
async def probe(tag: str) -> None:
    DISPATCHED.append(tag)


@workflow.defn(name="PriorityFanOut")
class FanOut:
    """Schedules one activity per (tag, priority key, fairness key) on the `-act` queue at once."""

    @workflow.run
    async def run(self, specs: list[tuple[str, int, str]]) -> None:
        queue = workflow.info().task_queue + "-act"
        await asyncio.gather(
            *(
                workflow.start_activity(
                    probe,
                    tag,
                    task_queue=queue,
                    start_to_close_timeout=timedelta(seconds=30),
                    priority=Priority(priority_key=key or None, fairness_key=fair or None),
                )
                for tag, key, fair in specs
            )
        )


async def dispatch_order(client: Client, specs: list[tuple[str, int, str]]) -> list[str]:
    """The order one activity slot takes `specs` in, once all of them wait in the queue's backlog."""
    DISPATCHED.clear()
    queue = f"prio-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[FanOut], workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await client.start_workflow(FanOut.run, specs, id=queue, task_queue=queue)

        async def backlog() -> int:
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=queue + "-act"),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
                    include_task_queue_status=True,
                )
            )
            return described.task_queue_status.backlog_count_hint

        async def all_queued() -> bool:
            return await backlog() == len(specs)

        # Each task reaches the queue a moment after the workflow schedules it: all must wait there
        await eventually(all_queued, what="all in the backlog of the one partition the dev server writes (embedded.py)")
        async with Worker(client, task_queue=queue + "-act", activities=[probe], max_concurrent_activities=1):
            await handle.result()
    return list(DISPATCHED)


async def test_the_dev_server_dispatches_by_priority_then_by_fair_share(client: Client):
    keys = [5, 3, 1, 4, 2, 5, 1, 3, 2, 4, 1, 5]
    order = await dispatch_order(client, [(f"{k}-{i}", k, "") for i, k in enumerate(keys)])
    assert [int(t.split("-")[0]) for t in order] == sorted(keys), order
    # one priority, two fairness keys: the 5 tasks of b, queued after a's 20, take every other turn
    order = await dispatch_order(client, [(f"a{i}", 0, "a") for i in range(20)] + [(f"b{i}", 0, "b") for i in range(5)])
    assert sum(t.startswith("b") for t in order[:10]) >= 4, order
