"""MemoryRequestWorkflow: how the CLI and the API reach episodic memory.

The store is owned by the memory worker (an embedded shard can be opened by one
process only), so `waypoint memory search|show|forget` starts this workflow on the
memory task queue, and its one activity runs where the store is.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.names import Activity, Workflow
    from waypoint.types import MemoryRequest


@workflow.defn(name=Workflow.MEMORY_REQUEST)
class MemoryRequestWorkflow:
    @workflow.run
    async def run(self, req: MemoryRequest) -> Any:
        # The answer passes through as it came (a MemoryAnswer; JSON text from workers before it
        # was typed): the client reads it, so a changed shape never touches this workflow's history.
        return await workflow.execute_activity(
            Activity.MEMORY_ADMIN,
            req,
            start_to_close_timeout=retry.MEMORY_TIMEOUT,
            retry_policy=retry.MEMORY_RETRY,
        )
