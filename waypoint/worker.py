"""Building and running a Waypoint worker: the workflow plus every activity, with their dependencies."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.worker import Worker

from activities.checkpoints import CheckpointActivities
from activities.model import ModelActivities
from activities.tools import ToolActivities
from waypoint.agents import AgentRegistry
from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.memory import EdgeMemory
from waypoint.store.db import schema_revision
from workflows.agent_run import AgentRunWorkflow

WORKFLOWS = [AgentRunWorkflow]


def build_worker(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry, *, task_queue: str | None = None
) -> Worker:
    checkpoints = CheckpointActivities(engine, agents)
    models = ModelActivities(engine, agents, settings)
    tools = ToolActivities(engine, agents, settings)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=WORKFLOWS,
        activities=[
            checkpoints.start_run,
            checkpoints.record_step,
            checkpoints.set_run_status,
            checkpoints.finish_run,
            models.call_model,
            tools.run_tool,
        ],
        # After a worker dies, its sticky queue holds the next workflow task until this passes (default 10 s).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(seconds=10),
    )


async def check_schema(engine: AsyncEngine) -> None:
    current, head = await schema_revision(engine)
    if current != head:
        raise ConfigError(
            f"database schema is at revision {current or 'none'}, this code needs {head}: run `waypoint migrate`"
        )


@contextlib.asynccontextmanager
async def open_memory(settings: Settings) -> AsyncIterator[EdgeMemory | None]:
    """Open the embedded Qdrant shard for this worker's life (none when a Qdrant server is configured)."""
    if settings.qdrant_url:
        yield None
        return
    memory = EdgeMemory(settings.resolved_qdrant_path)
    try:
        yield memory
    finally:
        memory.close()


async def run_worker(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    stop: asyncio.Event,
    ready: Callable[[], None] | None = None,
) -> None:
    """Run a worker until `stop` is set; in-flight activities get the graceful shutdown timeout.
    `ready` is called once the worker polls."""
    await check_schema(engine)
    agents = AgentRegistry.from_modules(settings.agent_modules)
    async with open_memory(settings):
        async with build_worker(client, engine, settings, agents):
            if ready is not None:
                ready()
            await stop.wait()


def stop_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
