"""Waypoint on your own Temporal Worker: a worker plugin (`temporalio.plugin.SimplePlugin`).

    from temporalio.worker import Worker
    from waypoint import Settings, WaypointPlugin

    settings = Settings()
    worker = Worker(client, task_queue=settings.task_queue, workflows=[MyWorkflow],
                    activities=[my_activity], plugins=[WaypointPlugin(settings, agents=[my_agent])])

The plugin adds Waypoint's workflows and activities (built on its Postgres engine, with the
agents' tools and models), the worker interceptors (tracing, step metrics, log context) and, on a
Client or Replayer, the data converter (encryption with WAYPOINT_CODEC_KEYS) and the client's
tracing. Before the worker polls, it writes its agents and scorers into the catalog (so their runs
can be started); when it stops, it closes the MCP sessions its tools opened. One plugin serves one
worker. `waypoint worker` builds its workers with it (`waypoint.app.worker.build_worker`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import ClientConfig
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from waypoint import telemetry
from waypoint.activities.agents import AgentCallActivities
from waypoint.activities.capacity import Capacity
from waypoint.activities.checkpoints import CheckpointActivities
from waypoint.activities.compaction import CompactionActivities
from waypoint.activities.evals import EvalActivities
from waypoint.activities.model import ModelActivities
from waypoint.activities.starts import StartActivities
from waypoint.activities.tools import ToolActivities
from waypoint.activities.webhooks import WebhookActivities
from waypoint.agents import Agent, AgentRegistry
from waypoint.codec import EncryptionCodec
from waypoint.config import Settings
from waypoint.deltas import DeltaPublisher
from waypoint.errors import ConfigError
from waypoint.gateway.code import WORKFLOWS
from waypoint.mcp import MCPHub
from waypoint.memory import EpisodicStore
from waypoint.models.spec import KEY_VARIABLES, Provider, has_extra
from waypoint.names import WorkflowSandbox, memory_task_queue
from waypoint.store import RunStore
from waypoint.store.streams import DELTAS_CHANNEL
from waypoint.versions import current_version


class WaypointPlugin(SimplePlugin):
    """Waypoint's workflows, activities, converter and interceptors on a Worker you build.

    Args:
        settings: Waypoint's settings (default: `Settings()`, from WAYPOINT_* variables).
        agents: the agents (and scorers) this worker serves: an `AgentRegistry` or agents (default:
            the modules WAYPOINT_AGENTS names, as `waypoint worker` loads them).
        engine: the Postgres engine the activities write through (default: one for the settings).
        memory: runs use episodic memory, served on the memory task queue.
        memory_store: this process owns the memory store: its model calls store and recall themselves.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        agents: AgentRegistry | Iterable[Agent] | None = None,
        engine: AsyncEngine | None = None,
        memory: bool = False,
        memory_store: EpisodicStore | None = None,
    ):
        self.settings = settings or Settings(**{})  # from WAYPOINT_* variables (pydantic-settings)
        self.agents = _registry(agents, self.settings)
        self.engine = engine or _engine(self.settings)
        self.store = RunStore(self.engine)
        self.memory = memory
        self.memory_store = memory_store
        self.mcp = MCPHub(self.store)  # one session per MCP server for this worker, shared by its activities
        self.capacity: Capacity | None = None
        self._registered: set[str] = set()
        super().__init__(
            "waypoint.WaypointPlugin",
            data_converter=self._converter,
            workflows=WORKFLOWS,
            workflow_runner=self._runner,
        )

    def _runner(self, existing: WorkflowRunner | None) -> WorkflowRunner:
        """The worker's workflow sandbox, with Waypoint's own modules passed through unless
        WAYPOINT_WORKFLOW_SANDBOX=full (see `WorkflowSandbox`). A runner of the user's own that is no
        sandbox is kept as it is."""
        base = existing if existing is not None else SandboxedWorkflowRunner()
        if self.settings.workflow_sandbox == WorkflowSandbox.FULL or not isinstance(base, SandboxedWorkflowRunner):
            return base
        return SandboxedWorkflowRunner(
            restrictions=base.restrictions.with_passthrough_modules("waypoint"), runner_class=base.runner_class
        )

    # --- Client and Replayer ----------------------------------------------------------------------

    def _converter(self, existing: DataConverter | None) -> DataConverter:
        """The client's converter, with Waypoint's encryption codec when WAYPOINT_CODEC_KEYS is set."""
        converter = existing or DataConverter.default
        codec = EncryptionCodec.from_settings(self.settings)
        if codec is None or converter.payload_codec is not None:
            return converter
        return dataclasses.replace(converter, payload_codec=codec)

    def configure_client(self, config: ClientConfig) -> ClientConfig:
        config = super().configure_client(config)
        have = list(config.get("interceptors") or [])
        if not any(isinstance(i, TracingInterceptor) for i in have):  # one trace per run from the client on
            config["interceptors"] = [*have, *telemetry.client_interceptors(self.settings)]
        return config

    # --- Worker -----------------------------------------------------------------------------------

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        client = config["client"]
        if EncryptionCodec.from_settings(self.settings) is not None and client.data_converter.payload_codec is None:
            raise ConfigError(
                "WAYPOINT_CODEC_KEYS is set but the worker's client does not encrypt: "
                "connect it with `Client.connect(..., plugins=[plugin])` or Waypoint's own client"
            )
        config["activities"] = [*(config.get("activities") or []), *self.worker_activities(config["task_queue"])]
        # Tracing (one trace per run, unless the client traces already), step metrics and run/step/trace
        # ids in activity logs.
        config["interceptors"] = [
            *(config.get("interceptors") or []),
            *telemetry.worker_interceptors(client, self.settings),
        ]
        return config

    def worker_activities(self, task_queue: str) -> list[Callable[..., Any]]:
        """Every activity of the main task queue, built on this plugin's store, agents and settings."""
        settings, store, agents = self.settings, self.store, self.agents
        checkpoints = CheckpointActivities(
            store,
            agents,
            memory_queue=memory_task_queue(task_queue) if self.memory else None,
            memory_here=self.memory and self.memory_store is not None,
            mcp=self.mcp,
            settings=settings,
        )
        models = ModelActivities(
            store,
            agents,
            settings,
            memory=self.memory_store if self.memory else None,
            mcp=self.mcp,
            deltas=delta_publisher(store, settings),
        )
        models.warm()  # the SDKs' imports now, not inside the first call's heartbeat timeout
        if any(agent.mcp for agent in agents):
            self.mcp.warm()
        self.capacity = models.capacity
        tools = ToolActivities(store, agents, settings, mcp=self.mcp)
        telemetry.instrument_engine(self.engine)  # Postgres spans under the activity spans
        compaction = CompactionActivities(store, settings)
        starts = StartActivities(store)
        evals = EvalActivities(store, agents, settings, models.adapter)
        webhooks = WebhookActivities(store, settings)
        return [
            checkpoints.start_run,
            checkpoints.record_step,
            checkpoints.set_run_status,
            checkpoints.finish_run,
            checkpoints.record_failover,
            models.call_model,
            tools.run_tool,
            tools.recorded_calls,
            AgentCallActivities(store).agent_result,
            compaction.select_runs,
            compaction.compact_run,
            webhooks.deliver_webhook,
            webhooks.open_webhook_delivery,
            webhooks.post_webhook,
            webhooks.close_webhook_delivery,
            starts.hold_run,
            starts.join_thread,
            starts.await_run,
            evals.experiment_plan,
            evals.experiment_case,
            evals.judge_case,
            evals.score_case,
            evals.finish_experiment,
        ]

    async def register(self, task_queue: str) -> None:
        """Write this worker's agents and scorers into the catalog, so their runs can be checked and
        started. The worker does it before it polls; call it first to start runs the moment
        `async with worker` returns."""
        settings, store, agents = self.settings, self.store, self.agents
        found = [
            replace(
                a.info(callable_providers=callable_providers(settings, a), worker=worker_identity()),
                fingerprint=current_version(a, agents).fingerprint,  # what a fresh run starts with (no MCP part)
            )
            for a in agents
        ]
        await store.catalog.register_agents(task_queue, found)
        scorers = [(s.name, s.description) for s in agents.scorers.values()]
        await store.evals.register_scorers(task_queue, scorers, worker_identity())
        self._registered.add(task_queue)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        # `async with worker` runs this too: the sessions close once the worker has shut down.
        try:
            if worker.task_queue not in self._registered:
                await self.register(worker.task_queue)
            await next(worker)
        finally:
            await self.mcp.close()
            if self.capacity is not None:
                await self.capacity.close()


def worker_plugin(
    settings: Settings | None = None,
    *,
    agents: AgentRegistry | Iterable[Agent] | None = None,
    engine: AsyncEngine | None = None,
) -> WaypointPlugin:
    """`WaypointPlugin(settings, agents=agents, engine=engine)`: Waypoint on your own Worker."""
    return WaypointPlugin(settings, agents=agents, engine=engine)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def callable_providers(settings: Settings, agent: Agent) -> list[Provider]:
    """The model providers this worker can call for `agent`: the SDK is installed and a key is set
    (the agent's own `provider_key_env`, else the provider's usual variables)."""
    found = []
    for provider, variables in KEY_VARIABLES.items():
        names = (agent.provider_key_env,) if agent.provider_key_env else variables
        has_key = any(os.environ.get(name) for name in names)
        if provider == Provider.OPENAI and not agent.provider_key_env:
            has_key = settings.openai_api_key is not None
        if has_key and has_extra(provider):
            found.append(provider)
    return found


def delta_publisher(store: RunStore, settings: Settings) -> DeltaPublisher | None:
    """Model token deltas go out as Postgres notifications, for the HTTP API's live streams."""
    if not settings.model_deltas:
        return None

    async def send(payloads: list[str]) -> None:
        await store.streams.notify(DELTAS_CHANNEL, payloads)

    return DeltaPublisher(send, flush_ms=settings.model_delta_flush_ms)


def load_agents(settings: Settings) -> AgentRegistry:
    """The agents of the modules WAYPOINT_AGENTS names (and the built-in demo). The working folder is
    on the import path first, as `python -m` and uvicorn put it, so `myapp.agents` next to you imports."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    _ = settings.limits  # a limits file that does not parse stops the worker here, before anything starts
    return AgentRegistry.from_modules(settings.agent_modules)


def _registry(agents: AgentRegistry | Iterable[Agent] | None, settings: Settings) -> AgentRegistry:
    if isinstance(agents, AgentRegistry):
        return agents
    if agents is None:
        return load_agents(settings)
    return AgentRegistry(list(agents))


def _engine(settings: Settings) -> AsyncEngine:
    """The configured database's engine, else the running embedded stack's (`waypoint dev`): the
    client's own lookup, whose error names the fix."""
    from waypoint.client import database_url
    from waypoint.store.db import engine_for

    return engine_for(settings, database_url(settings))


__all__ = ["WaypointPlugin", "worker_plugin"]
