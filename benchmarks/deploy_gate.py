"""How long the deploy gate (`waypoint check-deploy`) takes over many histories.

    python benchmarks/deploy_gate.py [--runs 1000] [--open 50] [--quick]

Run it as a file: the agent module is imported from this folder, by the worker too.

The embedded stack (in a temporary folder, on free ports) and one worker process
(`_many_runs_worker.py`: what `waypoint worker` runs, memory off) serve `--runs` short runs of a
scripted agent (one tool call, then an answer: 9 workflow tasks' worth of history each), started
through the `Waypoint` client 50 at a time, plus `--open` runs that wait on a one-hour start delay
(open histories). Then `waypoint check-deploy --finished RUNS --json` runs as a user runs it, in
its own process against the installed code, and the table reports what it replayed and how long it
took: the command's own measure (listing, fetching and replaying) and the process's wall time
(Python start-up and imports included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _peers_common as common
from rich.console import Console
from rich.table import Table

from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.testing import embedded_stack

HERE = Path(__file__).resolve().parent
QUEUE = "deploy-gate"
AGENT = "gate-bench"
START_CONCURRENCY = 50
console = Console(width=None if sys.stdout.isatty() else 120)


async def make_runs(wp: Waypoint, runs: int, waiting: int) -> float:
    gate = asyncio.Semaphore(START_CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            run_id = await wp.start_run(f"add {i}", agent=AGENT)
        await wp.result(run_id)

    async def later(i: int) -> None:
        async with gate:
            await wp.start_run(f"later {i}", agent=AGENT, after_seconds=3600)

    began = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(runs)), *(later(i) for i in range(waiting)))
    return time.monotonic() - began


async def bench(args: argparse.Namespace, stack: EmbeddedStack, tmp: Path) -> None:
    assert stack.info is not None
    settings = Settings(
        state_dir=tmp / "waypoint",
        temporal_address=stack.info.temporal_address,
        database_url=stack.info.database_url,
        task_queue=QUEUE,
        agents="_deploy_gate_agents",
        memory=False,
    )
    engine = await prepare_database(stack.info.database_url)
    await engine.dispose()
    env = settings.child_environment(
        PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    )
    worker = await asyncio.to_thread(common.spawn, [sys.executable, str(HERE / "_many_runs_worker.py")], env)
    wp = await Waypoint.connect(settings)
    try:
        with console.status(f"running {args.runs:,} runs and starting {args.open} delayed ones..."):
            making = await make_runs(wp, args.runs, args.open)
    finally:
        await wp.close()
        worker.terminate()
        await asyncio.to_thread(worker.wait, 30)
    with console.status("waypoint check-deploy..."):
        began = time.monotonic()
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "waypoint", "check-deploy", "--finished", str(args.runs), "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"check-deploy failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    check = json.loads(done.stdout)
    table = Table(title=f"waypoint check-deploy over {check['histories']:,} histories (runs made in {making:.0f} s)")
    for column in ("histories", "open", "finished", "check s", "histories/s", "process wall s"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{check['histories']:,}",
        f"{check['open']:,}",
        f"{check['finished']:,}",
        f"{check['seconds']:.1f}",
        f"{check['histories'] / check['seconds']:,.0f}",
        f"{wall:.1f}",
    )
    console.print(table)
    # Start-up (imports, connecting) plus 1,000 histories at the rate measured: the target's number
    # when fewer runs were made.
    projected = (
        wall if check["histories"] >= 1000 else (wall - check["seconds"]) + 1000 / check["histories"] * check["seconds"]
    )
    measured = "measured" if check["histories"] >= 1000 else "projected from this rate"
    console.print(
        f"target (1,000 histories in under 60 s): {projected:.0f} s {measured}: "
        f"{'met' if projected < 60 else 'not met'}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="finished runs to make (and replay)")
    parser.add_argument("--open", type=int, default=50, help="open runs (waiting on a start delay) to replay too")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 100 runs, 10 open")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.open = 100, 10
    if args.runs < 1 or args.open < 0:
        parser.error("--runs must be at least 1 and --open 0 or more")
    # Waypoint's defaults, not whatever this shell sets.
    for key in [k for k in os.environ if k.startswith(("WAYPOINT_", "OPENAI_"))]:
        del os.environ[key]
    with tempfile.TemporaryDirectory(prefix="waypoint-gate-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            asyncio.run(bench(args, stack, Path(tmp)))


if __name__ == "__main__":
    main()
