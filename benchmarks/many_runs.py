"""Many Waypoint runs at once on ONE worker process, each waiting on a slow model.

    python benchmarks/many_runs.py [--runs 1000] [--delay 30] [--steps 1] [--timeout 900]
                                   [--max-cached-workflows N] [--max-concurrent-workflow-tasks N]
                                   [--max-concurrent-activities N] [--quick]

Run it as a file: the agent module is imported from this folder, by the worker too.

The embedded stack (in a temporary folder, on free ports) and the fake OpenAI server over HTTP,
answering every model request after `--delay` seconds. One worker process (`_many_runs_worker.py`:
what `waypoint worker` runs, with Waypoint's defaults, memory on) serves `--runs` runs of the
`peers-waypoint` agent started at once through the `Waypoint` client; each run calls the trivial
tool `--steps` times, then answers, so it makes `--steps` + 1 model calls. The three limits go to
Temporal's worker as they are (unset: the SDK's defaults).

Reported: how many runs made at least one step and how many none (starved) by the end, runs
completed and steps recorded (Postgres), when runs got their first model call and their first
step (p50 and max, from each run's start), the most model calls in flight at once, the worker's
peak RSS (psutil, sampled every second) and the wall time. The benchmark ends when every run has
ended or at `--timeout`.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _peers_common as common
import psutil
from _peers_waypoint import AGENT
from rich.console import Console
from rich.table import Table

from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import RunStatus
from waypoint.testing import embedded_stack
from waypoint.testing.fake_openai import FakeOpenAI

HERE = Path(__file__).resolve().parent
QUEUE = "many-runs"
LIMITS = ("max_cached_workflows", "max_concurrent_workflow_tasks", "max_concurrent_activities")
START_CONCURRENCY = 50  # start calls in flight at once
console = Console(width=None if sys.stdout.isatty() else 120)


async def bench(args: argparse.Namespace, stack: EmbeddedStack, fake: FakeOpenAI, ledger: common.Ledger, tmp: Path):
    assert stack.info is not None
    settings = Settings(
        state_dir=tmp / "waypoint",
        temporal_address=stack.info.temporal_address,
        database_url=stack.info.database_url,
        task_queue=QUEUE,
        agents="_peers_waypoint",
        openai_api_key="fake",
        openai_base_url=fake.base_url,
    )
    engine = await prepare_database(stack.info.database_url)
    await engine.dispose()
    limits = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in LIMITS if getattr(args, name)]
    env = settings.child_environment(
        PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    )
    worker = await asyncio.to_thread(common.spawn, [sys.executable, str(HERE / "_many_runs_worker.py"), *limits], env)
    proc = psutil.Process(worker.pid)
    rss = [proc.memory_info().rss]
    wp = await Waypoint.connect(settings)
    try:
        runs: dict[str, tuple[str, float]] = {}  # run id -> (tag, started at)
        gate = asyncio.Semaphore(START_CONCURRENCY)

        async def start() -> None:
            tag = f"many-{uuid.uuid4().hex[:10]}"
            async with gate:
                began = time.monotonic()
                run_id = await wp.start_run(common.task(args.steps, 0, tag), agent=AGENT, max_steps=args.steps + 1)
            runs[run_id] = (tag, began)

        began = time.monotonic()
        deadline = began + args.timeout
        starting = asyncio.ensure_future(asyncio.gather(*(start() for _ in range(args.runs))))
        ended = 0
        with console.status("") as status:
            while time.monotonic() < deadline:
                await asyncio.sleep(1)
                rss.append(proc.memory_info().rss)
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited (code {worker.returncode})")
                rows = await wp.runs(limit=args.runs + 10)
                ended = sum(1 for r in rows if r.finished_at is not None)
                stepped = sum(1 for r in rows if r.steps >= 1)
                status.update(
                    f"{len(runs)}/{args.runs} started, {stepped} made a step, {ended} ended; "
                    f"worker RSS {rss[-1] / 2**20:,.0f} MiB; {time.monotonic() - began:.0f} s"
                )
                if starting.done() and ended >= args.runs:
                    break
            starting.result()  # raises a failed start
        wall = time.monotonic() - began
        rows = {r.run_id: r for r in await wp.runs(limit=args.runs + 10)}
        report(args, runs, rows, ledger, rss, wall, ended >= args.runs)
    finally:
        await wp.close()
        worker.terminate()
        try:
            await asyncio.to_thread(worker.wait, 30)
        except Exception:
            worker.kill()


def in_flight_max(arrivals: list[float], delay: float) -> int:
    """The most model requests being answered at once (each is answered `delay` s after it arrives)."""
    arrivals = sorted(arrivals)
    return max((i + 1 - bisect.bisect_right(arrivals, t - delay) for i, t in enumerate(arrivals)), default=0)


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.1f} / {max(values):.1f}"


def report(
    args: argparse.Namespace,
    runs: dict[str, tuple[str, float]],
    rows: dict[str, object],
    ledger: common.Ledger,
    rss: list[int],
    wall: float,
    all_ended: bool,
) -> None:
    first_call, first_step, arrivals = [], [], []
    for tag, began in runs.values():
        times = ledger.times(tag)
        arrivals += times
        if times:
            first_call.append(times[0] - began)
        if len(times) > 1:  # the second model call comes once step 1 is recorded
            first_step.append(times[1] - began)
    repeated = sum(ledger.repeated(tag) for tag, _ in runs.values())
    recorded = [getattr(rows.get(run_id), "steps", 0) for run_id in runs]
    completed = sum(1 for run_id in runs if getattr(rows.get(run_id), "status", None) == RunStatus.COMPLETED)
    table = Table(title=f"{args.runs:,} runs at once on one worker, model answering after {args.delay:g} s")
    table.add_column("", justify="left")
    table.add_column("", justify="right")
    for key, value in (
        *((name.replace("_", " "), str(getattr(args, name) or "SDK default")) for name in LIMITS),
        ("runs started", f"{len(runs):,}"),
        ("runs with at least one step", f"{sum(1 for s in recorded if s >= 1):,}"),
        ("starved runs (no step)", f"{sum(1 for s in recorded if s < 1):,}"),
        (
            "runs completed",
            f"{completed:,} of {len(runs):,}" + ("" if all_ended else f" (stopped at {args.timeout} s)"),
        ),
        ("steps recorded", f"{sum(recorded):,} of {len(runs) * (args.steps + 1):,}"),
        ("first model call after s, p50 / max", spread(first_call)),
        ("first step after s, p50 / max", spread(first_step)),
        ("model calls in flight, max", f"{in_flight_max(arrivals, args.delay):,}"),
        ("model calls asked again (a retried attempt)", f"{repeated:,}"),
        ("worker RSS MiB, peak / at the end", f"{max(rss) / 2**20:,.0f} / {rss[-1] / 2**20:,.0f}"),
        ("wall s", f"{wall:.0f}"),
    ):
        table.add_row(key, value)
    console.print(table)
    starved = sum(1 for s in recorded if s < 1)
    verdict = "met" if max(rss) < 2**30 and starved == 0 else "not met"
    console.print(f"target (RSS < 1 GiB, none starved): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs started at once")
    parser.add_argument("--delay", type=float, default=30.0, help="seconds the model takes to answer")
    parser.add_argument("--steps", type=int, default=1, help="tool steps per run (plus the answer step)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for every run to end")
    parser.add_argument("--max-cached-workflows", type=int, help="sticky cache size (runs kept in memory)")
    parser.add_argument("--max-concurrent-workflow-tasks", type=int, help="workflow task slots")
    parser.add_argument("--max-concurrent-activities", type=int, help="activity slots")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100 runs, a 3 s model, 180 s at most")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.delay, args.timeout = 100, 3.0, 180.0
    if min(args.runs, args.steps) < 1 or args.delay < 0 or args.timeout <= 0:
        parser.error("--runs and --steps must be at least 1, --delay 0 or more, --timeout above 0")
    for name in LIMITS:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    # Waypoint's defaults, not whatever this shell sets.
    for key in [k for k in os.environ if k.startswith(("WAYPOINT_", "OPENAI_"))]:
        del os.environ[key]
    with tempfile.TemporaryDirectory(prefix="waypoint-many-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            ledger = common.Ledger()
            fake = FakeOpenAI(common.responder(ledger, delay=args.delay))
            try:
                fake.start()
                asyncio.run(bench(args, stack, fake, ledger, Path(tmp)))
            finally:
                fake.stop()


if __name__ == "__main__":
    main()
