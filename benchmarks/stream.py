"""Live streams of the HTTP API, measured: how fast a commit and a model token reach a client.

    python benchmarks/stream.py [--events 200] [--clients 100] [--seconds 10] [--calls 30]

Starts an embedded stack (Temporal, Postgres) in a temporary folder and `waypoint serve` as a
child process (its CPU and memory are the server's alone), then measures, on one table:

- commit to client: a step is recorded with the real store (`record_step`, as a worker does);
  the time from its commit to the moment an SSE client of the run has the step's event;
- model delta to client: the openai adapter streams an answer from the fake OpenAI server (one
  word every 20 ms); the time from the adapter handing a word to the delta publisher (batched
  every WAYPOINT_MODEL_DELTA_FLUSH_MS into a Postgres notification) to the client having it;
- 100 clients: `--clients` SSE clients (in a process of their own) on 10 runs while each run
  records 10 steps a second: the server's CPU and RSS, and commit-to-client latency under load;
- the API's added latency: `POST /v1/runs` against `Waypoint.start_run`, and `GET /v1/runs/{id}`
  against `Waypoint.run` (a finished run), median of `--calls` each.

Run it as a file (it imports `step_overhead.py` from this folder). Numbers move with the load of
the machine; the exit code is 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.table import Table
from step_overhead import console, on_stack

from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack, free_port
from waypoint.app.worker import worker_identity
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.deltas import DeltaPublisher
from waypoint.demo import demo
from waypoint.gateway.temporal import connect
from waypoint.models.openai import OpenAIChatModel, openai_client
from waypoint.names import RunStatus
from waypoint.store import RunStore
from waypoint.store.steps import NewRun
from waypoint.store.streams import DELTAS_CHANNEL
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.types import ModelTurn, RunPlan, StepRecord, ToolCall, ToolResult

TARGETS = {"p50": 20.0, "p95": 100.0}  # ms, commit to client


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def new_run(store: RunStore, tenant: str) -> str:
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await store.steps.create_run(
        NewRun(run_id, tenant, "bench", "stream", "Bench.", RunPlan(model="scripted", max_steps=10**6))
    )
    return run_id


def a_step(run_id: str, tenant: str, n: int) -> StepRecord:
    call = ToolCall(id=f"c{n}", name="add", arguments='{"a": 1, "b": 2}')
    turn = ModelTurn(model="m", content=None, tool_calls=[call])
    return StepRecord(run_id, tenant, n, turn, [ToolResult(call_id=f"c{n}", name="add", output="3")])


class Client:
    """One SSE client of a run: the time each event and delta arrived."""

    def __init__(self, http: httpx.AsyncClient, run_id: str):
        self.http = http
        self.run_id = run_id
        self.events: dict[int, float] = {}  # step -> arrival of its model_response
        self.words: dict[str, float] = {}  # word -> arrival in a model_delta
        self.ready = asyncio.Event()

    async def read(self) -> None:
        async with self.http.stream("GET", f"/v1/runs/{self.run_id}/stream") as response:
            self.ready.set()
            event = ""
            async for line in response.aiter_lines():
                now = time.monotonic()
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:") and event == "model_response":
                    self.events[json.loads(line[5:])["step"]] = now
                elif line.startswith("data:") and event == "model_delta":
                    for word in json.loads(line[5:])["text"].split():
                        self.words.setdefault(word, now)


@contextlib.asynccontextmanager
async def clients(http: httpx.AsyncClient, run_ids: list[str]) -> AsyncIterator[list[Client]]:
    readers = [Client(http, r) for r in run_ids]
    tasks = [asyncio.create_task(c.read()) for c in readers]
    await asyncio.gather(*(c.ready.wait() for c in readers))
    await asyncio.sleep(0.3)  # every subscription is in place
    try:
        yield readers
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def commit_to_client(store: RunStore, http: httpx.AsyncClient, tenant: str, events: int) -> list[float]:
    run_id = await new_run(store, tenant)
    latencies = []
    async with clients(http, [run_id]) as (reader,):
        for n in range(1, events + 1):
            await store.steps.record_step(a_step(run_id, tenant, n))
            committed = time.monotonic()
            while n not in reader.events:
                await asyncio.sleep(0.0005)
            latencies.append(max(0.0, reader.events[n] - committed) * 1000)
            await asyncio.sleep(0.02)
    return latencies


async def delta_to_client(store: RunStore, http: httpx.AsyncClient, settings: Settings, tenant: str) -> list[float]:
    run_id = await new_run(store, tenant)
    words = [f"w{i}" for i in range(150)]
    fake = FakeOpenAI().start()
    fake.answer(Turn(content=" ".join(words), chunk_delay=0.02))
    model = OpenAIChatModel(openai_client(settings.model_copy(update={"openai_base_url": fake.base_url})), "fake")
    publisher = DeltaPublisher(
        lambda p: store.streams.notify(DELTAS_CHANNEL, p), flush_ms=settings.model_delta_flush_ms
    )
    handed: dict[str, float] = {}
    async with clients(http, [run_id]) as (reader,):
        async with publisher.attempt(run_id, 1, 1) as sink:

            class Timed:
                def text(self, piece: str) -> None:
                    for word in piece.split():
                        handed[word] = time.monotonic()
                    sink.text(piece)

                def tool_call(self, *args: Any) -> None:
                    sink.tool_call(*args)

            await model.complete([{"role": "user", "content": "talk"}], [], deltas=Timed())
        deadline = time.monotonic() + 10
        while len(reader.words) < len(words) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    fake.stop()
    return [(reader.words[w] - handed[w]) * 1000 for w in words if w in reader.words]


async def under_load(
    store: RunStore, url: str, key: str, tenant: str, server: psutil.Process, n_clients: int, seconds: float
) -> dict[str, float]:
    """Clients in a process of their own (so parsing 100 streams does not delay the writes), the
    writes here; times are CLOCK_MONOTONIC, the same in both processes."""
    runs = [await new_run(store, tenant) for _ in range(10)]
    watched = [runs[i % len(runs)] for i in range(n_clients)]
    readers = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--read",
        url,
        key,
        ",".join(watched),
        str(seconds + 5),
        stdout=asyncio.subprocess.PIPE,
    )
    assert readers.stdout is not None
    await readers.stdout.readline()  # "ready": every client is subscribed
    server.cpu_percent()
    committed: dict[tuple[str, int], float] = {}
    began = time.monotonic()
    step = 0
    while time.monotonic() - began < seconds:
        step += 1
        for run_id in runs:
            await store.steps.record_step(a_step(run_id, tenant, step))
            committed[(run_id, step)] = time.monotonic()
        await asyncio.sleep(max(0.0, began + step * 0.1 - time.monotonic()))
    cpu = server.cpu_percent()
    rss = server.memory_info().rss / 2**20
    arrivals = json.loads((await readers.stdout.read()) or b"[]")
    await readers.wait()
    latencies = [
        (at - committed[(run_id, int(s))]) * 1000
        for run_id, events in arrivals
        for s, at in events.items()
        if (run_id, int(s)) in committed
    ]
    return {
        "cpu": cpu,
        "rss": rss,
        "p50": pct(latencies, 50),
        "p95": pct(latencies, 95),
        "delivered": len(latencies) / (n_clients * step),
        "events_per_s": len(latencies) / seconds,
    }


async def read_only(url: str, key: str, runs: list[str], seconds: float) -> None:
    """The client process of `under_load`: says "ready", reads, prints [[run_id, {step: arrival}], ...]."""
    limits = httpx.Limits(max_connections=len(runs) + 10)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as http:
        async with clients(http, runs) as readers:
            print("ready", flush=True)
            await asyncio.sleep(seconds)
    print(json.dumps([[c.run_id, c.events] for c in readers]), flush=True)


async def added_latency(
    wp: Waypoint, http: httpx.AsyncClient, store: RunStore, tenant: str, calls: int
) -> dict[str, tuple[float, float]]:
    def median_ms(samples: list[float]) -> float:
        return statistics.median(samples) * 1000

    api_start, py_start, api_get, py_get = [], [], [], []
    for _ in range(calls):
        t = time.monotonic()
        r = await http.post("/v1/runs", json={"task": "Summarize the notes", "agent": "demo"})
        api_start.append(time.monotonic() - t)
        assert r.status_code == 201, r.text
        t = time.monotonic()
        await wp.start_run("Summarize the notes", agent="demo", tenant_id=tenant)
        py_start.append(time.monotonic() - t)
    finished = await new_run(store, tenant)
    await store.log.finish_run(tenant, finished, RunStatus.COMPLETED, "done", None)
    for _ in range(calls):
        t = time.monotonic()
        assert (await http.get(f"/v1/runs/{finished}")).status_code == 200
        api_get.append(time.monotonic() - t)
        t = time.monotonic()
        await wp.run(finished, tenant_id=tenant)
        py_get.append(time.monotonic() - t)
    return {
        "start run": (median_ms(api_start), median_ms(py_start)),
        "get run": (median_ms(api_get), median_ms(py_get)),
    }


def bench_settings(stack: EmbeddedStack, workdir: Path, tenant: str) -> Settings:
    """Settings of a benchmark on `stack`: the fake model's key, no tracing."""
    assert stack.info is not None
    return Settings(
        state_dir=workdir / "state",
        temporal_address=stack.info.temporal_address,
        database_url=stack.info.database_url,
        task_queue="bench",
        tenant=tenant,
        openai_api_key="fake",
        tracing=False,
    )


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    assert stack.info is not None
    tenant = "bench"
    settings = bench_settings(stack, workdir, tenant)
    engine = await prepare_database(stack.info.database_url)
    store = RunStore(engine)
    await store.catalog.register_agents(settings.task_queue, [demo.info(openai=False, worker=worker_identity())])
    key, _ = await store.keys.create_key(tenant, "bench")
    port = free_port()
    env = settings.child_environment(WAYPOINT_API_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "waypoint", "serve"], env=env, stdout=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    client = await connect(settings)
    wp = Waypoint(client, engine, settings)
    try:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            for _ in range(200):
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            with console.status("commit to client..."):
                commit = await commit_to_client(store, http, tenant, args.events)
            with console.status("model delta to client..."):
                delta = await delta_to_client(store, http, settings, tenant)
            with console.status(f"{args.clients} clients..."):
                load = await under_load(store, url, key, tenant, psutil.Process(proc.pid), args.clients, args.seconds)
            with console.status("added latency..."):
                added = await added_latency(wp, http, store, tenant, args.calls)
    finally:
        proc.terminate()
        proc.wait(15)
        await engine.dispose()

    table = Table(title="HTTP API streams (one `waypoint serve` process)", title_justify="left")
    for col in ("measure", "p50 ms", "p95 ms", "other"):
        table.add_column(col, justify="left" if col in ("measure", "other") else "right")
    table.add_row(
        "commit to client, one client",
        f"{statistics.median(commit):.1f}",
        f"{pct(commit, 95):.1f}",
        f"{len(commit)} steps; target p50 <= {TARGETS['p50']:g}, p95 <= {TARGETS['p95']:g}",
    )
    table.add_row(
        "model delta to client",
        f"{statistics.median(delta):.1f}",
        f"{pct(delta, 95):.1f}",
        f"{len(delta)} words, one every 20 ms, batched every {settings.model_delta_flush_ms} ms",
    )
    table.add_row(
        f"commit to client, {args.clients} clients",
        f"{load['p50']:.1f}",
        f"{load['p95']:.1f}",
        f"10 runs x 10 steps/s; {load['events_per_s']:.0f} events/s delivered ({load['delivered']:.0%}); "
        f"server CPU {load['cpu']:.0f}%, RSS {load['rss']:.0f} MiB",
    )
    for name, (api_ms, py_ms) in added.items():
        table.add_row(
            f"{name}: API vs Python client",
            f"{api_ms:.1f}",
            "",
            f"client {py_ms:.1f} ms: the API adds {api_ms - py_ms:.1f} ms (median of {args.calls})",
        )
    console.print(table)
    ok = statistics.median(commit) <= TARGETS["p50"] and pct(commit, 95) <= TARGETS["p95"]
    console.print(f"commit-to-client targets: {'[green]met[/green]' if ok else '[red]missed[/red]'}")


def main() -> None:
    if sys.argv[1:2] == ["--read"]:  # the client process of the load phase
        url, key, runs, seconds = sys.argv[2:6]
        asyncio.run(read_only(url, key, runs.split(","), float(seconds)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200, help="steps recorded for commit-to-client")
    parser.add_argument("--clients", type=int, default=100, help="concurrent SSE clients under load")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the load phase")
    parser.add_argument("--calls", type=int, default=30, help="calls per variant for the added latency")
    args = parser.parse_args()
    on_stack(bench, args)


if __name__ == "__main__":
    main()
