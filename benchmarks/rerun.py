"""Rerunning recorded runs with recorded tools: wall time, runs per second, and what a rerun step
costs against an ordinary step.

    python benchmarks/rerun.py [--runs 50] [--steps 20] [--concurrency 4]

On one embedded stack and one worker: `--runs` ordinary runs of a scripted agent (`--steps` steps
that each call `echo` once, then an answer), `--concurrency` at a time; then one batch
(`Waypoint.rerun_batch`) reruns all of them with recorded tools and the same script, so every
call matches and is answered from the ledger. A step's time is `run_steps.duration_ms` (checkpoint
to checkpoint); the tool time is the `run_tool` activity as the worker timed it (`tool_effects`
rows of the originals, where the tool ran; reruns record 0 for an answered call).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from _echo_agent import echo_agent
from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from waypoint.agents import AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.testing import embedded_stack

console = Console(width=150)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def step_ms(wp: Waypoint, run_ids: list[str]) -> list[float]:
    """Checkpoint-to-checkpoint time of every step after the first (the first includes the start)."""
    found: list[float] = []
    for run_id in run_ids:
        found += [float(line.duration_ms) for line in (await wp.timeline(run_id))[1:] if line.duration_ms is not None]
    return found


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    assert stack.info is not None
    engine = await prepare_database(stack.info.database_url)
    try:
        client = await Client.connect(stack.info.temporal_address)
        settings = Settings(
            state_dir=workdir,
            temporal_address=stack.info.temporal_address,
            database_url=stack.info.database_url,
            task_queue=f"bench-rerun-{uuid.uuid4().hex[:6]}",
            memory=False,
        )
        async with build_worker(client, engine, settings, AgentRegistry([echo_agent("bench-rerun", args.steps)])):
            wp = Waypoint(client, engine, settings)
            await wp.result(await wp.start_run("warm up", agent="bench-rerun"))
            gate = asyncio.Semaphore(args.concurrency)

            async def original(n: int) -> str:
                async with gate:
                    run_id = await wp.start_run(f"echo benchmark {n}", agent="bench-rerun")
                    if (await wp.result(run_id)).status != "completed":
                        raise RuntimeError(f"run {run_id} did not complete")
                    return run_id

            started = time.monotonic()
            originals = await asyncio.gather(*(original(n) for n in range(args.runs)))
            ordinary_s = time.monotonic() - started

            started = time.monotonic()
            report = await wp.rerun_batch(
                "agent=bench-rerun", limit=args.runs, concurrency=args.concurrency, model="scripted"
            )
            rerun_s = time.monotonic() - started
            reruns = [i.run_id for i in report.items if i.run_id is not None]
            if len(reruns) != args.runs or report.completed_pct != 100.0 or report.diverged_pct != 0.0:
                raise RuntimeError(f"the batch did not rerun every run cleanly: {report.items[:3]}")
            steps_a = await step_ms(wp, list(originals))
            steps_b = await step_ms(wp, reruns)
        table = Table(title=f"{args.runs} runs of {args.steps + 1} steps, {args.concurrency} at a time, one worker")
        for col in ("", "wall s", "runs/s", "step ms p50", "step ms p95", "step ms mean"):
            table.add_column(col, justify="left" if not col else "right")
        for name, wall, steps in (("ordinary runs", ordinary_s, steps_a), ("reruns, recorded tools", rerun_s, steps_b)):
            table.add_row(
                name,
                f"{wall:.1f}",
                f"{args.runs / wall:.2f}",
                f"{pct(steps, 0.5):.0f}",
                f"{pct(steps, 0.95):.0f}",
                f"{statistics.fmean(steps):.1f}",
            )
        console.print(table)
        overhead = statistics.fmean(steps_b) - statistics.fmean(steps_a)
        console.print(
            f"overhead per rerun step: {overhead:+.1f} ms mean against an ordinary step "
            f"(the run's origin, read once per worker and cached, and the source's ledger row per call, "
            f"instead of running the tool); batch {report.batch_id}"
        )
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="recorded runs to rerun")
    parser.add_argument("--steps", type=int, default=20, help="tool-calling steps per run (plus one answer step)")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at a time (originals and reruns)")
    args = parser.parse_args()
    if min(args.steps, args.runs, args.concurrency) < 1:
        parser.error("--runs, --steps and --concurrency must be at least 1")
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            asyncio.run(bench(args, stack, Path(tmp)))


if __name__ == "__main__":
    main()
