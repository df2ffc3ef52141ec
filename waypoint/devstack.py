"""What `waypoint dev`, `waypoint demo` and `waypoint worker` do, behind the CLI."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from waypoint import console as out
from waypoint.client import Waypoint, connect_temporal, database_url
from waypoint.config import Settings
from waypoint.demo import DEMO_TASK, seed_workspace
from waypoint.embedded import EmbeddedStack, StackInfo, running_stack
from waypoint.errors import WaypointError
from waypoint.store.db import create_engine, engine_for, ensure_database, migrate
from waypoint.worker import run_worker, stop_event


async def prepare_database(url: str) -> AsyncEngine:
    """Create the database if needed and apply migrations; returns an engine on it."""
    try:
        await ensure_database(url)
        engine = create_engine(url)
        await migrate(engine)
    except OSError as exc:
        raise WaypointError(f"cannot reach Postgres ({exc}): check WAYPOINT_DATABASE_URL") from None
    return engine


def start_stack(settings: Settings, *, ui: bool, worker: bool) -> tuple[EmbeddedStack, Settings]:
    stack = EmbeddedStack(
        Path(settings.state_dir),
        temporal_port=settings.temporal_port,
        ui_port=settings.temporal_ui_port if ui else None,
        namespace=settings.temporal_namespace,
        postgres=settings.database_url is None,
    )
    with out.console.status("starting Temporal and Postgres..."):
        info = stack.start(worker=worker)
    return stack, _with_stack(settings, info)


def _with_stack(settings: Settings, info: StackInfo) -> Settings:
    return settings.model_copy(
        update={
            "database_url": settings.database_url or info.database_url,
            "temporal_address": info.temporal_address,
        }
    )


def endpoints_table(settings: Settings, info: StackInfo | None, worker: str) -> Table:
    table = Table(show_header=False, box=None, title="Waypoint dev stack", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("Temporal", f"{settings.temporal_address} (namespace {settings.temporal_namespace})")
    table.add_row("Temporal UI", (info.ui_url if info else None) or "-")
    table.add_row("Postgres", settings.database_url or "-")
    table.add_row("Qdrant", settings.qdrant_url or str(settings.resolved_qdrant_path))
    table.add_row("Task queue", settings.task_queue)
    table.add_row("Worker", worker)
    table.add_row("State folder", str(Path(settings.state_dir).resolve()))
    return table


def serve(settings: Settings, *, worker: bool) -> None:
    stack, cfg = start_stack(settings, ui=True, worker=worker)
    try:
        asyncio.run(_serve(cfg, stack.info, worker))
    finally:
        with out.console.status("stopping..."):
            stack.stop()
        out.console.print("stack stopped")


async def _serve(settings: Settings, info: StackInfo | None, worker: bool) -> None:
    stop = stop_event()
    seed_workspace(settings.resolved_workspace)  # so `waypoint run --agent demo` has notes to read
    engine = await prepare_database(settings.database_url or "")
    try:
        client = await connect_temporal(settings)
        out.console.print(
            endpoints_table(settings, info, "running here" if worker else "none (start `waypoint worker`)")
        )
        from waypoint.compaction_schedule import apply_schedule

        outcome = await apply_schedule(client, settings)
        out.console.print(
            f"compaction schedule {settings.compaction_schedule_id} {outcome} "
            f"(every {settings.compaction_interval_seconds:g} s; `waypoint schedule show`)"
        )
        out.console.print("Ctrl-C stops everything.")
        if worker:
            await run_worker(client, engine, settings, stop)
        else:
            await stop.wait()
    finally:
        await engine.dispose()


async def worker_main(settings: Settings) -> None:
    engine = engine_for(settings, database_url(settings))
    try:
        client = await connect_temporal(settings)

        def ready() -> None:
            # spawn_worker() waits for this line.
            print(f"{READY_LINE}: polling {settings.task_queue} on {settings.temporal_address}", flush=True)

        await run_worker(client, engine, settings, stop_event(), ready)
    finally:
        await engine.dispose()


async def has_pollers(client: Client, task_queue: str) -> bool:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return bool(response.pollers)


def run_demo(settings: Settings, *, model: str | None, chaos: bool = False) -> None:
    started = time.monotonic()
    info = running_stack(Path(settings.state_dir))

    def play(cfg: Settings) -> Coroutine[Any, Any, None]:
        if chaos:
            from waypoint.chaos import chaos_demo

            return chaos_demo(cfg, started, shared_stack=info is not None)
        return _demo(cfg, model, started)

    if info is not None:
        out.console.print(f"reusing the embedded stack of process {info.pid}")
        asyncio.run(play(_with_stack(settings, info)))
        return
    # The chaos demo runs no worker in this process: its workers are processes it can kill.
    stack, cfg = start_stack(settings, ui=False, worker=not chaos)
    try:
        asyncio.run(play(cfg))
    finally:
        stack.stop()


async def _demo(settings: Settings, model: str | None, started: float) -> None:
    seed_workspace(settings.resolved_workspace)
    engine = await prepare_database(settings.database_url or "")
    stop = asyncio.Event()
    worker_task: asyncio.Task[None] | None = None
    try:
        client = await connect_temporal(settings)
        if not await has_pollers(client, settings.task_queue):
            worker_task = asyncio.create_task(run_worker(client, engine, settings, stop))
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run(DEMO_TASK, agent="demo", model=model)
        out.console.print(f"started [bold]{run_id}[/bold]: {DEMO_TASK}")
        row = await _follow_or_fail(wp, run_id, settings.tenant, worker_task)
        lines = await wp.timeline(run_id)
        out.console.print(out.timeline_table(lines))
        out.console.print(out.run_table(row))
        report = settings.resolved_workspace / "report.md"
        if row["status"] == "completed" and report.exists():
            out.console.print(f"report written to {report}")
        out.console.print(f"[dim]demo took {time.monotonic() - started:.1f} s[/dim]")
        if row["status"] != "completed":
            raise WaypointError(f"the demo run ended with status {row['status']}: {row['error'] or 'see above'}")
    finally:
        stop.set()
        if worker_task is not None:
            await worker_task
        await engine.dispose()


async def _follow_or_fail(wp: Waypoint, run_id: str, tenant: str, worker_task: asyncio.Task[None] | None) -> dict:
    follow = asyncio.create_task(out.follow(wp, run_id, tenant))
    waiters = {follow} | ({worker_task} if worker_task else set())
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    if not follow.done():  # the worker stopped first: surface its error
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
        assert worker_task is not None
        worker_task.result()
        raise WaypointError("the worker stopped before the run ended")
    return follow.result()


READY_LINE = "worker ready"


def spawn_worker(env: dict[str, str], *, timeout: float = 60.0) -> subprocess.Popen[str]:
    """Start a worker process (`waypoint worker`) with `env`, and return once it polls."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "waypoint.cli", "worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:  # the process ended
            break
        lines.append(line)
        if line.startswith(READY_LINE):
            # Keep draining its output, so a chatty worker never blocks on a full pipe.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
    proc.kill()
    raise WaypointError(f"the worker did not start: {''.join(lines[-5:]).strip() or 'no output'}")
