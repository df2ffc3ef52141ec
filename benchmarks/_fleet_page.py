"""The viewer's fleet page at scale: server time (p50/p95) of /ui/fleet over 10,000 runs.

    python benchmarks/_fleet_page.py [--runs 10000] [--steps 3] [--calls 30]

Starts an embedded stack in a temporary folder, writes `--runs` runs through the real store (each
`--steps` steps with a tool call, the `record_step` a worker runs; one run in 20 with a failed 429
attempt of another model; a tenth of them another tenant's; most completed, some failed, cancelled
or still running), refreshes the planner's statistics (as autovacuum soon would), starts
`waypoint serve` as a child process, logs in, then GETs /ui/fleet for each
period `--calls` times (after two uncounted warm-ups) and prints a table. Every run lies inside
every period (they are all written now), so each period aggregates all of them. Target: p50 under
300 ms. `fleet_page(stack, workdir, ...)` is the measurement, for benchmarks/viewer.py to call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
from _viewer_common import signed_in, timed_gets
from rich.table import Table
from step_overhead import console, on_stack
from stream import a_step, bench_settings, new_run, pct

from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack, free_port
from waypoint.names import RunStatus
from waypoint.store import RunStore

TARGET_P50_MS = 300.0
PERIODS = ("1h", "24h", "7d")
ENDINGS = [RunStatus.COMPLETED] * 16 + [RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.MAX_STEPS, None]


async def seed(store: RunStore, tenant: str, other: str, runs: int, steps: int) -> None:
    """`runs` runs of `steps` steps each, 8 written at once."""
    gate = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with gate:
            owner = other if i % 10 == 9 else tenant
            run_id = await new_run(store, owner)
            for n in range(1, steps + 1):
                if n == 1 and i % 20 == 0:
                    failure = {"attempt": 1, "model": "openai:gpt-4o-mini", "error": "429", "status": 429}
                    await store.log.record_model_failure(owner, run_id, n, failure, attempt=1)
                await store.steps.record_step(a_step(run_id, owner, n))
            ending = ENDINGS[i % len(ENDINGS)]
            if ending is not None:
                await store.log.finish_run(owner, run_id, ending, "done", None)

    done = 0
    for start in range(0, runs, 500):
        await asyncio.gather(*(one(i) for i in range(start, min(runs, start + 500))))
        done = min(runs, start + 500)
        console.log(f"{done:,} of {runs:,} runs written")


async def fleet_page(
    stack: EmbeddedStack, workdir: Path, *, runs: int = 10_000, steps: int = 3, calls: int = 30
) -> dict[str, tuple[list[float], int]]:
    """Seed the runs, then time GET /ui/fleet?period=P: {page: (milliseconds of each call, bytes)}."""
    assert stack.info is not None
    tenant = "bench"
    settings = bench_settings(stack, workdir, tenant)
    engine = await prepare_database(stack.info.database_url)
    store = RunStore(engine)
    key, _ = await store.keys.create_key(tenant, "bench")
    await seed(store, tenant, "bench-other", runs, steps)
    # as autovacuum soon would: the planner sees every run, not the few it counted
    await store.fleet.analyze_fleet_tables()
    port = free_port()
    env = settings.child_environment(WAYPOINT_API_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "waypoint", "serve"], env=env, stdout=subprocess.PIPE, text=True)
    results: dict[str, tuple[list[float], int]] = {}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            await signed_in(http, key)
            for period in PERIODS:
                times, size = await timed_gets(http, f"/ui/fleet?period={period}", calls)
                results[f"fleet page, last {period} ({runs:,} runs)"] = (times, size)
    finally:
        proc.terminate()
        proc.wait(15)
        await engine.dispose()
    return results


def fleet_table(results: dict[str, tuple[list[float], int]]) -> Table:
    table = Table(title="Fleet page (one `waypoint serve` process)", title_justify="left")
    for col in ("page", "p50 ms", "p95 ms", "bytes", "target p50"):
        table.add_column(col, justify="left" if col == "page" else "right")
    for name, (times, size) in results.items():
        p50 = statistics.median(times)
        met = "met" if p50 <= TARGET_P50_MS else "MISSED"
        table.add_row(name, f"{p50:.1f}", f"{pct(times, 95):.1f}", f"{size:,}", f"<= {TARGET_P50_MS:g} ({met})")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()

    async def run(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
        results = await fleet_page(stack, workdir, runs=args.runs, steps=args.steps, calls=args.calls)
        console.print(fleet_table(results))

    on_stack(run, args)


if __name__ == "__main__":
    main()
