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


# --- CPU from /proc ---------------------------------------------------------------------------------

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int | str) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()  # fields from the 3rd (state) on: comm may hold spaces


def proc_cpu_s(pid: int | str, *, reaped: bool = False) -> float:
    """A process's CPU seconds (user + system); `reaped`: with its waited-for children's."""
    f = _proc_stat(pid)
    if f is None:
        return 0.0
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if reaped else 0)
    return ticks * TICK_S


def machine_busy_s() -> float:
    """The whole machine's busy CPU seconds, every core: all of /proc/stat's cpu line but idle and iowait."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    return (sum(values) - values[3] - values[4]) * TICK_S


def postgres_pids(state_dir: Path) -> list[int]:
    """The embedded Postgres: its postmaster (the process whose command line names the stack's folder) and
    the processes it forked (backends, checkpointer, WAL writer...)."""
    procs: dict[int, tuple[int, str]] = {}  # pid -> (parent, comm)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (f := _proc_stat(entry.name)) is not None:
            comm = (entry / "comm").read_text().strip() if (entry / "comm").exists() else ""
            procs[int(entry.name)] = (int(f[1]), comm)
    roots = []
    for pid, (_, comm) in procs.items():
        if comm == "postgres":
            with contextlib.suppress(OSError):
                if str(state_dir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    roots.append(pid)
    return roots + [pid for pid, (parent, _) in procs.items() if parent in roots]


@dataclass
class Cpu:
    """CPU seconds so far: this process (every framework's worker, the clients, the fake model server),
    the Temporal server, Postgres, and the whole machine."""

    process: float
    temporal: float
    postgres: float
    machine: float

    @classmethod
    def now(cls, temporal_pid: int | None, state_dir: Path) -> Cpu:
        pg = postgres_pids(state_dir)
        # The postmaster's reaped children count too: a backend that exited took its CPU with it otherwise.
        postgres = sum(proc_cpu_s(pid, reaped=i == 0) for i, pid in enumerate(pg))
        return cls(proc_cpu_s("self"), proc_cpu_s(temporal_pid) if temporal_pid else 0.0, postgres, machine_busy_s())

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(
            self.process - other.process,
            self.temporal - other.temporal,
            self.postgres - other.postgres,
            self.machine - other.machine,
        )


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
    def __init__(self, ledger: common.Ledger, plain: Client, temporal_pid: int | None = None, state_dir: Path = Path()):
        self.ledger = ledger
        self.plain = plain  # no plugins: histories and terminations only
        self.temporal_pid = temporal_pid
        self.state_dir = state_dir

    def cpu(self) -> Cpu:
        return Cpu.now(self.temporal_pid, self.state_dir)

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
    # per framework, per number of runs at once, per round
    steps_per_s: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    cpu_per_step: dict[str, dict[int, list[Cpu]]] = field(default_factory=dict)  # CPU seconds per step
    big: dict[str, tuple[Outcome, int]] = field(default_factory=dict)  # outcome, history bytes
    large: dict[str, tuple[Outcome, int]] = field(default_factory=dict)  # the same, Waypoint at --large-pad
    kills: dict[str, Kill] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)  # the last lines of the report


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
            for at_once in args.concurrency:
                label = f"round {rnd + 1}/{args.repetitions}: {fw.name}, {at_once} runs at once"
                with console.status(label):
                    before = bench.cpu()
                    began = time.monotonic()
                    runs = await asyncio.gather(*(bench.run(fw, args.steps) for _ in range(at_once)))
                    wall = time.monotonic() - began
                    used = bench.cpu() - before
                for r in runs:
                    check(fw, r, args.steps)
                steps = sum(len(r.step_ms) for r in runs)
                out.steps_per_s.setdefault(fw.name, {}).setdefault(at_once, []).append(steps / wall)
                per_step = Cpu(used.process / steps, used.temporal / steps, used.postgres / steps, used.machine / steps)
                out.cpu_per_step.setdefault(fw.name, {}).setdefault(at_once, []).append(per_step)
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
    import _peers_langgraph
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
    temporal = stack._temporal.pid if stack._temporal is not None else None
    b = Bench(ledger, plain, temporal, stack.state_dir)
    pyd_client = await _peers_pydantic.connect(address)
    oai_client = await _peers_openai.connect(address)
    lg_client = await _peers_langgraph.connect(address)
    local = _peers_waypoint.peers_waypoint_local is not None
    async with waypoint_side(settings) as wp:
        frameworks = [waypoint_framework(WAYPOINT, wp, _peers_waypoint.AGENT)]
        if local:
            frameworks.append(waypoint_framework(WAYPOINT_LOCAL, wp, _peers_waypoint.LOCAL_AGENT))
        frameworks += [
            peer_framework(_peers_pydantic, pyd_client, _peers_pydantic.TASK_QUEUE),
            peer_framework(_peers_openai, oai_client, _peers_openai.TASK_QUEUE),
            peer_framework(_peers_langgraph, lg_client, _peers_langgraph.TASK_QUEUE),
        ]
        async with (
            _peers_pydantic.build_worker(pyd_client),
            _peers_openai.build_worker(oai_client),
            _peers_langgraph.build_worker(lg_client),
        ):
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
        peers = ((_peers_pydantic, pyd_client), (_peers_openai, oai_client), (_peers_langgraph, lg_client))
        for module, client in peers if not args.no_kill else ():
            queue = f"{KILL_QUEUE}-{module.NAME}"
            targets.append(
                KillTarget(module.NAME, peer_framework(module, client, queue), peer_worker(module.NAME, queue))
            )
        for target in targets if not args.no_kill else ():
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
    top = max(args.concurrency)
    main = Table(title=f"Per step, {args.steps} steps of an instant model and a trivial tool", title_justify="left")
    cols = (
        "framework",
        "median ms/step",
        "p90 ms/step",
        "median per round",
        f"history per step, {args.pad // 1000} KB outputs",
        f"{args.big_steps} such steps",
    )
    for col in cols:
        main.add_column(col, justify="left" if col in ("framework", f"{args.big_steps} such steps") else "right")
    medians: dict[str, float] = {}
    per_step: dict[str, float] = {}
    for fw in frameworks:
        pooled = [ms for rnd in m.step_ms[fw.name] for ms in rnd]
        medians[fw.name] = statistics.median(pooled)
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
            f"{per_step[fw.name] / 1024:,.1f} KB",
            ended,
        )
    console.print(main)

    # Runs at once: steps/s and CPU per step, the median over rounds (each round in brackets for steps/s).
    fleet = Table(
        title=f"Runs of {args.steps} steps at once: throughput and CPU ms per step "
        "(process: every framework's worker, the clients and the fake model; machine: every core's busy time)",
        title_justify="left",
    )
    for col in ("framework", "at once", "steps/s", "process", "temporal server", "postgres", "machine"):
        fleet.add_column(col, justify="left" if col == "framework" else "right")
    rates: dict[str, dict[int, float]] = {}
    cpu: dict[str, dict[int, Cpu]] = {}  # ms per step, medians over rounds
    for at_once in args.concurrency:
        for fw in frameworks:
            rounds = m.steps_per_s[fw.name][at_once]
            rates.setdefault(fw.name, {})[at_once] = statistics.median(rounds)
            used = m.cpu_per_step[fw.name][at_once]
            c = Cpu(
                *(
                    1000 * statistics.median(getattr(u, part) for u in used)
                    for part in ("process", "temporal", "postgres", "machine")
                )
            )
            cpu.setdefault(fw.name, {})[at_once] = c
            fleet.add_row(
                fw.name,
                str(at_once),
                f"{rates[fw.name][at_once]:.1f} ({' / '.join(f'{r:.1f}' for r in rounds)})",
                f"{c.process:.1f}",
                f"{c.temporal:.1f}",
                f"{c.postgres:.1f}",
                f"{c.machine:.1f}",
            )
    console.print(fleet)

    peers = [fw.name for fw in frameworks if fw.peer]
    ours = [fw.name for fw in frameworks if not fw.peer]
    ratios = Table(
        title="Waypoint / peer (ms per step, CPU and history: lower is better; steps/s: higher)", title_justify="left"
    )
    for col in (
        "waypoint variant",
        "peer",
        "ms per step",
        f"steps/s, {top} at once",
        f"machine CPU/step, {top} at once",
        "history per step",
    ):
        ratios.add_column(col, justify="left" if col in ("waypoint variant", "peer") else "right")
    for w in ours:
        for p in peers:
            ratios.add_row(
                w,
                p,
                f"{medians[w] / medians[p]:.2f}x",
                f"{rates[w][top] / rates[p][top]:.2f}x",
                f"{cpu[w][top].machine / cpu[p][top].machine:.2f}x",
                f"{per_step[w] / per_step[p]:.3f}x",
            )
    console.print(ratios)
    m.summary = summary(args, peers, medians, rates, cpu)

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
    if m.kills:
        console.print(kills)
    for name, (large, history) in m.large.items():
        console.print(
            f"{name}: history per step with {args.large_pad // 1000} KB tool outputs, {args.big_steps} steps: "
            f"{history / max(1, large.requests) / 1024:.1f} KB ({large.status})"
        )
    console.print(
        f"Waypoint ran with its defaults: memory on, the Postgres mirror on, tracing on ({span_count:,} spans written)."
    )
    for line in m.summary:
        print(line)


def summary(
    args: argparse.Namespace,
    peers: list[str],
    medians: dict[str, float],
    rates: dict[str, dict[int, float]],
    cpu: dict[str, dict[int, Cpu]],
) -> list[str]:
    """The last lines: Waypoint (defaults) against the best peer at each measure. CPU is the whole machine's
    busy time per step (the worker, the Temporal server and Postgres together: a fleet pays for all of it)."""
    lines = []
    if WAYPOINT_LOCAL not in medians:
        lines.append("`@tool(local=True)` is not in this Waypoint: no local-tool variant measured.")
    else:
        best = min(medians[p] for p in peers)
        lines.append(f"waypoint local tool/faster peer, ms per step: {medians[WAYPOINT_LOCAL] / best:.2f}x")
    lines.append(f"waypoint/faster peer, ms per step: {medians[WAYPOINT] / min(medians[p] for p in peers):.2f}x")
    for at_once in args.concurrency:
        frugal = min(peers, key=lambda p: cpu[p][at_once].machine)
        better = max(peers, key=lambda p: rates[p][at_once])
        lines.append(
            f"{at_once} at once: machine cpu per step, waypoint/most frugal peer ({frugal}): "
            f"{cpu[WAYPOINT][at_once].machine / cpu[frugal][at_once].machine:.2f}x; "
            f"steps/s, waypoint/better peer ({better}): {rates[WAYPOINT][at_once] / rates[better][at_once]:.2f}x"
        )
    top = max(args.concurrency)
    frugal = min(cpu[p][top].machine for p in peers)
    lines.append(f"cpu per step, waypoint/most frugal peer: {cpu[WAYPOINT][top].machine / frugal:.2f}x")
    better = max(rates[p][top] for p in peers)
    lines.append(f"steps/s at {top} at once, waypoint/better peer: {rates[WAYPOINT][top] / better:.2f}x")
    return lines


def concurrency_levels(text: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers of runs at once, like 1,10,50") from None
    if not levels:
        raise argparse.ArgumentTypeError("give at least one number of runs at once, like 1,10,50")
    return levels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="tool steps per timed run (plus the answer step)")
    parser.add_argument("--repetitions", type=int, default=2, help="interleaved rounds of the timed runs")
    parser.add_argument(
        "--concurrency", type=concurrency_levels, default="1,10,50", help="runs at once in the throughput test"
    )
    parser.add_argument("--big-steps", type=int, default=100, help="steps of the run with large tool outputs")
    parser.add_argument("--pad", type=int, default=20_000, help="bytes of each tool output in that run")
    parser.add_argument(
        "--large-pad", type=int, default=100_000, help="bytes of each tool output in Waypoint's second such run"
    )
    parser.add_argument("--hold", type=float, default=2.0, help="seconds the tool holds after its effect (kill test)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 steps, 1 and 10 at once, 20 big steps")
    parser.add_argument("--no-kill", action="store_true", help="skip the kill test (worker processes, about 2 min)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.concurrency, args.big_steps, args.hold = 10, [1, 10], 20, 1.0
    if min(args.steps, args.repetitions, *args.concurrency, args.big_steps) < 1 or args.hold <= 0:
        parser.error("--steps, --repetitions, --concurrency and --big-steps must be at least 1, --hold above 0")
    needed = ("pydantic_ai", "agents", "temporalio.openai_agents", "langchain_openai", "temporalio.langgraph")
    missing = [name for name in needed if not find_spec(name)]
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
