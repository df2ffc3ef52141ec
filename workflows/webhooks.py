"""WebhookDeliveryWorkflow: one webhook delivery, retried until delivered or its window ends.

A run's workflow starts one as a child that outlives it (parent-close policy ABANDON), with the
delivery's id as the workflow id, and ends at once: a receiver that is down for a day keeps a small
delivery workflow open, never the run's. A redelivery (`waypoint webhooks redeliver`) is started
the same way by the client.

`open_webhook_delivery` makes the delivery's row and starts its retry window (the worker's
`webhook_retry_window_seconds`); `post_webhook` then runs under `retry.WEBHOOK_DELIVERY_RETRY` with
the window as its schedule-to-close timeout, so Temporal's own retries pace the attempts (1, 2, 4 s
... at most an hour apart) and history stays a handful of events however many attempts there are.
When the window ends (or the receiver refuses), `close_webhook_delivery` puts the delivery on the
dead-letter list. The workflow never fails for the receiver's sake: its result is the final status.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeout

with workflow.unsafe.imports_passed_through():
    from waypoint import retry
    from waypoint.errors import failure_message
    from waypoint.names import Activity, DeliveryStatus, Workflow
    from waypoint.types import CloseDeliveryInput, DeliveryPlan, PostWebhookInput, WebhookDeliveryInput

FAILED = (ActivityError, ApplicationError, ActivityTimeout)


@workflow.defn(name=Workflow.WEBHOOK_DELIVERY)
class WebhookDeliveryWorkflow:
    @workflow.run
    async def run(self, inp: WebhookDeliveryInput) -> str:
        try:
            plan: DeliveryPlan = await workflow.execute_activity(
                Activity.OPEN_WEBHOOK,
                inp,
                result_type=DeliveryPlan,
                start_to_close_timeout=retry.STORE_TIMEOUT,
                retry_policy=retry.STORE_RETRY,
            )
        except FAILED as exc:  # no such run any more, or it has no webhook: nothing to post
            workflow.logger.warning("webhook delivery %s not opened: %s", inp.delivery_id, failure_message(exc))
            return DeliveryStatus.FAILED
        if plan.status != DeliveryStatus.PENDING:  # delivered or given up already (a redelivered id)
            return plan.status
        if plan.window_seconds < 1:
            return await self._give_up(inp, "its retry window ended before its first attempt")
        try:
            await workflow.execute_activity(
                Activity.POST_WEBHOOK,
                PostWebhookInput(inp.delivery_id, inp.tenant_id),
                result_type=int,
                schedule_to_close_timeout=timedelta(seconds=plan.window_seconds),
                start_to_close_timeout=retry.WEBHOOK_ACTIVITY_TIMEOUT,
                retry_policy=retry.WEBHOOK_DELIVERY_RETRY,
            )
        except FAILED as exc:
            timed_out = isinstance(exc, ActivityError) and exc.retry_state == RetryState.TIMEOUT
            why = failure_message(exc)
            return await self._give_up(inp, f"its retry window ended; last: {why}" if timed_out else why)
        return DeliveryStatus.DELIVERED

    async def _give_up(self, inp: WebhookDeliveryInput, reason: str) -> str:
        await workflow.execute_activity(
            Activity.CLOSE_WEBHOOK,
            CloseDeliveryInput(inp.delivery_id, inp.tenant_id, reason),
            start_to_close_timeout=retry.STORE_TIMEOUT,
            retry_policy=retry.STORE_RETRY,
        )
        return DeliveryStatus.FAILED
