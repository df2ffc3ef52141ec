"""Waypoint side by side with pydantic-ai's and the OpenAI Agents SDK's Temporal integrations.

    python benchmarks/peers.py [--steps 50] [--repetitions 2] [--concurrency 10] [--big-steps 100] [--quick]

Needs the `peers` extra, in a venv of its own (`pip install -e ".[test,peers]"`). Run it as a file:
it imports the frameworks' modules from this folder, and so do their worker processes.

One Temporal dev server and one Postgres (the embedded stack, in a temporary folder, on free
ports) and one fake OpenAI server over HTTP serve every framework. The model is instant: it
calls the trivial `tick` tool once per step, then answers (`_peers_common.py`). Waypoint runs as
a user runs it, with its defaults: memory on (the memory worker with the embedded Qdrant shard),
the Postgres mirror, tracing to the span file, inline compaction; its workers are built by
`run_worker`, its runs started and awaited through the `Waypoint` client. The peers follow their
own guides (module docstrings of `_peers_pydantic.py` and `_peers_openai.py`).

Measured, for each framework:
- ms per step: one run of `--steps` tool steps plus the answer; a step is the time between two
  model requests arriving at the fake server (the first starts at the client's start call, the
  last ends when the client has the result). `--repetitions` rounds, interleaved, each round in
  another order, after one uncounted warm-up run each;
- `--concurrency` runs of `--steps` at once, in steps per second of wall time (every round);
- a run of `--big-steps` steps whose tool outputs are `--pad` bytes (20 KB): Temporal history
  bytes per step (protobuf ByteSize of every event of every execution of the run, over the steps
  it made) and how it ended (the server terminates a history past 50 MB); Waypoint also once
  with `--large-pad` bytes (100 KB) per output;
- a kill test with worker processes: a 3-step run whose tool appends a line to a file (its side
  effect) and then holds `--hold` s; as soon as step 2's effect is written the worker gets SIGKILL
  and a new one starts. Reported: the new worker's start-up, the time from the kill until the tool
  ran again and until the run ended, and how many times step 2's effect was applied.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import _peers_common as common
from rich.console import Console
from rich.table import Table
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from waypoint.app.devstack import prepare_database, spawn_worker
from waypoint.app.embedded import EmbeddedStack
from waypoint.app.worker import run_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.telemetry import span_file
from waypoint.testing import embedded_stack
from waypoint.testing.fake_openai import FakeOpenAI

HERE = Path(__file__).resolve().parent
WAYPOINT = "waypoint"
WAYPOINT_LOCAL = "waypoint, local tool"
WAYPOINT_QUEUE = "peers-waypoint"
KILL_QUEUE = "peers-kill"
STALL_S = 120  # a run with no model request for this long is stuck (a peer's workflow task failing forever)
console = Console(width=None if sys.stdout.isatty() else 150)


@dataclass
class Outcome:
    status: str  # completed, terminated, failed, stalled, ...
    run_id: str
    requests: int  # model requests the fake server saw for the run
    wall_s: float = 0.0
    step_ms: list[float] = field(default_factory=list)


# --- the frameworks, behind one shape ---------------------------------------------------------------


@dataclass
class Framework:
    name: str
    start: Callable[[str, str, int], Awaitable[str]]  # (tag, task, steps) -> workflow id
    wait: Callable[[str], Awaitable[str]]  # workflow id -> status
    peer: bool


def waypoint_framework(name: str, wp: Waypoint, agent: str) -> Framework:
    async def start(tag: str, task: str, steps: int) -> str:
        return await wp.start_run(task, agent=agent, max_steps=steps)

    async def wait(run_id: str) -> str:
        return (await wp.result(run_id)).status

    return Framework(name, start, wait, peer=False)


def peer_framework(module: object, client: Client, task_queue: str) -> Framework:
    async def start(tag: str, task: str, steps: int) -> str:
        await module.start(client, tag, task, steps, task_queue)  # type: ignore[attr-defined]
        return tag

    async def wait(workflow_id: str) -> str:
        try:
            await client.get_workflow_handle(workflow_id).result()
        except WorkflowFailureError:
            status = (await client.get_workflow_handle(workflow_id).describe()).status
            return status.name.lower() if status else "failed"
        return "completed"

    return Framework(module.NAME, start, wait, peer=True)  # type: ignore[attr-defined]


# --- one run, timed by the fake server --------------------------------------------------------------


class Bench:
    def __init__(self, ledger: common.Ledger, plain: Client):
        self.ledger = ledger
        self.plain = plain  # no plugins: histories and terminations only

    async def run(self, fw: Framework, ticks: int, pad: int = 0, hold: float = 0.0) -> Outcome:
        tag = f"{fw.name.split(',')[0]}-{uuid.uuid4().hex[:10]}"
        began = time.monotonic()
        run_id = await fw.start(tag, common.task(ticks, pad, tag, hold), ticks + 1)
        status = await self._wait(fw, run_id, tag, began)
        ended = time.monotonic()
        times = self.ledger.times(tag)
        bounds = [began, *times[1:], ended]
        step_ms = [(b - a) * 1000 for a, b in zip(bounds, bounds[1:], strict=False)]
        return Outcome(status, run_id, len(times), ended - began, step_ms)

    async def _wait(self, fw: Framework, run_id: str, tag: str, began: float) -> str:
        waiting = asyncio.ensure_future(fw.wait(run_id))
        while True:
            done, _ = await asyncio.wait([waiting], timeout=5)
            if done:
                return waiting.result()
            times = self.ledger.times(tag)
            last = times[-1] if times else began
            if time.monotonic() - last > STALL_S:
                with contextlib.suppress(Exception):
                    await self.plain.get_workflow_handle(run_id).terminate("peers.py: no progress")
                waiting.cancel()
                return f"stalled after {len(times)} requests"

    async def history_bytes(self, workflow_id: str) -> int:
        total = 0
        for _ in range(20):  # visibility lags a moment behind a run's end on the dev server
            executions = [e async for e in self.plain.list_workflows(f"WorkflowId = '{workflow_id}'")]
            if executions and all(e.status != WorkflowExecutionStatus.RUNNING for e in executions):
                break
            await asyncio.sleep(0.5)
        for execution in executions:
            history = await self.plain.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
            total += sum(event.ByteSize() for event in history.events)
        return total


@dataclass
class Measured:
    step_ms: dict[str, list[list[float]]] = field(default_factory=dict)  # per framework, per round
    steps_per_s: dict[str, list[float]] = field(default_factory=dict)
    big: dict[str, tuple[Outcome, int]] = field(default_factory=dict)  # outcome, history bytes
    large: dict[str, tuple[Outcome, int]] = field(default_factory=dict)  # the same, Waypoint at --large-pad
    kills: dict[str, Kill] = field(default_factory=dict)


@dataclass
class Kill:
    startup_s: float
    rerun_s: float | None  # kill -> the tool ran again
    done_s: float | None  # kill -> the run ended
    effects: int
    status: str


async def measure(args: argparse.Namespace, bench: Bench, frameworks: list[Framework]) -> Measured:
    out = Measured()
    for fw in frameworks:  # warm-up: sandbox imports, connection pools, the first Qdrant writes
        await bench.run(fw, 5)
    for rnd in range(args.repetitions):
        order = frameworks[rnd % len(frameworks) :] + frameworks[: rnd % len(frameworks)]
        for fw in order:
            with console.status(f"round {rnd + 1}/{args.repetitions}: {fw.name}, one run of {args.steps} steps"):
                single = await bench.run(fw, args.steps)
            check(fw, single, args.steps)
            out.step_ms.setdefault(fw.name, []).append(single.step_ms)
            label = f"round {rnd + 1}/{args.repetitions}: {fw.name}, {args.concurrency} runs at once"
            with console.status(label):
                began = time.monotonic()
                runs = await asyncio.gather(*(bench.run(fw, args.steps) for _ in range(args.concurrency)))
                wall = time.monotonic() - began
            for r in runs:
                check(fw, r, args.steps)
            out.steps_per_s.setdefault(fw.name, []).append(sum(len(r.step_ms) for r in runs) / wall)
    for fw in frameworks:
        with console.status(f"{fw.name}: {args.big_steps} steps with {args.pad:,}-byte tool outputs"):
            big = await bench.run(fw, args.big_steps, pad=args.pad)
            out.big[fw.name] = (big, await bench.history_bytes(big.run_id))
    # Waypoint only: a peer's history passes the server's limit within a few steps at this size.
    for fw in (f for f in frameworks if f.name in (WAYPOINT, WAYPOINT_LOCAL)):
        with console.status(f"{fw.name}: {args.big_steps} steps with {args.large_pad:,}-byte tool outputs"):
            large = await bench.run(fw, args.big_steps, pad=args.large_pad)
            out.large[fw.name] = (large, await bench.history_bytes(large.run_id))
    return out


def check(fw: Framework, outcome: Outcome, ticks: int) -> None:
    if outcome.status != "completed" or outcome.requests != ticks + 1:
        raise RuntimeError(
            f"{fw.name}: a {ticks}-step run ended {outcome.status} after {outcome.requests} model requests"
        )


# --- the kill test, with worker processes -----------------------------------------------------------


@dataclass
class KillTarget:
    name: str
    framework: Framework  # started on the kill queue
    spawn: Callable[[], subprocess.Popen[str]]


async def kill_test(target: KillTarget, effects: Path, hold: float) -> Kill:
    procs = [await asyncio.to_thread(target.spawn)]
    try:
        tag = f"kill-{uuid.uuid4().hex[:10]}"
        run_id = await target.framework.start(tag, common.task(3, 0, tag, hold), 4)
        deadline = time.monotonic() + 120
        while common.read_calls(effects, tag, 2)[1] < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{target.name}: step 2's effect never came")
            await asyncio.sleep(0.005)
        procs[0].kill()  # SIGKILL: nothing is reported to Temporal
        killed = time.time()
        procs[0].wait()
        began = time.monotonic()
        procs.append(await asyncio.to_thread(target.spawn))
        startup = time.monotonic() - began
        try:
            status = await asyncio.wait_for(target.framework.wait(run_id), 600)
        except TimeoutError:
            status = "not done in 600 s"
        done = time.time() - killed
        calls, applied = common.read_calls(effects, tag, 2)
        rerun = calls[1] - killed if len(calls) > 1 else None
        return Kill(startup, rerun, done, applied, status)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    await asyncio.to_thread(proc.wait, 15)
                except subprocess.TimeoutExpired:
                    proc.kill()


# --- the stack and the frameworks -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def waypoint_side(settings: Settings) -> AsyncIterator[Waypoint]:
    """A Waypoint worker as `waypoint worker` runs it (`run_worker`), and a client on it."""
    engine = await prepare_database(settings.database_url or "")
    wp = await Waypoint.connect(settings)
    stop, ready = asyncio.Event(), asyncio.Event()
    worker = asyncio.ensure_future(run_worker(wp.client, engine, settings, stop, ready.set))
    try:
        await asyncio.wait([worker, asyncio.ensure_future(ready.wait())], return_when=asyncio.FIRST_COMPLETED)
        if worker.done():
            worker.result()  # raises what stopped it
        yield wp
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await worker
        await wp.close()
        await engine.dispose()


async def bench(
    args: argparse.Namespace, stack: EmbeddedStack, fake: FakeOpenAI, ledger: common.Ledger, tmp: Path
) -> None:
    import _peers_openai
    import _peers_pydantic
    import _peers_waypoint

    assert stack.info is not None
    address = stack.info.temporal_address
    settings = Settings(
        state_dir=tmp / "waypoint",
        temporal_address=address,
        database_url=stack.info.database_url,
        task_queue=WAYPOINT_QUEUE,
        agents="_peers_waypoint",
        openai_api_key="fake",
        openai_base_url=fake.base_url,
    )
    effects = tmp / "effects.log"
    plain = await Client.connect(address)
    b = Bench(ledger, plain)
    pyd_client = await _peers_pydantic.connect(address)
    oai_client = await _peers_openai.connect(address)
    local = _peers_waypoint.peers_waypoint_local is not None
    async with waypoint_side(settings) as wp:
        frameworks = [waypoint_framework(WAYPOINT, wp, _peers_waypoint.AGENT)]
        if local:
            frameworks.append(waypoint_framework(WAYPOINT_LOCAL, wp, _peers_waypoint.LOCAL_AGENT))
        frameworks += [
            peer_framework(_peers_pydantic, pyd_client, _peers_pydantic.TASK_QUEUE),
            peer_framework(_peers_openai, oai_client, _peers_openai.TASK_QUEUE),
        ]
        async with _peers_pydantic.build_worker(pyd_client), _peers_openai.build_worker(oai_client):
            measured = await measure(args, b, frameworks)

    # The kill test: every worker is a process of its own, on a queue no in-process worker polls.
    kill_settings = replace_settings(settings, task_queue=KILL_QUEUE, state_dir=tmp / "kill")
    counter = iter(range(1000))

    def waypoint_worker() -> subprocess.Popen[str]:
        # One process owns a Qdrant shard: each worker gets its own, never waiting on a dead one's lock.
        env = kill_settings.child_environment(
            WAYPOINT_QDRANT_PATH=str(tmp / f"qdrant-{next(counter)}"),
            PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
            **{common.EFFECTS_ENV: str(effects)},
        )
        return spawn_worker(env, timeout=120)

    def peer_worker(name: str, queue: str) -> Callable[[], subprocess.Popen[str]]:
        env = dict(
            os.environ, OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="fake", **{common.EFFECTS_ENV: str(effects)}
        )
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        return lambda: common.spawn([sys.executable, str(HERE / "_peers_worker.py"), name, address, queue], env)

    async with contextlib.AsyncExitStack() as exits:
        kwp = await Waypoint.connect(kill_settings)
        exits.push_async_callback(kwp.close)
        targets = [
            KillTarget(WAYPOINT, waypoint_framework(WAYPOINT, kwp, _peers_waypoint.AGENT), waypoint_worker),
            KillTarget(
                "waypoint, tool keyed by ctx.idempotency_key",
                waypoint_framework(WAYPOINT, kwp, _peers_waypoint.KEYED_AGENT),
                waypoint_worker,
            ),
        ]
        if local:
            targets.append(
                KillTarget(
                    WAYPOINT_LOCAL, waypoint_framework(WAYPOINT, kwp, _peers_waypoint.LOCAL_AGENT), waypoint_worker
                )
            )
        for module, client in ((_peers_pydantic, pyd_client), (_peers_openai, oai_client)):
            queue = f"{KILL_QUEUE}-{module.NAME}"
            targets.append(
                KillTarget(module.NAME, peer_framework(module, client, queue), peer_worker(module.NAME, queue))
            )
        for target in targets:
            with console.status(f"kill test: {target.name}"):
                measured.kills[target.name] = await kill_test(target, effects, args.hold)
    spans = span_file(settings.state_dir)
    span_count = sum(1 for _ in spans.open()) if spans.exists() else 0
    report(args, frameworks, measured, span_count)


def replace_settings(settings: Settings, **update: object) -> Settings:
    return settings.model_copy(update=update)


# --- the report -------------------------------------------------------------------------------------


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def report(args: argparse.Namespace, frameworks: list[Framework], m: Measured, span_count: int) -> None:
    main = Table(title=f"Per step, {args.steps} steps of an instant model and a trivial tool", title_justify="left")
    cols = (
        "framework",
        "median ms/step",
        "p90 ms/step",
        "median per round",
        f"{args.concurrency} runs at once, steps/s",
        f"history per step, {args.pad // 1000} KB outputs",
        f"{args.big_steps} such steps",
    )
    for col in cols:
        main.add_column(col, justify="left" if col in ("framework", f"{args.big_steps} such steps") else "right")
    medians: dict[str, float] = {}
    rates: dict[str, float] = {}
    per_step: dict[str, float] = {}
    for fw in frameworks:
        pooled = [ms for rnd in m.step_ms[fw.name] for ms in rnd]
        medians[fw.name] = statistics.median(pooled)
        rates[fw.name] = statistics.median(m.steps_per_s[fw.name])
        big, history = m.big[fw.name]
        per_step[fw.name] = history / max(1, big.requests)
        ended = big.status if big.status != "completed" else "completed"
        if big.status != "completed":
            ended = f"{big.status} at step {big.requests}"
        main.add_row(
            fw.name,
            f"{medians[fw.name]:.1f}",
            f"{p90(pooled):.1f}",
            " / ".join(f"{statistics.median(rnd):.0f}" for rnd in m.step_ms[fw.name]),
            f"{rates[fw.name]:.1f} ({' / '.join(f'{r:.1f}' for r in m.steps_per_s[fw.name])})",
            f"{per_step[fw.name] / 1024:,.1f} KB",
            ended,
        )
    console.print(main)

    peers = [fw.name for fw in frameworks if fw.peer]
    ours = [fw.name for fw in frameworks if not fw.peer]
    ratios = Table(
        title="Waypoint / peer (ms per step and history: lower is better; steps/s: higher)", title_justify="left"
    )
    for col in ("waypoint variant", "peer", "ms per step", "steps/s at once", "history per step"):
        ratios.add_column(col, justify="left" if col in ("waypoint variant", "peer") else "right")
    for w in ours:
        for p in peers:
            ratios.add_row(
                w,
                p,
                f"{medians[w] / medians[p]:.2f}x",
                f"{rates[w] / rates[p]:.2f}x",
                f"{per_step[w] / per_step[p]:.3f}x",
            )
    console.print(ratios)

    kills = Table(
        title=f"SIGKILL of the worker after step 2's side effect (the tool then holds {args.hold:g} s)",
        title_justify="left",
    )
    for col in (
        "framework",
        "new worker start-up s",
        "tool ran again after s",
        "run ended after s",
        "effect applied",
        "run",
    ):
        kills.add_column(col, justify="left" if col in ("framework", "effect applied", "run") else "right")
    for name, k in m.kills.items():
        applied = {1: "once", 2: "twice"}.get(k.effects, f"{k.effects} times")
        kills.add_row(
            name,
            f"{k.startup_s:.1f}",
            f"{k.rerun_s:.1f}" if k.rerun_s is not None else "-",
            f"{k.done_s:.1f}" if k.done_s is not None else "-",
            applied,
            k.status,
        )
    console.print(kills)
    for name, (large, history) in m.large.items():
        console.print(
            f"{name}: history per step with {args.large_pad // 1000} KB tool outputs, {args.big_steps} steps: "
            f"{history / max(1, large.requests) / 1024:.1f} KB ({large.status})"
        )
    console.print(
        f"Waypoint ran with its defaults: memory on, the Postgres mirror on, tracing on ({span_count:,} spans written)."
    )
    if WAYPOINT_LOCAL not in medians:
        console.print("`@tool(local=True)` is not in this Waypoint: no local-tool variant measured.")
    else:
        best = min(medians[p] for p in peers)
        console.print(f"waypoint local tool/faster peer, ms per step: {medians[WAYPOINT_LOCAL] / best:.2f}x")
    print(f"waypoint/faster peer, ms per step: {medians[WAYPOINT] / min(medians[p] for p in peers):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="tool steps per timed run (plus the answer step)")
    parser.add_argument("--repetitions", type=int, default=2, help="interleaved rounds of the timed runs")
    parser.add_argument("--concurrency", type=int, default=10, help="runs at once in the throughput test")
    parser.add_argument("--big-steps", type=int, default=100, help="steps of the run with large tool outputs")
    parser.add_argument("--pad", type=int, default=20_000, help="bytes of each tool output in that run")
    parser.add_argument(
        "--large-pad", type=int, default=100_000, help="bytes of each tool output in Waypoint's second such run"
    )
    parser.add_argument("--hold", type=float, default=2.0, help="seconds the tool holds after its effect (kill test)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 steps, 4 at once, 20 big steps")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.concurrency, args.big_steps, args.hold = 10, 4, 20, 1.0
    if min(args.steps, args.repetitions, args.concurrency, args.big_steps) < 1 or args.hold <= 0:
        parser.error("--steps, --repetitions, --concurrency and --big-steps must be at least 1, --hold above 0")
    missing = [name for name in ("pydantic_ai", "agents", "temporalio.openai_agents") if not find_spec(name)]
    if missing:
        print(f"error: the peers are not installed ({', '.join(missing)}): pip install -e '.[peers]'", file=sys.stderr)
        raise SystemExit(1)
    # Waypoint's defaults, not whatever this shell sets.
    for key in [k for k in os.environ if k.startswith(("WAYPOINT_", "OPENAI_"))]:
        del os.environ[key]
    with tempfile.TemporaryDirectory(prefix="waypoint-peers-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            ledger = common.Ledger()
            fake = FakeOpenAI(common.responder(ledger))
            try:
                fake.start()
                # The peers' openai clients read these; Waypoint gets them through its Settings.
                os.environ.update(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="fake")
                asyncio.run(bench(args, stack, fake, ledger, Path(tmp)))
            finally:
                fake.stop()


if __name__ == "__main__":
    main()
