"""Model failover: an agent with several models (`Agent(model=("anthropic:...", "openai:..."))`).

Each model but the last gets `failover_after` attempts of the step's call (fewer when the agent's own
retry spec allows fewer). When they are spent on errors that fail over (a provider down or
overloaded, answers that are not completions, a timeout, or a model this worker cannot call: see
`waypoint.retry.FAILOVER_ERRORS`), the move is logged as a `model_failover` event by a short local
activity, and the same step calls the next model. The run stays there for its later steps (and across
continue-as-new, in `RunState.model_index`): one move per outage, not one wait per step. The shared
limiter's health of each model key moves it sooner, and back (workflows/capacity.py): an open circuit
breaker fails the step over at once, and a model the run left that is healthy again takes it back,
each move a `model_failover` event too (`error_type` `breaker` or `recovered`). The last model keeps
the agent's full retry policy. A rejected request (4xx) fails the run at once: the next model would get the same one.

The switch happens in the workflow, so it is durable and replays: runs whose plan has one model take
the old path, without the `model-failover-1` patch marker, and their commands are what they were.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from waypoint.workflows.capacity import CapacityRedirect

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.errors import failure_message
    from waypoint.names import Activity, WaitReason
    from waypoint.types import CallModelInput, FailoverRecord, ModelTurn, RunState


def fails_over(exc: ActivityError) -> bool:
    """Whether a model call that failed this way hands the step to the agent's next model: its last
    error is one a retry may heal (or a model this worker cannot call), or its last attempt timed out
    (a call that waited for a worker of the memory queue is the caller's to handle)."""
    cause = exc.cause
    if isinstance(cause, ActivityTimeout):
        return cause.type in (TimeoutType.START_TO_CLOSE, TimeoutType.HEARTBEAT)
    return isinstance(cause, ApplicationError) and cause.type in retry.FAILOVER_ERRORS


def failed_attempts(exc: ActivityError, policy: RetryPolicy) -> int:
    """How many attempts a failed model call made: all its policy allowed when they ran out, else the
    attempt its last error names (the model activity adds it), else one."""
    if exc.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED:
        return policy.maximum_attempts
    cause = exc.cause
    details = cause.details if isinstance(cause, ApplicationError) else ()
    attempt = details[0].get("attempt") if details and isinstance(details[0], dict) else None
    return attempt if isinstance(attempt, int) else 1


class ModelFailover:
    """AgentRunWorkflow's model calls with failover; the workflow provides what is declared here."""

    _state: RunState
    _run_id: str

    async def _store(self, name: Activity, arg: Any, result_type: type | None = None) -> Any:
        raise NotImplementedError

    async def _call_model_once(
        self,
        call: CallModelInput,
        task_queue: str | None = None,
        policy: RetryPolicy | None = None,
        *,
        redirect: bool = False,
        **timeouts: Any,
    ) -> ModelTurn:
        raise NotImplementedError

    async def _call_model(self, call: CallModelInput, task_queue: str | None = None, **timeouts: Any) -> ModelTurn:
        """The step's model call, on the model the run is at, failing over down the plan's list."""
        plan = self._state.plan
        if not plan.fallback_models or not workflow.patched("model-failover-1"):
            return await self._call_model_once(call, task_queue, **timeouts)
        models = plan.models
        tried: list[str] = []
        while True:
            index = min(self._state.model_index, len(models) - 1)
            model, last = models[index], index == len(models) - 1
            policy = retry.model_retry(plan.retry) if last else retry.failover_retry(plan.retry, plan.failover_after)
            moved = FailoverRecord(self._run_id, call.tenant_id, call.step, model, "", 0, "", "")
            try:
                # `prefer`: the models before this one, for the call to step back to one that recovered.
                this_call = replace(
                    call, model=model, failed_over_from=list(tried), prefer=models[:index], can_fail_over=not last
                )
                return await self._call_model_once(this_call, task_queue, policy=policy, redirect=not last, **timeouts)
            except CapacityRedirect as redirect:
                wait = redirect.wait
                if wait.reason == WaitReason.RECOVERED:
                    back = models.index(wait.key)
                    why = f"{wait.key} is healthy again: back to it"
                    failover = replace(moved, to_model=wait.key, last_error=why, error_type=WaitReason.RECOVERED)
                else:
                    back = index + 1
                    why = f"the circuit breaker of {wait.key} is open"
                    failover = replace(moved, to_model=models[back], last_error=why, error_type=WaitReason.BREAKER)
            except ActivityError as exc:
                if last or not fails_over(exc):
                    raise
                back = index + 1
                failover = replace(
                    moved,
                    to_model=models[back],
                    after_attempts=failed_attempts(exc, policy),
                    last_error=failure_message(exc),
                    error_type=exc.cause.type if isinstance(exc.cause, ApplicationError) else "timeout",
                )
            after, to = failover.after_attempts, failover.to_model
            workflow.logger.warning(
                "step %s: %s -> %s after %s failed attempt(s): %s", call.step, model, to, after, failover.last_error
            )
            await self._store(Activity.RECORD_FAILOVER, failover)
            self._state = replace(self._state, model_index=back)
            tried.append(model)
