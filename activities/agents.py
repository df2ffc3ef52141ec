"""The `agent_result` activity: a sub-agent call's outcome, into its parent's tool ledger.

A sub-agent call is a child workflow, not a `run_tool` activity, but its outcome is kept like any
tool's: in the parent's `tool_effects` ledger under the call's idempotency key, so `record_step`,
working memory, `show` and a rerun with recorded tools read it where they read every tool result.
The child's answer is read here from its row in Postgres: the child workflow hands its parent a
preview only (claim check), whatever the answer's length. A call that started no child (bad
arguments, a tree too deep) is recorded the same way, with the reason the model reads.
"""

from __future__ import annotations

from temporalio import activity

from waypoint.activities.boundary import boundary
from waypoint.activities.tools import result_of
from waypoint.names import Activity, RunStatus, ToolOutcome
from waypoint.store import RunStore
from waypoint.store.ledger import Effect
from waypoint.store.rows import RunRow
from waypoint.types import AgentCallInput, AgentCallResult


def answer_of(child: RunRow) -> tuple[str, ToolOutcome]:
    """What the parent's model reads of a finished child run: its answer, or how it ended."""
    if child.status == RunStatus.COMPLETED:
        return child.output or "", ToolOutcome.OK
    why = f": {child.error}" if child.error else ""
    partial = f"\nits last words: {child.output}" if child.output else ""
    return (
        f"error: sub-agent {child.agent} (run {child.run_id}) ended {child.status} after {child.steps} "
        f"step(s){why}{partial}",
        ToolOutcome.TOOL_ERROR,
    )


class AgentCallActivities:
    def __init__(self, store: RunStore):
        self.store = store

    @activity.defn(name=Activity.AGENT_RESULT)
    @boundary
    async def agent_result(self, inp: AgentCallInput) -> AgentCallResult:
        tokens, cost = 0, 0.0
        if inp.child_run_id is not None:
            tokens, cost = await self.store.trees.tree_usage(inp.tenant_id, inp.child_run_id)
        key = inp.idempotency_key
        done = await self.store.ledger.recorded_effect(inp.tenant_id, key)
        if done is not None:  # a retry after the write committed
            return AgentCallResult(result_of(done, inp.call.id, from_ledger=True), tokens, cost)
        if inp.child_run_id is not None:
            child = await self.store.get_run(inp.tenant_id, inp.child_run_id)
            output, outcome = answer_of(child)
            duration_ms = (
                int((child.finished_at - child.created_at).total_seconds() * 1000)
                if child.finished_at and child.created_at
                else 0
            )
        else:
            output, outcome, duration_ms = f"error: {inp.error or 'no sub-agent ran'}", inp.outcome, 0
        effect = Effect(
            idempotency_key=key,
            run_id=inp.run_id,
            step=inp.step,
            call_index=inp.call_index,
            tool=inp.call.name,
            arguments=inp.call.arguments,
            output=output,
            outcome=outcome,
            duration_ms=duration_ms,
            attempt=activity.info().attempt,
        )
        await self.store.ledger.record_effect(inp.tenant_id, effect)
        return AgentCallResult(result_of(effect, inp.call.id, from_ledger=False), tokens, cost)
