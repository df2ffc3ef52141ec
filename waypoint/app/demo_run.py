"""`waypoint demo`: the demo agent's run to completion on the embedded stack (started for it, or
reused when a `waypoint dev` runs), or with `--chaos`, the same run meeting production's failures."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from waypoint.app import console as out
from waypoint.app.devstack import prepare_database, start_stack, with_stack
from waypoint.app.follow import follow
from waypoint.app.worker import run_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import DEMO_TASK, seed_workspace
from waypoint.demo_research import REPORT_PATH, RESEARCH_TASK
from waypoint.errors import WaypointError
from waypoint.gateway.stack import running_stack
from waypoint.gateway.temporal import TemporalGateway, connect
from waypoint.names import DemoAgent, RunStatus, ToolOutcome
from waypoint.store.rows import RunRow

DEMO_RUNS = {DemoAgent.DEMO: (DEMO_TASK, "report.md"), DemoAgent.RESEARCH: (RESEARCH_TASK, REPORT_PATH)}


def run_demo(settings: Settings, *, model: str | None, chaos: bool = False, agent: DemoAgent = DemoAgent.DEMO) -> None:
    started = time.monotonic()
    info = running_stack(Path(settings.state_dir))

    def play(cfg: Settings) -> Coroutine[Any, Any, None]:
        if chaos:
            from waypoint.app.chaos import chaos_demo  # its process tools cost a plain demo nothing

            return chaos_demo(cfg, started, shared_stack=info is not None)
        return _demo(cfg, model, started, agent)

    if info is not None:
        out.console.print(f"reusing the embedded stack of process {info.pid}")
        asyncio.run(play(with_stack(settings, info)))
        return
    # The chaos demo runs no worker in this process: its workers are processes it can kill.
    stack, cfg = start_stack(settings, ui=False, worker=not chaos)
    try:
        asyncio.run(play(cfg))
    finally:
        stack.stop()


async def _demo(settings: Settings, model: str | None, started: float, agent: DemoAgent) -> None:
    task, report_path = DEMO_RUNS[agent]
    seed_workspace(settings.resolved_workspace)
    engine = await prepare_database(settings.database_url or "")
    stop = asyncio.Event()
    worker_task: asyncio.Task[None] | None = None
    try:
        client = await connect(settings)
        if not await TemporalGateway(client, settings).pollers(settings.task_queue):
            ready = asyncio.Event()
            worker_task = asyncio.create_task(run_worker(client, engine, settings, stop, ready.set))
            # The worker registers its agents before it polls: the run is checked against them.
            waiting = asyncio.create_task(ready.wait())
            await asyncio.wait({waiting, worker_task}, return_when=asyncio.FIRST_COMPLETED)
            if worker_task.done():
                waiting.cancel()
                worker_task.result()  # raises why it stopped
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run(task, agent=agent.value, model=model)
        out.console.print(f"started [bold]{run_id}[/bold]: {task}")
        row = await _follow_or_fail(wp, run_id, worker_task)
        lines = await wp.timeline(run_id)
        out.console.print(out.timeline_table(lines))
        out.console.print(out.run_table(row))
        family = await wp.tree(run_id)
        if len(family.nodes) > 1:
            out.console.print(out.tree_table(family))
            out.console.print(f"the tree again: waypoint tree {run_id}")
        report = settings.resolved_workspace / report_path
        if row.status == RunStatus.COMPLETED and await wrote_report(wp, run_id, report_path):
            out.console.print(f"report written to {report}")
        out.console.print(f"[dim]demo took {time.monotonic() - started:.1f} s[/dim]")
        if row.status != RunStatus.COMPLETED:
            raise WaypointError(f"the demo run ended with status {row.status}: {row.error or 'see above'}")
    finally:
        stop.set()
        if worker_task is not None:
            await worker_task
        await engine.dispose()


async def wrote_report(wp: Waypoint, run_id: str, path: str = "report.md") -> bool:
    """This run, or a sub-agent run below it, wrote `path` (its write_file call succeeded), not an
    earlier run."""
    for node in (await wp.tree(run_id)).nodes:
        effects = await wp.effects(node.run.run_id)
        if any(e.tool == "write_file" and e.outcome == ToolOutcome.OK and path in e.arguments for e in effects):
            return True
    return False


async def _follow_or_fail(wp: Waypoint, run_id: str, worker_task: asyncio.Task[None] | None) -> RunRow:
    following = asyncio.create_task(follow(wp, run_id))
    waiters: set[asyncio.Task[Any]] = {following} | ({worker_task} if worker_task else set())
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    if not following.done():  # the worker stopped first: surface its error
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
        assert worker_task is not None
        worker_task.result()
        raise WaypointError("the worker stopped before the run ended")
    return following.result()
