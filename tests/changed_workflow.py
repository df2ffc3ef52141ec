"""A deliberately non-deterministic change of AgentRunWorkflow, for the replay test.

It lives in its own module because the workflow sandbox re-imports the module
that defines a workflow, and test modules do file IO at import.
"""

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from waypoint.types import RunInput


@workflow.defn(name="AgentRunWorkflow")
class ChangedAgentRunWorkflow:
    """Starts with a timer where the recorded history has the `start_run` activity."""

    @workflow.run
    async def run(self, inp: RunInput) -> None:
        await workflow.sleep(1)
