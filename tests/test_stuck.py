"""A run that cannot make progress: its workflow task fails on every attempt (here: the only worker
left runs workflow code that cannot replay it, as after a deploy that broke determinism). It is
shown `stuck` with the failure (CLI, HTTP, the viewer, a metric), a message to it answers at once with what is
wrong, and cancel still ends it (its workflow is terminated), so it can be deleted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from tests.browser import sign_in
from tests.changed_workflow import ChangedAgentRunWorkflow
from tests.helpers import eventually, waypoint
from tests.telemetry_helpers import by, points
from waypoint import retry, telemetry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import Conflict, NotFound, Unavailable

pytestmark = pytest.mark.postgres


@pytest.fixture
def metrics(settings: Settings) -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    telemetry.setup(settings, metric_reader=reader)
    yield reader
    telemetry.reset()


async def test_a_stuck_run_is_shown_stuck_refuses_messages_at_once_and_cancel_ends_it(
    client: Client, engine, settings: Settings, agents, api, metrics: InMemoryMetricReader
):
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, agents):
        run_id = await wp.start_run("clean up", agent="careful")
        await eventually(lambda: wp.progress(run_id), what="the run waiting for approval")
    handle = client.get_workflow_handle(run_id)
    async with Worker(client, task_queue=settings.task_queue, workflows=[ChangedAgentRunWorkflow]):
        await handle.signal("wake")  # a workflow task, which this worker cannot replay
        why = await eventually(lambda: wp.stuck(run_id), what="the run shown stuck")
        assert "Nondeterminism" in why or "nondetermin" in why.lower(), why

        got = (await api.http.get(f"/v1/runs/{run_id}")).json()
        assert (got["status"], got["stuck"], got["live"]) == ("stuck", why, None)
        listed = (await api.http.get("/v1/runs")).json()["runs"]
        assert [(r["run_id"], r["status"]) for r in listed] == [(run_id, "stuck")]
        done = await waypoint(settings, "status", run_id)
        assert "stuck" in done.out and "waypoint cancel" in done.out, done.out + done.err
        async with httpx.AsyncClient(base_url=api.url) as viewer:
            assert (await sign_in(viewer, api.key)).status_code == 303
            page = (await viewer.get(f"/ui/runs/{run_id}")).text
        assert 'class="status status-stuck"' in page and "Nondeterminism" in page
        assert by(points(metrics)["waypoint.run.stuck"], "waypoint.run_id") == {(run_id,): 1}

        with pytest.raises(Conflict, match=f"run {run_id} is stuck: its workflow task failed"):
            await wp.pause(run_id)
        progress = await wp.cancel(run_id, "the deploy broke it")
    assert progress.status == "cancelled"
    # Looked at again once it ended, it is not stuck, and the client that cancelled it set its
    # point back to 0. (The API server of this process reports through a meter of its own, whose
    # point stays 1: the gauge's instrument is per telemetry setup, not yet per process.)
    assert await wp.stuck(run_id) is None
    assert 0 in {p.value for p in points(metrics)["waypoint.run.stuck"]}
    assert (await handle.describe()).status == WorkflowExecutionStatus.TERMINATED
    row = await wp.run(run_id)
    assert row.status == "cancelled" and row.error is not None
    assert row.error.startswith("the deploy broke it (while stuck: its workflow task failed")
    await wp.delete(run_id)
    with pytest.raises(NotFound):
        await wp.run(run_id)


async def test_a_message_no_worker_takes_answers_within_the_bound(
    client: Client, engine, settings: Settings, agents, monkeypatch: pytest.MonkeyPatch
):
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, agents):
        run_id = await wp.start_run("clean up", agent="careful")
        await eventually(lambda: _waits_for_approval(wp, run_id), timeout=60, what="the run waiting for approval")
    # Bounded only once the worker is gone: a busy machine's worker may take more than 1 s to answer.
    monkeypatch.setattr(retry, "ACTION_WAIT", timedelta(seconds=1))
    with pytest.raises(Unavailable, match=f"run {run_id} did not take pause within 1 s: .*stays queued"):
        await wp.pause(run_id)
    await client.get_workflow_handle(run_id).terminate("test over")


async def test_the_live_state_of_a_run_no_worker_serves_answers_within_the_bound(
    client: Client, engine, settings: Settings, agents, api, monkeypatch: pytest.MonkeyPatch
):
    """With its worker gone, Temporal holds a query about 30 s before it says no poller is seen:
    the run's live state gives up after retry.ACTION_WAIT, and its GET and page answer from Postgres.
    Each read's query is timed apart from the rest of the read (a sign-in, a page's many reads),
    which a busy machine slows: each gives up within half of Temporal's hold."""
    from waypoint.gateway.temporal import TemporalGateway

    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, agents):
        run_id = await wp.start_run("clean up", agent="careful")
        await eventually(lambda: _waits_for_approval(wp, run_id), timeout=60, what="the run waiting for approval")
    # Bounded only once the worker is gone: a busy machine's worker may take more than 1 s to answer.
    monkeypatch.setattr(retry, "ACTION_WAIT", timedelta(seconds=1))
    gave_up: list[tuple[str, float]] = []
    ask = TemporalGateway.progress

    async def progress(self: TemporalGateway, asked: str) -> Any:
        started = time.monotonic()
        try:
            return await ask(self, asked)
        except Unavailable as exc:
            gave_up.append((str(exc), time.monotonic() - started))
            raise

    monkeypatch.setattr(TemporalGateway, "progress", progress)
    with pytest.raises(Unavailable, match=f"run {run_id} answered no query within 1 s: is a worker polling"):
        await wp.progress(run_id)
    got = (await api.http.get(f"/v1/runs/{run_id}", timeout=120)).json()
    assert (got["status"], got["live"]) == ("waiting_approval", None)  # what Postgres holds
    async with httpx.AsyncClient(base_url=api.url, timeout=120) as viewer:
        assert (await sign_in(viewer, api.key)).status_code == 303
        page = await viewer.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200 and run_id in page.text
    assert len(gave_up) == 3, gave_up  # the call above, the GET, the page: each asked and gave up
    assert all(f"run {run_id} answered no query within 1 s" in why and took < 15 for why, took in gave_up), gave_up
    await client.get_workflow_handle(run_id).terminate("test over")


async def _waits_for_approval(wp: Waypoint, run_id: str) -> bool:
    """The run's row says it waits for an approval (before its worker writes the row: not yet)."""
    try:
        return (await wp.run(run_id)).status == "waiting_approval"
    except NotFound:
        return False
