"""MemoryRequestWorkflow: how the CLI and the API reach episodic memory.

The store is owned by the memory worker (an embedded shard can be opened by one
process only), so `waypoint memory search|show|forget` starts this workflow on the
memory task queue, and its one activity runs where the store is.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.types import MEMORY_ADMIN, MemoryRequest


@workflow.defn(name="MemoryRequestWorkflow")
class MemoryRequestWorkflow:
    @workflow.run
    async def run(self, req: MemoryRequest) -> str:
        result: str = await workflow.execute_activity(
            MEMORY_ADMIN,
            req,
            result_type=str,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=retry.MEMORY_RETRY,
        )
        return result
