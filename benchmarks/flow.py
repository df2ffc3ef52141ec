"""Fleet flow control: two tenants' runs on two workers against a provider with a fixed capacity,
without limits, with the provider's limits in WAYPOINT_LIMITS_FILE, and with them and a worker killed.

    python benchmarks/flow.py [--runs-a 190] [--runs-b 10] [--steps 10] [--in-flight 4] [--per-minute 600]
                              [--latency 0.5] [--timeout S] [--quick | --full]

Run it as a file: the agent module (`_flow_agents.py`) is imported from this folder, by the workers too.
`--full` is the issue's size (190 + 10 runs of 10 steps, the defaults); `--quick` is 36 + 4 runs of
5 steps, about two minutes on 2 cores.

One embedded stack (Temporal and Postgres, in a temporary folder, on free ports) and, per
configuration, a fresh fake OpenAI server in capacity mode (waypoint/testing/capacity.py): at most
`--in-flight` calls at once and `--per-minute` in any 60 s, each taking `--latency` s, a 429 with
`retry-after` beyond. Two `waypoint worker` processes (long-term memory off) serve the `flow` agent
(`_flow_agents.py`: a run of S steps makes S model calls, S - 1 ticks then its answer). Tenant a's
runs are started first, then tenant b's, through the `Waypoint` client.

Configurations, in this order, each on its own task queue:
- limits off: no limits file; each run retries its own 429s after their retry-after;
- limits set: every worker gets WAYPOINT_LIMITS_FILE naming the provider's capacity for the agent's
  model key, and weight 1 for tenants a and b;
- limits set, a worker killed: the same, and one worker gets SIGKILL once half the requests the runs
  need have been served; it is not restarted.

Per configuration: model requests (served and 429s), the share of 429s, the provider's peak calls
in flight, the makespan (first start to last run's end) against the ideal (the runs' requests at
the provider's rate, min(per-minute / 60, in-flight / latency) a second), runs completed, failed
and unfinished at `--timeout`, the most runs showing `waiting_capacity` at one poll, and fairness:
when tenant b's last run ended against when half of tenant a's had (`b done before half of a`).
With the kill: requests served per second in 1-second bins after it (from the fake's timestamps of
served requests), and how many seconds until a bin is back at 90% of the provider's rate (target:
10 s). The last line: `with limits: N 429s of M requests (P%), makespan N.NNx the ideal`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import _peers_common as common
from _flow_agents import AGENT, MODEL
from rich.console import Console
from rich.table import Table

from waypoint.app.devstack import prepare_database, spawn_worker
from waypoint.app.embedded import EmbeddedStack
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import RunStatus
from waypoint.store.rows import RunRow
from waypoint.testing import embedded_stack
from waypoint.testing.capacity import Capacity
from waypoint.testing.fake_openai import FakeOpenAI

HERE = Path(__file__).resolve().parent
TENANTS = ("a", "b")
WORKERS = 2
START_CONCURRENCY = 50  # start calls in flight at once
RECOVERED = 0.9  # a bin at this share of the provider's rate is "back at the limit"
RECOVERY_TARGET_S = 10
console = Console(width=None if sys.stdout.isatty() else 140)


@dataclass(frozen=True)
class Config:
    name: str
    limits: bool
    kill: bool


CONFIGS = (
    Config("limits off", limits=False, kill=False),
    Config("limits set", limits=True, kill=False),
    Config("limits set, worker killed", limits=True, kill=True),
)


@dataclass
class Outcome:
    config: Config
    served: int = 0
    refused: int = 0
    peak_in_flight: int = 0
    makespan: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)
    unfinished: int = 0
    waiting_max: int = 0
    b_last: float | None = None  # s from the first start
    half_a: float | None = None
    killed_at: float | None = None
    after_kill: list[int] = field(default_factory=list)  # requests served in each second after the kill
    error: str | None = None  # a failed run's error, for the report

    @property
    def requests(self) -> int:
        return self.served + self.refused

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != RunStatus.COMPLETED)


def limits_toml(args: argparse.Namespace) -> str:
    tenants = "".join(f"[tenants.{t}]\nweight = 1\n" for t in TENANTS)
    return f'[models."{MODEL}"]\nin_flight = {args.in_flight}\nrequests_per_minute = {args.per_minute}\n{tenants}'


def rate(args: argparse.Namespace) -> float:
    """The provider's rate, requests a second: the most any scheduler gets out of it."""
    return Capacity(args.in_flight, args.per_minute, args.latency).per_second


def ideal(args: argparse.Namespace) -> float:
    return (args.runs_a + args.runs_b) * args.steps / rate(args)


def since_kill(seconds: int | None) -> str:
    return "never" if seconds is None else str(seconds)


def recovery(bins: list[int], limit: float) -> int | None:
    """Seconds from the kill to the first 1-second bin at RECOVERED of `limit` (None: never)."""
    return next((k for k, n in enumerate(bins) if n >= RECOVERED * limit), None)


async def spawn_workers(settings: Settings, tmp: Path, label: str) -> list[subprocess.Popen[str]]:
    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    envs = [
        settings.child_environment(PYTHONPATH=pythonpath, WAYPOINT_QDRANT_PATH=str(tmp / f"qdrant-{label}-{i}"))
        for i in range(WORKERS)
    ]
    return list(await asyncio.gather(*(asyncio.to_thread(spawn_worker, env, timeout=120) for env in envs)))


async def stop_workers(workers: list[subprocess.Popen[str]]) -> None:
    for proc in workers:
        if proc.poll() is None:
            proc.terminate()
    for proc in workers:
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()


async def one(
    args: argparse.Namespace, n: int, config: Config, stack: EmbeddedStack, tmp: Path, limits_file: Path
) -> Outcome:
    assert stack.info is not None
    fake = FakeOpenAI(
        common.responder(common.Ledger()), capacity=Capacity(args.in_flight, args.per_minute, args.latency)
    ).start()
    settings = Settings(
        state_dir=tmp / "waypoint",
        temporal_address=stack.info.temporal_address,
        database_url=stack.info.database_url,
        task_queue=f"flow-{n}",
        agents="_flow_agents",
        openai_api_key="fake",
        openai_base_url=fake.base_url,
        memory=False,
        limits_file=limits_file if config.limits else None,
    )
    workers: list[subprocess.Popen[str]] = []
    wp = await Waypoint.connect(settings)
    try:
        with console.status(f"{config.name}: starting {WORKERS} workers..."):
            workers = await spawn_workers(settings, tmp, str(n))
        return await drive(args, config, wp, fake, workers)
    finally:
        await wp.close()
        await stop_workers(workers)
        fake.stop()


async def drive(
    args: argparse.Namespace, config: Config, wp: Waypoint, fake: FakeOpenAI, workers: list[subprocess.Popen[str]]
) -> Outcome:
    out = Outcome(config)
    needed = (args.runs_a + args.runs_b) * args.steps
    gate = asyncio.Semaphore(START_CONCURRENCY)
    runs: dict[str, str] = {}  # run id -> tenant

    async def start(tenant: str) -> None:
        async with gate:
            task = common.task(args.steps - 1, 0, f"flow-{tenant}-{uuid.uuid4().hex[:10]}")
            run_id = await wp.start_run(task, agent=AGENT, tenant_id=tenant, max_steps=args.steps)
        runs[run_id] = tenant

    async def start_all() -> None:  # every run of tenant a, then tenant b's
        await asyncio.gather(*(start("a") for _ in range(args.runs_a)))
        await asyncio.gather(*(start("b") for _ in range(args.runs_b)))

    began_wall, began = time.time(), time.monotonic()
    deadline = began + args.timeout
    starting = asyncio.ensure_future(start_all())
    rows: dict[str, RunRow] = {}
    killed_at: float | None = None
    with console.status("") as status:
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            if config.kill and killed_at is None and fake.served >= needed / 2:
                os.kill(workers[0].pid, signal.SIGKILL)
                killed_at = time.monotonic()
            if not any(proc.poll() is None for proc in workers):
                raise RuntimeError(f"{config.name}: every worker exited")
            for tenant in TENANTS:
                for row in await wp.runs(tenant_id=tenant, limit=args.runs_a + args.runs_b + 20):
                    if row.run_id in runs:
                        rows[row.run_id] = row
            out.waiting_max = max(
                out.waiting_max, sum(1 for r in rows.values() if r.status == RunStatus.WAITING_CAPACITY)
            )
            ended = sum(1 for r in rows.values() if r.finished_at is not None)
            status.update(
                f"{config.name}: {len(runs)} started, {ended} ended; {fake.served} requests served, "
                f"{fake.refused} answered 429; {time.monotonic() - began:.0f} s"
                + (" (a worker killed)" if killed_at else "")
            )
            if starting.done() and ended >= len(runs):
                break
    starting.result()  # raises a failed start

    out.served, out.refused, out.peak_in_flight = fake.served, fake.refused, fake.gate.peak_in_flight
    finished: dict[str, list[float]] = {t: [] for t in TENANTS}
    for run_id, tenant in runs.items():
        row = rows.get(run_id)
        if row is None or row.finished_at is None:
            out.unfinished += 1
            continue
        out.statuses[row.status] = out.statuses.get(row.status, 0) + 1
        if row.status != RunStatus.COMPLETED and out.error is None:
            out.error = row.error or row.status
        finished[tenant].append(row.finished_at.timestamp() - began_wall)
    out.makespan = max((t for times in finished.values() for t in times), default=time.time() - began_wall)
    if len(finished["b"]) == args.runs_b:
        out.b_last = max(finished["b"], default=0.0)
    a_times = sorted(finished["a"])
    if len(a_times) >= math.ceil(args.runs_a / 2):
        out.half_a = a_times[math.ceil(args.runs_a / 2) - 1]
    if killed_at is not None:
        out.killed_at = killed_at - began
        served_at = fake.served_at
        whole = int(max(served_at, default=killed_at) - killed_at)  # the last bin is cut short: left out
        out.after_kill = [0] * whole
        for t in served_at:
            k = math.floor(t - killed_at)  # not int(): a request just before the kill is in bin -1
            if 0 <= k < whole:
                out.after_kill[k] += 1
    return out


async def bench(args: argparse.Namespace, stack: EmbeddedStack, tmp: Path) -> None:
    assert stack.info is not None
    engine = await prepare_database(stack.info.database_url)
    await engine.dispose()
    limits_file = tmp / "limits.toml"
    limits_file.write_text(limits_toml(args))
    # The tenants the limits file names are known ones (an API key each), as a deployment's are.
    async with await Waypoint.connect(Settings(database_url=stack.info.database_url), temporal=False) as wp:
        for tenant in TENANTS:
            await wp.keys.create(tenant, name="flow benchmark")
    outcomes = [await one(args, n, config, stack, tmp, limits_file) for n, config in enumerate(CONFIGS)]
    report(args, outcomes)


def report(args: argparse.Namespace, outcomes: list[Outcome]) -> None:
    needed = (args.runs_a + args.runs_b) * args.steps
    table = Table(
        title=f"{args.runs_a} + {args.runs_b} runs of {args.steps} steps (tenants a, b) on {WORKERS} workers; "
        f"provider: {args.in_flight} in flight, {args.per_minute}/min, {args.latency:g} s a call ({rate(args):g}/s); "
        f"ideal {ideal(args):.0f} s",
        title_justify="left",
    )
    table.add_column("", justify="left")
    for out in outcomes:
        table.add_column(out.config.name, justify="right")

    def row(label: str, cell: Callable[[Outcome], str]) -> None:
        table.add_row(label, *(cell(out) for out in outcomes))

    def at(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    row("model requests (served + 429)", lambda o: f"{o.requests:,}")
    row(f"served (the runs need {needed:,})", lambda o: f"{o.served:,}")
    row("429s", lambda o: f"{o.refused:,}")
    row("429 share", lambda o: f"{o.refused / o.requests:.1%}" if o.requests else "-")
    row("provider's peak calls in flight", lambda o: str(o.peak_in_flight))
    row("makespan s", lambda o: f"{o.makespan:.1f}")
    row("makespan / ideal", lambda o: f"{o.makespan / ideal(args):.2f}x")
    row("runs completed", lambda o: f"{o.statuses.get(RunStatus.COMPLETED, 0):,}")
    row("runs failed", lambda o: f"{o.failed:,}")
    row("runs unfinished at the timeout", lambda o: f"{o.unfinished:,}")
    row("runs waiting_capacity, most at once", lambda o: f"{o.waiting_max:,}")
    row("tenant b's last run ended, s", lambda o: at(o.b_last))
    row("half of tenant a's runs ended, s", lambda o: at(o.half_a))
    row(
        "b done before half of a",
        lambda o: "-" if o.b_last is None or o.half_a is None else ("yes" if o.b_last < o.half_a else "no"),
    )
    row("worker killed at s", lambda o: at(o.killed_at))
    row(
        f"s until back at {RECOVERED:.0%} of the rate",
        lambda o: "-" if o.killed_at is None else since_kill(recovery(o.after_kill, rate(args))),
    )
    console.print(table)
    for out in outcomes:
        if out.error:
            console.print(f"{out.config.name}: a failed run's error: {' '.join(out.error.split())[:200]}")
    for out in outcomes:
        if out.killed_at is None:
            continue
        back = recovery(out.after_kill, rate(args))
        met = back is not None and back <= RECOVERY_TARGET_S
        console.print(
            f"{out.config.name}: requests served in each second after the kill: "
            f"{' '.join(map(str, out.after_kill[:30])) or '-'}; back at {RECOVERED:.0%} of {rate(args):g}/s "
            f"{'never' if back is None else f'after {back} s'} (target {RECOVERY_TARGET_S} s: "
            f"{'met' if met else 'not met'})"
        )
        console.print(
            f"{out.config.name}: {out.failed} runs failed, {out.unfinished} unfinished "
            f"(target: every run completes: {'met' if not out.failed + out.unfinished else 'not met'})"
        )
    limited = next((o for o in outcomes if o.config.limits and not o.config.kill), None)
    if limited is None:
        return
    if limited.refused and not limited.waiting_max:
        console.print(
            "note: with the limits file set, no run showed waiting_capacity and the provider still answered 429s: "
            "this Waypoint reads the file but does not enforce it"
        )
    share = limited.refused / limited.requests if limited.requests else 0.0
    print(
        f"with limits: {limited.refused:,} 429s of {limited.requests:,} requests ({share:.1%}), "
        f"makespan {limited.makespan / ideal(args):.2f}x the ideal"
    )


QUICK = {"runs_a": 36, "runs_b": 4, "steps": 5}
FULL = {"runs_a": 190, "runs_b": 10, "steps": 10}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-a", type=int, default=FULL["runs_a"], help="tenant a's runs, started first")
    parser.add_argument("--runs-b", type=int, default=FULL["runs_b"], help="tenant b's runs, started after a's")
    parser.add_argument("--steps", type=int, default=FULL["steps"], help="steps of each run (one model call each)")
    parser.add_argument("--in-flight", type=int, default=4, help="the provider's calls at once")
    parser.add_argument("--per-minute", type=int, default=600, help="the provider's requests in any 60 s")
    parser.add_argument("--latency", type=float, default=0.5, help="seconds each model call takes")
    parser.add_argument("--timeout", type=float, help="seconds each configuration may take (default: 4x ideal + 120)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="36 + 4 runs of 5 steps: about two minutes on 2 cores")
    size.add_argument("--full", action="store_true", help="the issue's size: 190 + 10 runs of 10 steps")
    args = parser.parse_args()
    for name, value in (QUICK if args.quick else FULL if args.full else {}).items():
        setattr(args, name, value)
    if min(args.runs_a, args.runs_b, args.steps, args.in_flight, args.per_minute) < 1 or args.latency <= 0:
        parser.error("--runs-a, --runs-b, --steps, --in-flight and --per-minute must be at least 1, --latency above 0")
    if args.timeout is None:
        args.timeout = 4 * ideal(args) + 120
    elif args.timeout <= 0:
        parser.error("--timeout must be above 0")
    # Waypoint's defaults, not whatever this shell sets.
    for key in [k for k in os.environ if k.startswith(("WAYPOINT_", "OPENAI_"))]:
        del os.environ[key]
    with tempfile.TemporaryDirectory(prefix="waypoint-flow-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            asyncio.run(bench(args, stack, Path(tmp)))


if __name__ == "__main__":
    main()
