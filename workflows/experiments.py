"""ExperimentWorkflow: every case of a dataset as a durable agent run, scored, `concurrency` at a time.

Each case's run is a child workflow (an ordinary AgentRunWorkflow: its log, checkpoints, trace and
page, tagged with the experiment id as its batch) whose id is derived from the experiment, the case
and the repetition (`experiment_run_id`), so a retried or replayed experiment never starts a case
twice. The parent-close policy is REQUEST_CANCEL: a cancelled experiment cancels its runs in flight.
After a case's run ends, each judge scorer grades it in a `judge_case` activity (a model call:
retried like one on 429/5xx, its verdict recorded, so a retry or a rescoring does not call again),
then `score_case` (a local activity) runs the other scorers and writes the case's result once.
A case whose run cannot start, whose judge stays unreachable or whose scorer raises is recorded
errored with the message, and the experiment goes on.

The cases come from Postgres a page at a time (`experiment_plan`, leaving out those with a result),
so history holds references, not tasks; when Temporal suggests it, the workflow lets its runs in
flight finish and continues as new, and the plan picks up where the results end. A worker that dies
mid-experiment costs no finished case: their results are in Postgres, their runs in history.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.errors import failure_message
    from waypoint.evals.types import (
        CaseInput,
        CaseOutcome,
        CaseRef,
        ExperimentInput,
        ExperimentPlan,
        ExperimentResult,
        FinishInput,
        PlanInput,
    )
    from waypoint.names import Activity, ExperimentStatus, Workflow, experiment_run_id
    from waypoint.types import RunInput, RunResult

PAGE = 200  # cases a plan reads at a time
# What a local activity that failed raises in the workflow: its own ApplicationError, or a timeout
# (a remote one's failure is an ActivityError with the cause inside).
LOCAL_FAILED = (ActivityError, ApplicationError, ActivityTimeout)
LOCAL_TIMEOUT = timedelta(seconds=60)  # the plan, a case's input, its scores, the summary


@workflow.defn(name=Workflow.EXPERIMENT)
class ExperimentWorkflow:
    def __init__(self) -> None:
        self._running = 0
        self._ended = 0
        self._errored = 0

    @workflow.run
    async def run(self, inp: ExperimentInput) -> ExperimentResult:
        self._ended, self._errored = inp.ended, inp.errored
        slots = asyncio.Semaphore(max(1, inp.concurrency))
        tasks: list[asyncio.Task[None]] = []
        after: tuple[int, int] | None = None
        try:
            while True:
                plan: ExperimentPlan = await self._local(
                    Activity.EXPERIMENT_PLAN,
                    PlanInput(inp.experiment_id, inp.tenant_id, after=after, limit=PAGE),
                    ExperimentPlan,
                )
                for ref in plan.cases:
                    await slots.acquire()  # a case starts as soon as one in flight ends
                    self._running += 1
                    tasks.append(asyncio.create_task(self._case(inp, ref, slots)))
                if plan.cases:
                    last = plan.cases[-1]
                    after = (last.index, last.repetition)
                if not plan.more:
                    break
                if workflow.info().is_continue_as_new_suggested():
                    await workflow.wait_condition(lambda: self._running == 0)
                    await asyncio.gather(*tasks)
                    workflow.continue_as_new(replace(inp, ended=self._ended, errored=self._errored))
            await workflow.wait_condition(lambda: self._running == 0)
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Cancelled: the runs in flight are cancelled as the experiment closes (their parent-close
            # policy); the row says how it ended, written even though this workflow is cancelled.
            await self._finish(inp, ExperimentStatus.CANCELLED, "cancelled")
            return ExperimentResult(inp.experiment_id, ExperimentStatus.CANCELLED, self._ended, self._errored)
        await self._finish(inp, ExperimentStatus.COMPLETED, None)
        return ExperimentResult(inp.experiment_id, ExperimentStatus.COMPLETED, self._ended, self._errored)

    async def _case(self, inp: ExperimentInput, ref: CaseRef, slots: asyncio.Semaphore) -> None:
        """One case: its run (unless it is scored on a run that exists), its judges, its scores. Its
        slot is the run's: it is given to the next case as soon as the run ends, so the next run
        starts while this one is judged and scored (`concurrency` bounds the runs in flight)."""
        case = CaseInput(inp.experiment_id, inp.tenant_id, ref.index, ref.repetition, run_id=ref.run_id)
        holding = True
        try:
            error = None
            if ref.run_id is None:
                run_id, error = await self._run_case(inp, case)
                case = replace(case, run_id=run_id)
            slots.release()
            holding = False
            if error is None:
                error = await self._judge(inp, case)
            try:
                outcome: CaseOutcome = await self._local(Activity.SCORE_CASE, replace(case, error=error), CaseOutcome)
            except LOCAL_FAILED as exc:
                # Not a scorer's failure (those are recorded): a bug or a lasting outage. The case has no
                # result, so a continued-as-new experiment plans it again; this one goes on.
                workflow.logger.warning(
                    "case %s of %s was not scored: %s", ref, inp.experiment_id, failure_message(exc)
                )
                self._errored += 1
            else:
                self._errored += outcome.errored
            self._ended += 1
        finally:
            self._running -= 1
            if holding:
                slots.release()

    async def _run_case(self, inp: ExperimentInput, case: CaseInput) -> tuple[str | None, str | None]:
        """Start the case's run and wait for its end: its run id (None: it never started), and why it
        could not start (or None)."""
        run_id = experiment_run_id(inp.experiment_id, case.index, case.repetition)
        try:
            run_input: RunInput = await self._local(Activity.EXPERIMENT_CASE, case, RunInput)
        except LOCAL_FAILED as exc:
            # No run: its result names none (scoring would look for it, a rescoring would plan it).
            return None, f"the case's run could not be made: {failure_message(exc)}"
        try:
            await workflow.execute_child_workflow(
                Workflow.AGENT_RUN,
                run_input,
                id=run_id,
                result_type=RunResult,
                task_queue=workflow.info().task_queue,
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
            )
        except WorkflowAlreadyStartedError:
            return run_id, f"a run {run_id} exists already: start the experiment again under a new id"
        except ChildWorkflowError:
            pass  # the run failed: its row says how, and the scorers see it
        return run_id, None

    async def _judge(self, inp: ExperimentInput, case: CaseInput) -> str | None:
        """Each judge's verdict on the case's run, recorded; why one could not be had (or None)."""
        for label in inp.judges:
            try:
                await workflow.execute_activity(
                    Activity.JUDGE_CASE,
                    replace(case, judge=label),
                    start_to_close_timeout=retry.JUDGE_TIMEOUT,
                    heartbeat_timeout=retry.HEARTBEAT_TIMEOUT,
                    retry_policy=retry.JUDGE_RETRY,
                )
            except ActivityError as exc:
                return f"judge {label!r} gave no verdict: {failure_message(exc)}"
        return None

    async def _finish(self, inp: ExperimentInput, status: ExperimentStatus, error: str | None) -> None:
        await self._local(
            Activity.FINISH_EXPERIMENT, FinishInput(inp.experiment_id, inp.tenant_id, status, error), None
        )

    async def _local(self, name: Activity, arg: object, result_type: type | None) -> Any:
        return await workflow.execute_local_activity(
            name,
            arg,
            result_type=result_type,
            start_to_close_timeout=LOCAL_TIMEOUT,
            retry_policy=retry.EXPERIMENT_RETRY,
        )
