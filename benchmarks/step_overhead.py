"""Per-step cost of a Waypoint agent run against a bare Temporal workflow, on one embedded dev server.

    python benchmarks/step_overhead.py [--steps 50] [--runs 3] [--concurrency 1]

Run it as a file, not with -m: the baseline workflow is imported as `_baseline`
from this folder, and the worker's sandbox re-imports it under that name.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import _baseline as baseline
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.worker import Worker

from waypoint.agents import Agent, AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack
from waypoint.app.worker import build_worker
from waypoint.config import Settings
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.names import Activity, RunStatus
from waypoint.testing import embedded_stack
from waypoint.tools import tool
from waypoint.types import Budget, RunInput
from waypoint.workflows.agent_run import AgentRunWorkflow

AGENT = "bench-echo"
WAYPOINT_QUEUE = "bench-waypoint"
BASELINE_QUEUE = "bench-baseline"
# A broken worker would otherwise leave handle.result() waiting forever.
RUN_TIMEOUT = timedelta(minutes=5)
console = Console()


@tool(name="echo")
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def scripted_agent(tool_steps: int) -> Agent:
    turns = [ScriptedTurn(tool_calls=[("echo", {"text": f"step {i}"})]) for i in range(1, tool_steps + 1)]
    return Agent(
        name=AGENT,
        instructions="Call echo until the script says you are done.",
        model=ScriptedModel([*turns, ScriptedTurn(content="done")]),
        tools=(echo,),
        max_steps=tool_steps + 1,
    )


@dataclass(frozen=True)
class Sample:
    steps: int
    step_ms: list[float]
    history_events: int
    history_bytes: int


def step_durations(history: WorkflowHistory, model_activity: str) -> list[float]:
    """Server-side duration of each step, cut at each model call after the first.

    The first step starts with the workflow and the last ends with it, so run
    bookkeeping (Waypoint's start_run and finish_run) is charged to the steps.
    """
    started = ended = 0.0
    model_calls: list[float] = []
    for event in history.events:
        at = event.event_time.ToNanoseconds() / 1e6
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            started = at
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            ended = at
        elif (
            event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == model_activity
        ):
            model_calls.append(at)
    return [b - a for a, b in pairwise([started, *model_calls[1:], ended])]


Starter = Callable[[], Awaitable[tuple[WorkflowHandle, int]]]


async def measure(
    start: Starter, model_activity: str, runs: int, concurrency: int, advance: Callable[[], None]
) -> tuple[list[Sample], float]:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> Sample:
        async with gate:
            handle, steps = await start()
        history = await handle.fetch_history()
        advance()
        return Sample(steps, step_durations(history, model_activity), len(history.events), len(history.to_json()))

    began = time.perf_counter()
    samples = await asyncio.gather(*(one() for _ in range(runs)))
    return list(samples), time.perf_counter() - began


def waypoint_starter(client: Client, tool_steps: int) -> Starter:
    async def start() -> tuple[WorkflowHandle, int]:
        handle = await client.start_workflow(
            AgentRunWorkflow.run,
            RunInput(agent=AGENT, task="echo benchmark", budget=Budget(max_steps=tool_steps + 1)),
            id=f"bench-wp-{uuid.uuid4().hex[:12]}",
            task_queue=WAYPOINT_QUEUE,
            execution_timeout=RUN_TIMEOUT,
        )
        result = await handle.result()
        if result.status != RunStatus.COMPLETED:
            raise RuntimeError(f"Waypoint run {result.run_id} ended {result.status}: {result.error}")
        return handle, result.steps

    return start


def baseline_starter(client: Client, tool_steps: int) -> Starter:
    async def start() -> tuple[WorkflowHandle, int]:
        handle = await client.start_workflow(
            baseline.BaselineWorkflow.run,
            baseline.BaselineInput(tool_steps=tool_steps),
            id=f"bench-base-{uuid.uuid4().hex[:12]}",
            task_queue=BASELINE_QUEUE,
            execution_timeout=RUN_TIMEOUT,
        )
        return handle, await handle.result()

    return start


async def mirror_bytes(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return await conn.scalar(
            text("SELECT pg_total_relation_size('events') + pg_total_relation_size('checkpoints')")
        )


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    assert stack.info is not None
    engine = await prepare_database(stack.info.database_url)
    try:
        client = await Client.connect(stack.info.temporal_address)
        settings = Settings(state_dir=workdir, temporal_address=stack.info.temporal_address, task_queue=WAYPOINT_QUEUE)
        waypoint_worker = build_worker(client, engine, settings, AgentRegistry([scripted_agent(args.steps)]))
        baseline_worker = Worker(
            client,
            task_queue=BASELINE_QUEUE,
            workflows=[baseline.BaselineWorkflow],
            activities=[baseline.fake_model, baseline.echo],
        )
        async with waypoint_worker, baseline_worker:
            variants = {
                "waypoint": (waypoint_starter(client, args.steps), Activity.CALL_MODEL),
                "baseline": (baseline_starter(client, args.steps), baseline.MODEL_ACTIVITY),
            }
            with Progress(console=console, transient=True) as progress:
                # One uncounted run each first, so sandbox imports and connection pools are not charged to run 1.
                warm = progress.add_task("warm-up", total=len(variants))
                for start, activity_name in variants.values():
                    await measure(start, activity_name, 1, 1, lambda: progress.advance(warm))
                results: dict[str, tuple[list[Sample], float]] = {}
                pg_before, pg_delta = await mirror_bytes(engine), 0
                for name, (start, activity_name) in variants.items():
                    task = progress.add_task(name, total=args.runs)
                    results[name] = await measure(
                        start, activity_name, args.runs, args.concurrency, lambda t=task: progress.advance(t)
                    )
                    if name == "waypoint":
                        pg_delta = await mirror_bytes(engine) - pg_before
        report(results, pg_delta)
    finally:
        await engine.dispose()


def report(results: dict[str, tuple[list[Sample], float]], pg_delta: int) -> None:
    timing = Table(title="Per-step cost", title_justify="left")
    storage = Table(title="Storage", title_justify="left")
    for col in ("variant", "runs", "steps/run", "median ms/step", "p90 ms/step", "total wall s"):
        timing.add_column(col, justify="left" if col == "variant" else "right")
    for col in ("variant", "history events/run", "history bytes/run", "Postgres bytes/step"):
        storage.add_column(col, justify="left" if col == "variant" else "right")
    medians: dict[str, float] = {}
    for name, (samples, wall) in results.items():
        per_step = [ms for s in samples for ms in s.step_ms]
        medians[name] = statistics.median(per_step)
        p90 = statistics.quantiles(per_step, n=10, method="inclusive")[-1] if len(per_step) > 1 else per_step[0]
        steps = sum(s.steps for s in samples)
        timing.add_row(
            name, str(len(samples)), f"{steps / len(samples):g}", f"{medians[name]:.1f}", f"{p90:.1f}", f"{wall:.2f}"
        )
        pg = f"{pg_delta / steps:,.0f}" if name == "waypoint" else "-"
        storage.add_row(
            name,
            f"{statistics.mean(s.history_events for s in samples):,.0f}",
            f"{statistics.mean(s.history_bytes for s in samples):,.0f}",
            pg,
        )
    console.print(timing)
    console.print(storage)
    console.print(
        f"waypoint/baseline median ms per step: [bold]{medians['waypoint'] / medians['baseline']:.2f}x[/bold]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="tool-calling steps per run (plus one answer step)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per variant")
    parser.add_argument("--concurrency", type=int, default=1, help="runs in flight at once")
    args = parser.parse_args()
    if min(args.steps, args.runs, args.concurrency) < 1:
        parser.error("--steps, --runs and --concurrency must be at least 1")
    on_stack(bench, args)


def on_stack(
    run: Callable[[argparse.Namespace, EmbeddedStack, Path], Coroutine[Any, Any, None]],
    args: argparse.Namespace,
    cleanup: Callable[[], None] | None = None,
) -> None:
    """Run a benchmark on a fresh embedded stack in a temporary folder, and stop it after."""
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            try:
                asyncio.run(run(args, stack, Path(tmp)))
            finally:
                if cleanup is not None:
                    cleanup()


if __name__ == "__main__":
    main()
