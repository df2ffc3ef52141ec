"""Streams of a run over SSE: every event once, in order, resumable with Last-Event-ID across
continue-as-new; keep-alive comments; a slow client is cut off, not waited for. Resuming across a
SIGKILLed worker is shown by the kills of tests/test_crash_recovery.py (the first test there reads
the stream around each of its two kills), so no worker process is killed here twice over."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import ApiServer
from tests.helpers import log_seqs, read_stream, sse_events, start, step
from waypoint.app.http.server import api_server, start_api, stop_api, url_of
from waypoint.client import Waypoint
from waypoint.names import RunStatus
from waypoint.types import StepRecord

pytestmark = pytest.mark.postgres


async def test_a_stream_spans_continue_as_new_and_resumes_anywhere(api: ApiServer, worker, engine, settings):
    started = await api.http.post("/v1/runs", json={"task": "hop", "agent": "hopper"})
    run_id = started.json()["run_id"]
    whole = await read_stream(api, run_id)  # joined at once: live to the end
    seqs = await log_seqs(engine, run_id)
    assert [int(e.id) for e in whole] == seqs and whole[-1].event == "run_finished"
    assert whole[-1].data["payload"]["output"] == "hopped"
    wp = Waypoint(None, engine, settings)  # the run really continued as new
    assert (await wp.run(run_id)).steps == 7
    for cut in (0, 1, len(seqs) // 2, len(seqs) - 1):  # resumed from any position: exactly the rest
        assert [int(e.id) for e in await read_stream(api, run_id, last_id=str(cut) if cut else None)] == seqs[cut:]
        assert [int(e.id) for e in await read_stream(api, run_id, after=cut)] == seqs[cut:]
    assert await read_stream(api, run_id, last_id=str(seqs[-1])) == []  # nothing after the end


async def test_an_unknown_or_bad_position_is_refused(api: ApiServer, settings, store):
    assert (await api.http.get("/v1/runs/run-nope/stream")).status_code == 404
    run_id = await start(store, settings)
    for last_id in ("yesterday", "1.5", "3000000000", "2"):  # its log ends at 1: "2" was never sent
        r = await api.http.get(f"/v1/runs/{run_id}/stream", headers={"Last-Event-ID": last_id})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_input", last_id
    assert "last event is 1" in r.json()["error"]["message"]
    r = await api.http.get(f"/v1/runs/{run_id}/stream", params={"after": 2})
    assert r.status_code == 400 and "last event is 1" in r.json()["error"]["message"]
    r = await api.http.get(f"/v1/runs/{run_id}/stream", params={"format": "xml"})
    assert r.status_code == 422


async def test_keep_alive_comments_while_nothing_happens(client, engine, settings, store):
    quiet = settings.model_copy(update={"api_keepalive_seconds": 0.2})
    server = api_server(quiet, host="127.0.0.1", port=0, auth=False, waypoint=Waypoint(client, engine, quiet))
    task = await start_api(server)
    try:
        run_id = await start(store, settings)  # a run that never moves
        comments = []
        async with httpx.AsyncClient(base_url=url_of(server), timeout=10) as http:
            async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
                async for line in response.aiter_lines():
                    if line.startswith(":"):
                        comments.append(line)
                        if len(comments) == 3:
                            break
        assert comments == [": keep-alive"] * 3
    finally:
        await stop_api(server, task)


async def test_stopping_the_server_ends_open_streams_cleanly(client, engine, settings, store, caplog):
    """A stop with a client streaming a live run: the stream ends (the client reads to the end of
    the body, not a body cut off when uvicorn's grace period runs out and cancels it), nothing logs
    a traceback, and a server started after it in the same process streams again."""
    for _ in range(2):
        server = api_server(settings, host="127.0.0.1", port=0, auth=False, waypoint=Waypoint(client, engine, settings))
        task = await start_api(server)
        run_id = await start(store, settings)  # a run that never moves
        stopped: asyncio.Task[None] | None = None
        try:
            async with httpx.AsyncClient(base_url=url_of(server), timeout=30) as http:
                async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
                    lines = response.aiter_lines()
                    assert (await anext(lines)).startswith(("id:", "event:", "data:", ":"))
                    stopped = asyncio.create_task(stop_api(server, task))
                    async for _ in lines:  # to the end of the body: one cut off by a cancel raises
                        pass
            await stopped
        finally:
            if stopped is None:
                await stop_api(server, task)
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records if r.exc_info]


async def test_a_slow_client_is_cut_off_with_an_event_and_resumes(client, engine, settings, store):
    tight = settings.model_copy(update={"api_stream_buffer": 3})
    server = api_server(tight, host="127.0.0.1", port=0, auth=False, waypoint=Waypoint(client, engine, tight))
    task = await start_api(server)
    run_id = await start(store, settings)
    big = "x" * 400_000
    try:
        async with httpx.AsyncClient(base_url=url_of(server), timeout=60) as http:
            async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
                # The client reads nothing while the run writes 20 MB: the socket fills, then its buffer.
                for n in range(1, 51):
                    turn, results, _ = step(n, [("add", {"a": n, "b": 1}, big), ("add", {"a": 0, "b": 0}, big)])
                    await store.steps.record_step(StepRecord(run_id, settings.tenant, n, turn, results))
                received = [e async for e in sse_events(response)]
            cut = received[-1]
            assert cut.event == "error" and cut.data["error"]["code"] == "slow_client"
            assert "Last-Event-ID" in cut.data["error"]["message"]
            ids = [int(e.id) for e in received[:-1]]
            assert ids == list(range(1, len(ids) + 1)) and cut.data["last_event_id"] == ids[-1]
            assert ids[-1] < 151  # it was cut off before the end...
            await store.log.finish_run(settings.tenant, run_id, RunStatus.COMPLETED, "done", None)
            headers = {"Last-Event-ID": str(ids[-1])}
            async with http.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers) as response:
                rest = [e async for e in sse_events(response)]
        assert [int(e.id) for e in rest] == list(range(ids[-1] + 1, 153))  # ...and lost nothing
        assert rest[-1].event == "run_finished"
    finally:
        await stop_api(server, task)


async def test_a_standalone_api_streams_a_run_started_elsewhere_before_its_row_is_written(
    client, engine, settings, store, agents
):
    # As `waypoint serve` runs: Temporal connected on first use. Found by benchmarks/soak.py: its
    # stream clients got 404 for runs the Python client had started, until some request of the API
    # happened to connect Temporal. No worker polls this queue: the run's row is never written.
    quiet = settings.model_copy(update={"api_keepalive_seconds": 0.2, "task_queue": "nobody-polls-this"})
    await store.catalog.register_agents(
        quiet.task_queue, [a.info(callable_providers=["scripted"], worker="t") for a in agents]
    )
    run_id = await Waypoint(client, engine, quiet).start_run("Add 1 and 2.", agent="demo", model="scripted")
    lazy = await Waypoint.connect(quiet, temporal=False)
    server = api_server(quiet, host="127.0.0.1", port=0, auth=False, waypoint=lazy)
    task = await start_api(server)
    try:
        async with httpx.AsyncClient(base_url=url_of(server), timeout=10) as http:
            async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith(":"):
                        break  # the stream is open and waits for the run's first event
            assert (await http.get("/v1/runs/run-nope/stream")).status_code == 404
    finally:
        await stop_api(server, task)
        await lazy.close()
        await client.get_workflow_handle(run_id).terminate()
