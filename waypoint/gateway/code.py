"""The code installed here, as Temporal knows it: the workflows a worker of this code registers (the
deploy gate replays histories against them) and its build id."""

from __future__ import annotations

import functools
import hashlib
import sys
from pathlib import Path

from waypoint.activities.checkpoints import CheckpointActivities
from waypoint.config import Settings
from waypoint.names import memory_task_queue
from waypoint.workflows.agent_run import AgentRunWorkflow
from waypoint.workflows.compaction import CompactionWorkflow
from waypoint.workflows.experiments import ExperimentWorkflow
from waypoint.workflows.memory import MemoryRequestWorkflow
from waypoint.workflows.webhooks import WebhookDeliveryWorkflow

# Every workflow a worker registers, by task queue: the deploy gate replays histories against these.
# The main task queue: runs (sub-agent and experiment runs among them), compaction, experiments,
# webhook deliveries.
WORKFLOWS: list[type] = [AgentRunWorkflow, CompactionWorkflow, ExperimentWorkflow, WebhookDeliveryWorkflow]
MEMORY_WORKFLOWS: list[type] = [MemoryRequestWorkflow]  # the memory task queue


def deployed_workflows(settings: Settings) -> dict[str, list[type]]:
    """The workflows this code registers, by the task queue its workers serve them on."""
    return {settings.task_queue: WORKFLOWS, memory_task_queue(settings.task_queue): MEMORY_WORKFLOWS}


@functools.cache
def build_id() -> str:
    """The worker's build id: a hash of Waypoint's own source (workflows, activities, the package).
    Without one the SDK hashes the code of every module loaded in the process, about 0.25 s per
    worker at start-up on 2 cores; ours changes when our code does, which is what the id is for."""
    digest = hashlib.sha256()
    for package in (AgentRunWorkflow, CheckpointActivities, Settings):
        root = Path(sys.modules[package.__module__].__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            digest.update(path.read_bytes())
    return f"waypoint-{digest.hexdigest()[:16]}"
