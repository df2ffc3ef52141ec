"""CompactionWorkflow: one compaction pass, started by the Schedule or by `waypoint compact`.

It selects the runs whose uncompacted history passed the threshold (or the one
run asked for), compacts them in `compact_run` activities, at most
`concurrency` at a time, and reports each outcome: one failing run is reported
and the others go on. Each new compaction's summary is then written to
episodic memory through `save_episodes` on the memory worker's queue; a
missing memory worker is reported, not fatal (the compactions are already
written).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.compaction_types import (
        CompactionInput,
        CompactionReport,
        CompactionSummary,
        CompactRunInput,
        RememberInput,
        RunRef,
        SelectRunsInput,
        summary_episode,
    )
    from waypoint.errors import failure_message
    from waypoint.names import Activity, Workflow, memory_task_queue


@workflow.defn(name=Workflow.COMPACTION)
class CompactionWorkflow:
    @workflow.run
    async def run(self, inp: CompactionInput) -> CompactionReport:
        refs: list[RunRef] = await workflow.execute_activity(
            Activity.SELECT_RUNS,
            SelectRunsInput(
                threshold_tokens=inp.threshold_tokens, limit=inp.max_runs, tenant_id=inp.tenant_id, run_id=inp.run_id
            ),
            result_type=list[RunRef],
            start_to_close_timeout=retry.SELECT_RUNS_TIMEOUT,
            retry_policy=retry.PASS_RETRY,
        )
        queue = list(refs)
        done: dict[str, CompactionSummary] = {}

        async def lane() -> None:
            while queue:
                ref = queue.pop(0)
                done[ref.run_id] = await self._compact(ref, inp)

        await asyncio.gather(*(lane() for _ in range(min(inp.concurrency, len(queue)))))
        results = [done[r.run_id] for r in refs]
        created = [r for r in results if r.created and r.summary]
        saved, memory_error = await self._remember(created, inp.memory_timeout_seconds)
        caught_up = 0
        if memory_error is None and workflow.patched("remember-missing-1"):
            caught_up, memory_error = await self._remember_missing(inp)
        return CompactionReport(
            selected=len(refs),
            results=results,
            episodes_saved=saved,
            memory_error=memory_error,
            steps_remembered=caught_up,
        )

    async def _remember_missing(self, inp: CompactionInput) -> tuple[int, str | None]:
        """Steps of finished runs whose episodes memory missed (its worker was away): stored now."""
        task_queue = memory_task_queue(workflow.info().task_queue)
        try:
            steps: int = await workflow.execute_activity(
                Activity.REMEMBER_MISSING,
                RememberInput(tenant_id=inp.tenant_id, limit=inp.max_runs),
                result_type=int,
                task_queue=task_queue,
                schedule_to_start_timeout=timedelta(seconds=inp.memory_timeout_seconds),
                start_to_close_timeout=retry.COMPACT_TIMEOUT,
                heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                retry_policy=retry.PASS_RETRY,
            )
        except ActivityError as exc:
            reason = (
                f"missed episodes not stored (memory worker on {task_queue}): {failure_message(exc, with_type=True)}"
            )
            workflow.logger.warning(reason)
            return 0, reason
        return steps, None

    async def _compact(self, ref: RunRef, inp: CompactionInput) -> CompactionSummary:
        try:
            return await workflow.execute_activity(
                Activity.COMPACT_RUN,
                CompactRunInput(run_id=ref.run_id, tenant_id=ref.tenant_id, keep_steps=inp.keep_steps),
                result_type=CompactionSummary,
                start_to_close_timeout=retry.COMPACT_TIMEOUT,
                heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                retry_policy=retry.PASS_RETRY,
            )
        except ActivityError as exc:
            workflow.logger.warning("compaction of %s failed: %s", ref.run_id, failure_message(exc, with_type=True))
            return CompactionSummary(
                run_id=ref.run_id,
                compaction_id=None,
                first_seq=0,
                last_seq=0,
                tokens_before=0,
                tokens_after=0,
                created=False,
                error=failure_message(exc, with_type=True),
                tenant_id=ref.tenant_id,
            )

    async def _remember(self, created: list[CompactionSummary], timeout_seconds: float) -> tuple[int, str | None]:
        if not created:
            return 0, None
        episodes = [summary_episode(r) for r in created]
        task_queue = memory_task_queue(workflow.info().task_queue)
        try:
            await workflow.execute_activity(
                Activity.SAVE_EPISODES,
                episodes,
                task_queue=task_queue,
                # No memory worker polls: give up soon and say so, the compactions are written.
                schedule_to_start_timeout=timedelta(seconds=timeout_seconds),
                start_to_close_timeout=retry.MEMORY_TIMEOUT,
                retry_policy=retry.PASS_RETRY,
            )
        except ActivityError as exc:
            reason = (
                f"summary episodes not saved (memory worker on {task_queue}): {failure_message(exc, with_type=True)}"
            )
            workflow.logger.warning(reason)
            return 0, reason
        return len(episodes), None
