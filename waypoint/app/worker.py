"""Building and running a Waypoint worker: the workflow plus every activity, with their dependencies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import Worker, WorkerDeploymentConfig

from waypoint import retry, telemetry
from waypoint.activities.memory import MemoryActivities
from waypoint.activities.model import ModelActivities
from waypoint.activities.tools import ToolActivities
from waypoint.agents import AgentRegistry
from waypoint.app.plugin import WaypointPlugin, delta_publisher, load_agents
from waypoint.checks import check_deployment_version
from waypoint.client import FleetLimits
from waypoint.config import Settings
from waypoint.errors import ConfigError, InvalidInput, StackError
from waypoint.gateway.code import MEMORY_WORKFLOWS, build_id
from waypoint.memory import EpisodicStore, open_store
from waypoint.names import VersioningMode, memory_task_queue
from waypoint.store import RunStore
from waypoint.store.db import schema_revision

log = logging.getLogger(__name__)


def versioning(settings: Settings) -> dict[str, Any]:
    """The Worker options that version a worker: with `worker_deployment` set, it polls as the version
    (deployment, build id) of that Worker Deployment, and Waypoint's workflows get the default
    versioning behavior `worker_versioning`; else the plain build id (an unversioned worker)."""
    if settings.worker_deployment is None:
        if settings.worker_build_id is not None:
            raise InvalidInput(
                "a build id versions a worker of a deployment: set --deployment (WAYPOINT_WORKER_DEPLOYMENT)"
            )
        return {"build_id": build_id()}
    name, build = check_deployment_version(settings.worker_deployment, settings.worker_build_id or build_id())
    behavior = {
        VersioningMode.AUTO_UPGRADE: VersioningBehavior.AUTO_UPGRADE,
        VersioningMode.PINNED: VersioningBehavior.PINNED,
    }[settings.worker_versioning]
    return {
        "deployment_config": WorkerDeploymentConfig(
            version=WorkerDeploymentVersion(name, build),
            use_worker_versioning=True,
            default_versioning_behavior=behavior,
        )
    }


class CatalogWorker(Worker):
    """A worker whose agents are in the catalog once `async with` returns (its plugin writes them
    before it polls in any case), so a run of an agent it serves can be started at once."""

    def __init__(self, *args: Any, plugin: WaypointPlugin, **kwargs: Any):
        super().__init__(*args, plugins=[plugin], **kwargs)
        self.plugin = plugin

    async def __aenter__(self) -> Worker:
        await self.plugin.register(self.task_queue)
        return await super().__aenter__()


def build_worker(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    agents: AgentRegistry,
    *,
    task_queue: str | None = None,
    memory: bool = False,
    memory_store: EpisodicStore | None = None,
    max_cached_workflows: int | None = None,
    max_concurrent_workflow_tasks: int | None = None,
    max_concurrent_activities: int | None = None,
) -> Worker:
    """The main worker. `memory`: runs use episodic memory, served on the memory task queue by
    `build_memory_worker` (in this process or another). `memory_store`: this process owns the store
    (`run_worker` opened it for its memory worker): this worker's model calls store and recall
    themselves, so the runs it starts schedule them on their own task queue, where Temporal starts
    them eagerly, without a round trip through the server.

    The three limits go to Temporal's `Worker` as they are (None: the SDK's default): runs kept in the
    sticky cache, workflow tasks and activities in flight at once. They bound what one worker process
    holds in memory and how many runs it moves at a time (`benchmarks/many_runs.py` measures them)."""
    queue = task_queue or settings.task_queue
    limits: dict[str, int] = {
        name: value
        for name, value in (
            ("max_cached_workflows", max_cached_workflows),
            ("max_concurrent_workflow_tasks", max_concurrent_workflow_tasks),
            ("max_concurrent_activities", max_concurrent_activities),
        )
        if value is not None
    }
    plugin = WaypointPlugin(settings, agents=agents, engine=engine, memory=memory, memory_store=memory_store)
    return CatalogWorker(
        client,
        plugin=plugin,  # the workflows, activities and interceptors
        task_queue=queue,
        # After a worker dies, its sticky queue holds the next workflow task until this passes (default 10 s).
        sticky_queue_schedule_to_start_timeout=retry.STICKY_QUEUE_TIMEOUT,
        graceful_shutdown_timeout=timedelta(seconds=settings.worker_stop_grace_seconds),
        **versioning(settings),
        **limits,
    )


def build_memory_worker(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    agents: AgentRegistry,
    store: EpisodicStore,
    *,
    task_queue: str | None = None,
) -> Worker:
    """The worker of the memory task queue: the one process that owns the store serves every
    memory read and write (the model calls of runs with memory, which store and recall in the same
    activity, memory tools, `waypoint memory ...`)."""
    runs = RunStore(engine)
    memory = MemoryActivities(runs, store)
    tools = ToolActivities(runs, agents, settings, memory=store)
    models = ModelActivities(runs, agents, settings, memory=store, deltas=delta_publisher(runs, settings))
    models.warm()
    return Worker(
        client,
        task_queue=memory_task_queue(task_queue or settings.task_queue),
        workflows=MEMORY_WORKFLOWS,
        # The model calls of runs with memory run here: as many slots as the main worker's.
        max_concurrent_activities=settings.worker_max_concurrent_activities,
        activities=[
            models.call_model,
            memory.memory_step,
            memory.remember_missing,
            memory.save_episodes,
            memory.memory_admin,
            tools.run_tool,
        ],
        interceptors=telemetry.worker_interceptors(client, settings),
        sticky_queue_schedule_to_start_timeout=retry.STICKY_QUEUE_TIMEOUT,
        graceful_shutdown_timeout=timedelta(seconds=settings.worker_stop_grace_seconds),
        **versioning(settings),
    )


async def check_schema(engine: AsyncEngine) -> None:
    current, head = await schema_revision(engine)
    if current != head:
        raise ConfigError(
            f"database schema is at revision {current or 'none'}, this code needs {head}: run `waypoint migrate`"
        )


@contextlib.asynccontextmanager
async def open_memory(settings: Settings) -> AsyncIterator[EpisodicStore]:
    """Open episodic memory for this worker's life: the embedded Qdrant shard (owned by this process),
    or a Qdrant server's collection when `qdrant_url` is set."""
    memory = open_store(settings)
    try:
        yield memory
    finally:
        await memory.close()


async def run_worker(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    stop: asyncio.Event,
    ready: Callable[[], None] | None = None,
    agents: AgentRegistry | None = None,
    *,
    max_cached_workflows: int | None = None,
    max_concurrent_workflow_tasks: int | None = None,
    max_concurrent_activities: int | None = None,
) -> None:
    """Run a worker until `stop` is set; in-flight activities get the graceful shutdown timeout.
    `ready` is called once the worker polls. The limits go to the main worker (`build_worker`); unset,
    the settings' `worker_max_*` apply."""
    await check_schema(engine)
    agents = agents or load_agents(settings)
    await FleetLimits(RunStore(engine), settings).check()  # as `waypoint limits --check` does
    deadline = StopDeadline(settings)
    async with contextlib.AsyncExitStack() as stack:
        store: EpisodicStore | None = None
        if settings.memory:
            try:
                store = await stack.enter_async_context(open_memory(settings))
            except StackError as exc:
                # Another worker owns the embedded shard and serves memory for every run.
                log.warning("this worker serves no memory: %s", exc)
            else:
                memory_worker = build_memory_worker(client, engine, settings, agents, store)
                await stack.enter_async_context(running(memory_worker, deadline))
        main = build_worker(
            client,
            engine,
            settings,
            agents,
            memory=settings.memory,
            memory_store=store,
            max_cached_workflows=_or(max_cached_workflows, settings.worker_max_cached_workflows),
            max_concurrent_workflow_tasks=_or(
                max_concurrent_workflow_tasks, settings.worker_max_concurrent_workflow_tasks
            ),
            max_concurrent_activities=_or(max_concurrent_activities, settings.worker_max_concurrent_activities),
        )
        async with running(main, deadline):
            if ready is not None:
                ready()
            await stop.wait()


# What a stop waits past the graceful shutdown timeout for the cancelled activities to finish.
STOP_MARGIN_SECONDS = 5.0


class StopDeadline:
    """One bound for a stop, however many workers it stops in turn: the graceful shutdown timeout
    plus STOP_MARGIN_SECONDS, from the moment the first one starts stopping."""

    def __init__(self, settings: Settings):
        self.seconds = settings.worker_stop_grace_seconds + STOP_MARGIN_SECONDS
        self._at: float | None = None

    def remaining(self) -> float:
        now = time.monotonic()
        if self._at is None:
            self._at = now + self.seconds
        return max(self._at - now, 1.0)  # a worker stopped after another gets a moment too


@contextlib.asynccontextmanager
async def running(worker: Worker, deadline: StopDeadline) -> AsyncIterator[Worker]:
    """`async with worker`, with a stop that ends: activities in flight get the graceful shutdown
    timeout (`worker_stop_grace_seconds`), then are cancelled; a worker still not stopped at the
    deadline (a local activity retrying in its workflow task, an activity that ignores its
    cancellation) is left behind, and the process goes on stopping. Temporal hands whatever it
    was doing to the next worker (timeouts and retries), so nothing is lost."""
    await worker.__aenter__()
    failure: tuple[Any, Any, Any] = (None, None, None)
    try:
        yield worker
    except BaseException:
        failure = sys.exc_info()
        raise
    finally:
        stopping = asyncio.ensure_future(worker.__aexit__(*failure))
        done, _ = await asyncio.wait({stopping}, timeout=deadline.remaining())
        if done:
            stopping.result()  # a fatal worker error, as `async with` raises it
        else:
            log.warning(
                "worker of task queue %s did not stop within %g s (its runs' work is stuck or retrying): "
                "stopping without it; Temporal gives that work to the next worker",
                worker.task_queue,
                deadline.seconds,
            )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def stop_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
