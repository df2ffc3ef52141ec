"""Rate limits of the HTTP API, per key, over a real uvicorn: a key gets its burst and then 429 with
Retry-After; keys do not share a bucket; a key's live streams are capped, on every streaming route,
and a stream that ends or is dropped gives its slot back; unset, nothing is limited.

The bucket's clock is frozen (and moved by hand), so no refill can happen mid-test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.helpers import eventually, start
from waypoint.app.http.limits import HttpLimits, TokenBucket
from waypoint.app.http.server import api_server, start_api, stop_api, url_of
from waypoint.client import Waypoint
from waypoint.names import RunStatus

pytestmark = pytest.mark.postgres


class FrozenClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Limited:
    url: str
    keys: list[str]
    limits: HttpLimits
    clock: FrozenClock

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@contextlib.asynccontextmanager
async def serve(client, engine, settings, **limits: Any) -> AsyncIterator[Limited]:
    """The API with these limits (auth on), two keys of the tenant, and the bucket's clock frozen."""
    limited = settings.model_copy(update=limits)
    wp = Waypoint(client, engine, limited)
    server = api_server(limited, host="127.0.0.1", port=0, waypoint=wp)
    task = await start_api(server)
    try:
        keys = [(await wp.keys.create(settings.tenant, name))[0] for name in ("one", "two")]
        state = server.config.app.state.api
        clock = FrozenClock()
        state.limits.clock = clock
        yield Limited(url_of(server), keys, state.limits, clock)
    finally:
        await stop_api(server, task)


def refused(response: httpx.Response, code: str, setting: str) -> int:
    """The Retry-After of a 429 with the API's error body naming `setting`."""
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert error["code"] == code and setting in error["message"], error
    seconds = response.headers["Retry-After"]
    assert seconds.isdigit() and int(seconds) >= 1
    return int(seconds)


def test_a_bucket_refills_at_its_rate_up_to_its_burst():
    bucket = TokenBucket(rate=2, burst=4, tokens=4, stamp=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [0.0] * 4
    assert bucket.take(0.0) == 0.5  # one token comes in half a second
    assert bucket.take(1.0) == 0.0 and bucket.take(1.0) == 0.0 and bucket.take(1.0) > 0
    assert bucket.take(100.0) == 0.0 and bucket.tokens == 3  # never more than the burst


@pytest.mark.timeout(120)
async def test_a_key_gets_its_burst_then_429_with_retry_after(client, engine, settings):
    async with serve(client, engine, settings, http_requests_per_second=2) as api, api.client(api.keys[0]) as http:
        passed = [(await http.get("/v1/agents")).status_code for _ in range(4)]  # the burst: twice the rate
        assert passed == [200] * 4
        assert refused(await http.get("/v1/agents"), "rate_limited", "WAYPOINT_HTTP_REQUESTS_PER_SECOND") == 1
        assert refused(await http.post("/threads", json={}), "rate_limited", "requests a second") == 1
        assert (await http.get("/assistants/x")).status_code == 429  # the Agent Protocol's routes too
        # what needs no key is never limited
        for path in ("/healthz", "/openapi.json", "/docs", "/ui/login"):
            assert (await http.get(path)).status_code == 200, path
        api.clock.now += 1  # one second: two more requests (the rate), then 429 again
        assert [(await http.get("/v1/agents")).status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.timeout(120)
async def test_two_keys_do_not_share_a_bucket(client, engine, settings):
    async with serve(client, engine, settings, http_requests_per_second=0.4) as api:
        async with api.client(api.keys[0]) as one, api.client(api.keys[1]) as two:
            assert (await one.get("/v1/agents")).status_code == 200  # below 0.5 a second, a burst of 1
            assert refused(await one.get("/v1/agents"), "rate_limited", "0.4 requests a second") == 3  # 2.5 s
            assert (await two.get("/v1/agents")).status_code == 200
            assert (await two.get("/v1/agents")).status_code == 429
        async with httpx.AsyncClient(base_url=api.url, timeout=30) as nobody:
            for _ in range(3):  # an unknown key is a 401 and fills no bucket
                assert (await nobody.get("/v1/agents", headers={"Authorization": "Bearer wp_nope"})).status_code == 401
        assert len(api.limits.buckets) == 2


async def open_stream(stack: contextlib.AsyncExitStack, http: httpx.AsyncClient, path: str) -> httpx.Response:
    """A stream held open until `stack` closes (the client then drops the connection)."""
    response = await stack.enter_async_context(http.stream("GET", path))
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    return response


@pytest.mark.timeout(120)
async def test_the_open_stream_cap_refuses_one_more_and_a_closed_stream_frees_its_slot(client, engine, settings, store):
    async with serve(client, engine, settings, http_open_streams=2) as api:
        live = await start(store, settings)  # a run that never moves: its stream stays open
        one, two = api.client(api.keys[0]), api.client(api.keys[1])
        async with one, two, contextlib.AsyncExitStack() as held:
            for _ in range(3):  # a stream refused by its route (no such run) keeps no slot
                assert (await one.get("/v1/runs/run-nope/stream")).status_code == 404
            await eventually(lambda: _true(not api.limits.streams), what="the refused streams' slots came back")
            await open_stream(held, one, f"/v1/runs/{live}/stream")
            await open_stream(held, one, f"/runs/{live}/stream")  # the Agent Protocol's count too
            for path in (
                f"/v1/runs/{live}/stream",
                f"/v1/runs/{live}/stream?format=agui",
                f"/v1/runs/{live}/stream?children=true",
                f"/runs/{live}/stream",
                f"/threads/any/runs/{live}/stream",
            ):
                extra = await one.get(path)
                assert refused(extra, "too_many_streams", "WAYPOINT_HTTP_OPEN_STREAMS") >= 1, path
            # refused before the route does anything: an unknown agent would be a 404
            for path in ("/runs/stream", "/threads/any/runs/stream"):
                create = await one.post(path, json={"assistant_id": "no-such-agent", "input": {}})
                refused(create, "too_many_streams", "live streams")
            # the other key has slots of its own
            await open_stream(held, two, f"/v1/runs/{live}/stream")
            assert sorted(api.limits.streams.values()) == [1, 2]
        # every client dropped its connection: each slot comes back
        await eventually(lambda: _true(not api.limits.streams), what="the dropped streams' slots came back")

        # a stream that ends by itself (its run finished) gives its slot back as well
        done = await start(store, settings)
        await store.log.finish_run(settings.tenant, done, RunStatus.COMPLETED, "done", None)
        async with api.client(api.keys[0]) as one:
            async with contextlib.AsyncExitStack() as held:
                await open_stream(held, one, f"/v1/runs/{live}/stream")
                await open_stream(held, one, f"/v1/runs/{live}/stream")
                refused(await one.get(f"/v1/runs/{done}/stream"), "too_many_streams", "WAYPOINT_HTTP_OPEN_STREAMS")
            await eventually(lambda: _true(not api.limits.streams), what="the slots came back")
            for _ in range(3):  # more streams than the cap, one after another, each ending by itself
                await finish_stream(one, done)
                await eventually(lambda: _true(not api.limits.streams), what="the ended stream's slot came back")


async def finish_stream(http: httpx.AsyncClient, run_id: str) -> None:
    async with http.stream("GET", f"/v1/runs/{run_id}/stream") as response:
        assert response.status_code == 200
        async for _ in response.aiter_lines():
            pass


async def _true(value: bool) -> bool:
    return value


@pytest.mark.timeout(120)
async def test_no_limit_when_unset(client, engine, settings, store):
    async with serve(client, engine, settings) as api, api.client(api.keys[0]) as http:
        assert [(await http.get("/v1/agents")).status_code for _ in range(30)] == [200] * 30
        live = await start(store, settings)
        async with contextlib.AsyncExitStack() as held:
            for _ in range(5):
                await open_stream(held, http, f"/v1/runs/{live}/stream")
        assert api.limits.buckets == {} and api.limits.streams == {}  # nothing counted, nothing kept
