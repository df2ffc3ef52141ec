"""Tracing overhead per step: the step benchmark's Waypoint run with OpenTelemetry on and off, in one process.

    python benchmarks/tracing.py [--steps 50] [--runs 3]

Run it as a file, like step_overhead.py, whose pieces it reuses. "on" traces as
the embedded stack does (client, workflow, activity, chat, tool and Postgres
spans, batched into the JSON-lines span file); "off" is WAYPOINT_TRACING=false.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rich.progress import Progress
from rich.table import Table
from step_overhead import (
    RUN_TIMEOUT,
    WAYPOINT_QUEUE,
    Sample,
    console,
    measure,
    on_stack,
    scripted_agent,
    waypoint_starter,
)
from temporalio.client import Client

from waypoint import telemetry
from waypoint.agents import AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack
from waypoint.app.worker import build_worker
from waypoint.config import Settings
from waypoint.names import Activity

assert RUN_TIMEOUT  # the same run timeout as the step benchmark (used by waypoint_starter)


async def variant(
    name: str, tracing: bool, args: argparse.Namespace, stack: EmbeddedStack, workdir: Path, progress: Progress
) -> tuple[list[Sample], float, int]:
    assert stack.info is not None
    telemetry.reset()
    settings = Settings(
        state_dir=workdir / name, temporal_address=stack.info.temporal_address, task_queue=WAYPOINT_QUEUE
    )
    settings = settings.model_copy(update={"tracing": tracing})
    engine = await prepare_database(stack.info.database_url)
    try:
        client = await Client.connect(stack.info.temporal_address, interceptors=telemetry.client_interceptors(settings))
        worker = build_worker(client, engine, settings, AgentRegistry([scripted_agent(args.steps)]))
        async with worker:
            start = waypoint_starter(client, args.steps)
            warm = progress.add_task(f"{name}: warm-up", total=1)
            await measure(start, Activity.CALL_MODEL, 1, 1, lambda: progress.advance(warm))
            task = progress.add_task(name, total=args.runs)
            samples, wall = await measure(start, Activity.CALL_MODEL, args.runs, 1, lambda: progress.advance(task))
        telemetry.current().force_flush()
        path = telemetry.span_file(settings.state_dir)
        spans = sum(1 for _ in path.open()) if path.exists() else 0
        return samples, wall, spans
    finally:
        await engine.dispose()


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    results: dict[str, tuple[list[Sample], float, int]] = {}
    with Progress(console=console, transient=True) as progress:
        # Alternate twice, so neither variant always runs on the colder or the busier half of the run.
        for round_ in range(2):
            for name, tracing in (("off", False), ("on", True)):
                samples, wall, spans = await variant(f"{name}", tracing, args, stack, workdir / str(round_), progress)
                old = results.get(name, ([], 0.0, 0))
                results[name] = (old[0] + samples, old[1] + wall, old[2] + spans)
    table = Table(title="Tracing overhead per step", title_justify="left")
    for col in ("tracing", "runs", "steps", "median ms/step", "p90 ms/step", "spans/step"):
        table.add_column(col, justify="left" if col == "tracing" else "right")
    medians = {}
    for name, (samples, _wall, spans) in results.items():
        per_step = [ms for s in samples for ms in s.step_ms]
        medians[name] = statistics.median(per_step)
        p90 = statistics.quantiles(per_step, n=10, method="inclusive")[-1]
        steps = sum(s.steps for s in samples)
        # The warm-up runs' spans are in the file too: count spans per recorded step of all runs.
        per_step_spans = spans / (steps * (len(samples) + 2) / len(samples)) if steps else 0
        table.add_row(
            name, str(len(samples)), str(steps), f"{medians[name]:.1f}", f"{p90:.1f}", f"{per_step_spans:.1f}"
        )
    console.print(table)
    ratio = medians["on"] / medians["off"]
    verdict = "[green]within[/green]" if ratio <= 1.10 else "[red]over[/red]"
    console.print(f"on/off median ms per step: [bold]{ratio:.2f}x[/bold] ({verdict} the 1.10x target)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="tool-calling steps per run (plus one answer step)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per variant and round")
    args = parser.parse_args()
    if min(args.steps, args.runs) < 1:
        parser.error("--steps and --runs must be at least 1")
    on_stack(bench, args, cleanup=telemetry.reset)


if __name__ == "__main__":
    main()
