"""AgentRunWorkflow: one agent run, step by step.

Each step is `call_model`, one `run_tool` per tool call, then `record_step`,
which mirrors the step into Postgres. The workflow carries only small values
(step number, the model's answer); contexts are loaded from checkpoints by the
activities, so history stays small however long the context grows.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.types import (
        CALL_MODEL,
        FINISH_RUN,
        RECORD_STEP,
        RUN_TOOL,
        START_RUN,
        CallModelInput,
        FinishRunInput,
        ModelTurn,
        RunInput,
        RunPlan,
        RunProgress,
        RunResult,
        RunStatus,
        RunToolInput,
        StartRunInput,
        StepRecord,
        ToolCall,
        ToolResult,
    )


def _failure_message(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    # FailureError.message is the bare text; str() would prefix the error type.
    return getattr(cause, "message", None) or str(cause) or type(cause).__name__


@workflow.defn(name="AgentRunWorkflow")
class AgentRunWorkflow:
    def __init__(self) -> None:
        self._progress = RunProgress(step=0, status="starting")

    @workflow.query(name="progress")
    def progress(self) -> RunProgress:
        return self._progress

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        run_id = workflow.info().workflow_id
        try:
            plan: RunPlan = await workflow.execute_activity(
                START_RUN,
                StartRunInput(
                    run_id=run_id,
                    tenant_id=inp.tenant_id,
                    agent=inp.agent,
                    task=inp.task,
                    model=inp.model,
                    max_steps=inp.max_steps,
                ),
                result_type=RunPlan,
                start_to_close_timeout=retry.STORE_TIMEOUT,
                retry_policy=retry.STORE_RETRY,
            )
        except ActivityError as exc:
            raise ApplicationError(
                f"run {run_id} could not start: {_failure_message(exc)}", non_retryable=True
            ) from None
        self._progress = RunProgress(step=0, status=RunStatus.RUNNING)
        status, output, error, recorded = RunStatus.MAX_STEPS, None, None, 0
        try:
            for step in range(1, plan.max_steps + 1):
                turn = await self._call_model(run_id, inp, plan, step)
                results = await asyncio.gather(
                    *(self._run_tool(run_id, inp, step, i, call) for i, call in enumerate(turn.tool_calls))
                )
                await workflow.execute_activity(
                    RECORD_STEP,
                    StepRecord(
                        run_id=run_id, tenant_id=inp.tenant_id, step=step, turn=turn, tool_results=list(results)
                    ),
                    start_to_close_timeout=retry.STORE_TIMEOUT,
                    retry_policy=retry.STORE_RETRY,
                )
                recorded = step
                self._progress = RunProgress(
                    step=step,
                    status=RunStatus.RUNNING,
                    last_action=", ".join(c.name for c in turn.tool_calls) or "answer",
                    input_tokens=self._progress.input_tokens + turn.usage.input_tokens,
                    output_tokens=self._progress.output_tokens + turn.usage.output_tokens,
                )
                if not turn.tool_calls:
                    status, output = RunStatus.COMPLETED, turn.content
                    break
        except ActivityError as exc:
            status, error = RunStatus.FAILED, _failure_message(exc)

        result: RunResult = await workflow.execute_activity(
            FINISH_RUN,
            FinishRunInput(
                run_id=run_id, tenant_id=inp.tenant_id, status=status, steps=recorded, output=output, error=error
            ),
            result_type=RunResult,
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )
        self._progress = RunProgress(
            step=recorded,
            status=status,
            last_action=self._progress.last_action,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
        )
        if status == RunStatus.FAILED:
            raise ApplicationError(f"run {run_id} failed at step {recorded + 1}: {error}", non_retryable=True)
        return result

    async def _call_model(self, run_id: str, inp: RunInput, plan: RunPlan, step: int) -> ModelTurn:
        return await workflow.execute_activity(
            CALL_MODEL,
            CallModelInput(run_id=run_id, tenant_id=inp.tenant_id, agent=inp.agent, step=step, model=plan.model),
            result_type=ModelTurn,
            start_to_close_timeout=retry.MODEL_TIMEOUT,
            retry_policy=retry.MODEL_RETRY,
        )

    async def _run_tool(self, run_id: str, inp: RunInput, step: int, index: int, call: ToolCall) -> ToolResult:
        try:
            return await workflow.execute_activity(
                RUN_TOOL,
                RunToolInput(
                    run_id=run_id, tenant_id=inp.tenant_id, agent=inp.agent, step=step, call_index=index, call=call
                ),
                result_type=ToolResult,
                start_to_close_timeout=retry.TOOL_TIMEOUT,
                retry_policy=retry.TOOL_RETRY,
            )
        except ActivityError as exc:
            # A tool that keeps failing is reported to the model, which can work around it.
            return ToolResult(
                call_id=call.id,
                name=call.name,
                is_error=True,
                output=f"error: tool {call.name} failed: {_failure_message(exc)}",
            )
