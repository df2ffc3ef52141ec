"""Crash recovery with real processes: SIGKILL the worker mid-run, start another, count what is lost.

    python benchmarks/recovery.py [--runs 4] [--steps 30] [--kills 5] [--seed 1]

`--runs` runs of the agent in `_recovery_agents.py` go at once, each `--steps`
steps with one external effect per step. At `--kills` random moments the
worker process gets SIGKILL and a new one is spawned right away. Per kill:

- startup: spawn of the new worker until its "worker ready" line;
- retry: the kill until Temporal started an interrupted activity again;
- time to resume: the kill until the first activity completion, after it, of
  any run it interrupted (Temporal history timestamps);
- time lost: time to resume minus startup, the delay beyond the replacement's
  own start. Temporal's crash timers (heartbeat timeout, sticky queue timeout)
  start at the kill and run during that start, so this is less than a worker
  that was already up would wait: it would wait for the timers in full;
- all runs: the kill until every run it interrupted completed an activity;
  the longest such wait of any run is printed below the table.

At the end every run must have checkpoints 0..steps+1 (`lost steps`) and each
effect must be in the effects file once (`duplicate effects`); either one
non-zero makes the exit code 1. Run it as a file: the agent module is
imported from this folder, by the workers too.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _recovery_agents import AGENT, EFFECTS_FILE, task_for
from _recovery_analysis import Kill, Timeline, check, longest_wait, query, recovery, timeline
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from waypoint.app.devstack import prepare_database, spawn_worker
from waypoint.app.embedded import EmbeddedStack, StackInfo, free_port
from waypoint.client import Waypoint
from waypoint.config import Settings

HERE = Path(__file__).resolve().parent
QUEUE = "bench-recovery"
RUN_TIMEOUT_S = 600  # a run that never recovers should fail the benchmark, not hang it
FIRST_KILL_S = (2.0, 5.0)  # after the runs start
KILL_GAP_S = (1.0, 4.0)  # after the runs moved again following the previous kill
console = Console()


class Workers:
    """Every worker process this benchmark starts; `close` stops the ones still alive."""

    def __init__(self, info: StackInfo, tmp: Path):
        self.info, self.tmp = info, tmp
        self.procs: list[subprocess.Popen[str]] = []
        self.killed: set[int] = set()
        self._spawning: asyncio.Future[None] | None = None

    def _start(self, n: int) -> None:
        # A WAYPOINT_* variable from the caller's shell would change what is measured.
        env = {k: v for k, v in os.environ.items() if not k.startswith("WAYPOINT_")}
        env.update(
            WAYPOINT_TEMPORAL_ADDRESS=self.info.temporal_address,
            WAYPOINT_DATABASE_URL=self.info.database_url,
            WAYPOINT_TASK_QUEUE=QUEUE,
            WAYPOINT_AGENTS="_recovery_agents",
            WAYPOINT_WORKSPACE=str(self.tmp / "workspace"),
            WAYPOINT_STATE_DIR=str(self.tmp / "worker-state"),
            # One process owns a Qdrant shard: each worker opens its own, never waiting on a dead one's lock.
            WAYPOINT_QDRANT_PATH=str(self.tmp / f"qdrant-{n}"),
            PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p),
        )
        self.procs.append(spawn_worker(env))  # here, in the thread, so `close` sees it even after a cancel

    async def spawn(self) -> float:
        """Start a worker; returns its startup time in seconds."""
        began = time.monotonic()
        self._spawning = asyncio.ensure_future(asyncio.to_thread(self._start, len(self.procs)))
        await asyncio.shield(self._spawning)
        return time.monotonic() - began

    def kill(self) -> tuple[int, float]:
        """SIGKILL the newest worker: no graceful shutdown, nothing reported to Temporal. Returns pid and time."""
        victim = self.procs[-1]
        victim.kill()
        at = time.time()
        self.killed.add(victim.pid)
        victim.wait()
        return victim.pid, at

    def check_alive(self) -> None:
        # A worker that dies by itself would leave the runs waiting until RUN_TIMEOUT_S.
        for proc in self.procs:
            if proc.poll() is not None and proc.pid not in self.killed:
                raise RuntimeError(f"worker {proc.pid} exited by itself (code {proc.returncode})")

    async def close(self) -> None:
        if self._spawning is not None:
            await asyncio.wait([self._spawning])  # a spawn still in its thread would leave a worker behind
        for proc in self.procs:
            proc.terminate()  # a no-op on the killed ones
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# Every step ends with a checkpoint: a run with none since the kill has not moved again yet.
NOT_MOVED = (
    "SELECT count(*) FROM runs r WHERE r.run_id = ANY(:ids) AND r.finished_at IS NULL AND NOT EXISTS "
    "(SELECT 1 FROM checkpoints c WHERE c.run_id = r.run_id AND c.created_at > to_timestamp(:at))"
)


async def chaos(
    args: argparse.Namespace,
    workers: Workers,
    engine: AsyncEngine,
    run_ids: list[str],
    done: asyncio.Event,
    advance: Callable[[], None],
) -> list[Kill]:
    rng, began, kills = random.Random(args.seed), time.time(), []
    gap = rng.uniform(*FIRST_KILL_S)
    for _ in range(args.kills):
        try:  # sleep `gap`, unless the runs end first
            await asyncio.wait_for(done.wait(), gap)
            break
        except TimeoutError:
            pass
        victim, at = workers.kill()
        startup = await workers.spawn()
        kills.append(Kill(at, at - began, victim, startup))
        advance()
        # The next kill only once every run finished a step again, so each kill is measured alone.
        while not done.is_set() and (await query(engine, NOT_MOVED, ids=run_ids, at=at))[0][0]:
            await asyncio.sleep(0.1)
        gap = rng.uniform(*KILL_GAP_S)
    return kills


def report(kills: list[Kill], lines: list[Timeline], found: dict[str, int], planned: int) -> None:
    table = Table(title="SIGKILL of the worker (seconds)", title_justify="left")
    for col in ("#", "at", "in flight", "startup", "retry", "resume", "lost", "all runs"):
        table.add_column(col, justify="left" if col == "in flight" else "right")
    resumes, losses = [], []
    following = [*(kill.at for kill in kills[1:]), math.inf]
    for number, kill in enumerate(kills, 1):
        what, retry, resume, everyone = recovery(kill, following[number - 1], lines)
        cells = [kill.startup, retry, resume, None if resume is None else resume - kill.startup, everyone]
        if resume is not None:
            resumes.append(resume)
            losses.append(resume - kill.startup)
        table.add_row(str(number), f"{kill.offset:.1f}", what, *("-" if c is None else f"{c:.2f}" for c in cells))
    console.print(table)
    if len(kills) < planned:
        console.print(f"only {len(kills)} of {planned} kills happened before the runs ended")
    for name, values in (("time to resume", resumes), ("time lost", losses)):
        if values:
            console.print(f"{name}: p50 {statistics.median(values):.2f} s, max {max(values):.2f} s")
    console.print(f"longest a run went without completing an activity: {longest_wait(lines):.2f} s")
    console.print(
        f"tool calls re-run after a kill: {found['reruns']} ({found['kept_once']} found their effect already "
        f"written); ledger keys missing from the effects file: {found['missing']}"
    )
    print(f"lost steps: {found['lost']}")  # plain print: scripts grep these two lines
    print(f"duplicate effects: {found['duplicates']}")


async def bench(args: argparse.Namespace, info: StackInfo, tmp: Path) -> int:
    engine = await prepare_database(info.database_url)
    workers = Workers(info, tmp)
    try:
        client = await Client.connect(info.temporal_address)
        settings = Settings(
            state_dir=tmp, temporal_address=info.temporal_address, database_url=info.database_url, task_queue=QUEUE
        )
        wp = Waypoint(client, engine, settings)
        with console.status("starting the first worker..."):
            await workers.spawn()
        with Progress(console=console, transient=True) as progress:
            steps_bar = progress.add_task("steps", total=args.runs * (args.steps + 1))
            kills_bar = progress.add_task("kills", total=args.kills)
            run_ids = [
                await wp.start_run(task_for(args.steps, i), agent=AGENT, model="scripted", max_steps=args.steps + 1)
                for i in range(args.runs)
            ]
            done = asyncio.Event()

            async def all_runs() -> list:
                try:
                    return await asyncio.gather(*(wp.result(r) for r in run_ids))
                finally:
                    done.set()

            async def watch() -> None:
                while not done.is_set():
                    workers.check_alive()
                    steps = await query(engine, "SELECT sum(steps) FROM runs WHERE run_id = ANY(:ids)", ids=run_ids)
                    progress.update(steps_bar, completed=steps[0][0] or 0)
                    await asyncio.sleep(0.5)

            results, kills, _ = await asyncio.wait_for(
                asyncio.gather(
                    all_runs(),
                    chaos(args, workers, engine, run_ids, done, lambda: progress.advance(kills_bar)),
                    watch(),
                ),
                RUN_TIMEOUT_S,
            )
        for result in results:
            if result.status != "completed":
                console.print(f"run {result.run_id} ended {result.status}: {result.error}")
        lines = [timeline(await client.get_workflow_handle(r).fetch_history()) for r in run_ids]
        found = await check(engine, run_ids, args.steps, tmp / "workspace" / EFFECTS_FILE)
        report(kills, lines, found, args.kills)
        return 1 if found["lost"] or found["duplicates"] else 0
    finally:
        await workers.close()
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="runs going at once")
    parser.add_argument("--steps", type=int, default=30, help="tool steps per run (plus one answer step)")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of the worker during the runs")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill moments")
    args = parser.parse_args()
    if min(args.runs, args.steps) < 1 or args.kills < 0:
        parser.error("--runs and --steps must be at least 1, --kills at least 0")
    with tempfile.TemporaryDirectory(prefix="waypoint-recovery-") as tmp:
        stack = EmbeddedStack(Path(tmp) / "stack", temporal_port=free_port(), ui_port=None)
        try:
            with console.status("starting Temporal and Postgres..."):
                info = stack.start()
            code = asyncio.run(bench(args, info, Path(tmp)))
        finally:
            stack.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
