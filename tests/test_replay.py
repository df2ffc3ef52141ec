"""Determinism: every recorded history replays against the current workflow code, and fresh ones do.

The histories in tests/histories/ were recorded by earlier versions of the code: a change that
breaks a run in flight fails here. To re-record after an intended, versioned change:
    WAYPOINT_RECORD_HISTORIES=1 pytest tests/test_replay.py
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.changed_workflow import ChangedAgentRunWorkflow
from tests.helpers import HISTORIES, _fresh, recorded_histories, replays, tool_heavy
from waypoint.client import Waypoint
from waypoint.compaction_types import CompactionInput, CompactionReport
from waypoint.names import MemoryOp, Workflow, memory_task_queue
from waypoint.store import RunStore
from waypoint.types import MemoryAnswer, MemoryRequest
from waypoint.workflows.agent_run import AgentRunWorkflow
from waypoint.workflows.compaction import CompactionWorkflow
from waypoint.workflows.experiments import ExperimentWorkflow
from waypoint.workflows.memory import MemoryRequestWorkflow
from waypoint.workflows.webhooks import WebhookDeliveryWorkflow

# Recorded by earlier versions too: "remote-store" holds runs whose Postgres writes were remote
# activities and whose memory had an activity of its own (before the local-store and
# memory-in-call-model patches); the newest shape is at the top.
WORKFLOWS = {
    "": [AgentRunWorkflow],
    "remote-store": [AgentRunWorkflow],
    "compaction": [CompactionWorkflow],
    "memory": [MemoryRequestWorkflow],
    "experiment": [ExperimentWorkflow],
    "webhook": [WebhookDeliveryWorkflow],
}


@pytest.mark.parametrize(
    ("path", "workflows"),
    [(path, workflows) for folder, workflows in WORKFLOWS.items() for path in recorded_histories(folder)],
    ids=lambda v: v.stem if isinstance(v, Path) else "",
)
async def test_recorded_history_replays(path: Path, workflows: list[type]):
    await replays(path, workflows)


def test_histories_are_checked_in():
    names = {p.relative_to(HISTORIES).as_posix() for p in HISTORIES.rglob("*.json")}
    assert names >= {
        "agent_run_calculator.json",
        "agent_run_cancelled_in_flight.json",
        "agent_run_cancelled_tree.json",
        "agent_run_cancelled_tree_child.json",
        "agent_run_clumsy.json",
        "agent_run_failed_start.json",
        "agent_run_mute_once.json",
        "agent_run_memory.json",
        "agent_run_memory_main_queue.json",
        "agent_run_quick.json",
        "agent_run_rerun_gated.json",
        "agent_run_rerun_gated_waited.json",
        "agent_run_subagents.json",
        "agent_run_typed.json",
        "agent_run_capacity.json",
        "agent_run_budget_pool.json",
        "agent_run_subagent_child.json",
        "agent_run_webhook.json",
        "agent_run_webhook_delivery.json",
        "agent_run_delayed.json",
        "agent_run_cancelled_scheduled.json",
        "agent_run_enqueued.json",
        "agent_run_thread_joined.json",
        "agent_run_edited_approval.json",
        "agent_run_ask_human.json",
        "agent_run_message_only.json",
        "agent_run_paused_caller.json",
        "remote-store/agent_run_calculator.json",
        "remote-store/agent_run_clumsy.json",
        "remote-store/agent_run_memory.json",
        "remote-store/agent_run_failed_start.json",
        "remote-store/agent_run_mute_once.json",
        "remote-store/agent_run_mcp.json",
        "compaction/compaction_pass.json",
        "compaction/compaction_pass_before_remember.json",
        "memory/memory_request_json_answer.json",
        "memory/memory_request.json",
        "experiment/experiment_judged.json",
        "experiment/experiment_rescored.json",
        "webhook/webhook_delivery_delivered.json",
        "webhook/webhook_delivery_failed.json",
    }


async def test_replay_catches_a_nondeterministic_change():
    path = HISTORIES / "remote-store" / "agent_run_calculator.json"
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    with pytest.raises(NondeterminismError):
        await Replayer(workflows=[ChangedAgentRunWorkflow]).replay_workflow(history)


@pytest.mark.postgres
@pytest.mark.parametrize("agent", ["calculator", "clumsy", "mute-once", "quick"])
async def test_fresh_run_history_replays(client: Client, engine, settings, worker, agent: str):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("replay me", agent=agent)
    assert (await wp.result(run_id)).status == "completed"
    await _fresh(client, run_id, [AgentRunWorkflow], f"agent_run_{agent.replace('-', '_')}.json")


@pytest.mark.postgres
async def test_fresh_rerun_of_gated_calls_replays(client: Client, engine, settings, worker):
    """A rerun with recorded tools whose approval-gated calls match the record: one local activity
    finds them recorded and no approval is awaited (a patched branch). The same rerun from before
    waited for a human at each gated call: agent_run_rerun_gated_waited.json replays above."""
    from tests.agents import EFFECTS
    from tests.helpers import eventually

    async def waiting(run_id: str) -> bool:
        return bool((await wp.progress(run_id)).pending_approvals)

    EFFECTS.clear()
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("clean up", agent="careful")
    for _ in range(2):
        await eventually(lambda: waiting(original))
        await wp.approve(original)
    assert (await wp.result(original)).status == "completed"
    rerun = await wp.rerun(original)
    assert (await wp.result(rerun)).output == "last tool answer: deleted b.txt"
    assert EFFECTS == ["deleted a.txt", "deleted b.txt"]  # the original's two calls only
    history = await client.get_workflow_handle(rerun).fetch_history()
    assert not any(e.HasField("workflow_execution_update_accepted_event_attributes") for e in history.events)
    await _fresh(client, rerun, [AgentRunWorkflow], "agent_run_rerun_gated.json")


@pytest.mark.postgres
async def test_fresh_approval_answers_replay(client: Client, engine, settings, worker):
    """Patch approval-answers-1: an approval with an edited input, and an ask_human call's answer."""
    from tests.helpers import eventually

    wp = Waypoint(client, engine, settings)

    async def answered(agent: str, **kw: object) -> str:
        run_id = await wp.start_run("go", agent=agent)

        async def waiting() -> bool:
            return bool((await wp.progress(run_id)).pending_approvals)

        await eventually(waiting)
        await wp.approve(run_id, **kw)  # type: ignore[arg-type]
        return run_id

    edited = await answered("payer", edited_input={"amount": 90, "to": "ada"})
    assert (await wp.result(edited)).output == "last tool answer: paid 90 to ada"
    await _fresh(client, edited, [AgentRunWorkflow], "agent_run_edited_approval.json")
    asked = await answered("asker", answer="blue")
    assert (await wp.result(asked)).output == "last tool answer: blue"
    await _fresh(client, asked, [AgentRunWorkflow], "agent_run_ask_human.json")


@pytest.mark.postgres
async def test_fresh_memory_histories_replay(memory_worker, client: Client):
    """A run with memory tools and recall, and a memory request."""
    wp, _ = memory_worker
    run_id = await wp.start_run("remember things", agent="rememberer")
    assert (await wp.result(run_id)).status == "completed"
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_memory.json")
    request_id = f"memory-{uuid.uuid4().hex[:8]}"
    shown = await client.execute_workflow(
        Workflow.MEMORY_REQUEST,
        MemoryRequest(op=MemoryOp.SHOW, tenant_id=wp.settings.tenant, run_id=run_id),
        id=request_id,
        task_queue=memory_task_queue(wp.settings.task_queue),
        result_type=MemoryAnswer,
    )
    assert shown.memories and {m.run_id for m in shown.memories} == {run_id}
    await _fresh(client, request_id, [MemoryRequestWorkflow], "memory/memory_request.json")


@pytest.mark.postgres
async def test_fresh_one_process_memory_history_replays(one_process_worker, client: Client):
    """A run with memory on a worker that holds the store itself: its model calls, memory inside
    them, run on the run's own task queue (a patched branch: runs from before used the memory queue)."""
    wp = one_process_worker
    run_id = await wp.start_run("remember things", agent="rememberer")
    assert (await wp.result(run_id)).status == "completed"
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_memory_main_queue.json")


@pytest.mark.postgres
async def test_fresh_compaction_pass_replays(client: Client, store: RunStore, settings, memory_worker):
    """A pass that compacts a run, saves its summary episode and stores what memory missed."""
    from tests.helpers import make_run

    run_id = await make_run(store, settings, tool_heavy())
    workflow_id = f"compaction-{uuid.uuid4().hex[:8]}"
    report = await client.execute_workflow(
        Workflow.COMPACTION,
        CompactionInput(tenant_id=settings.tenant, run_id=run_id, memory_timeout_seconds=1),
        id=workflow_id,
        task_queue=settings.task_queue,
        result_type=CompactionReport,
    )
    assert [(r.run_id, r.created) for r in report.results] == [(run_id, True)] and report.episodes_saved == 1
    await _fresh(client, workflow_id, [CompactionWorkflow], "compaction/compaction_pass.json")


@pytest.mark.postgres
@pytest.mark.parametrize(("answers", "end"), [([503, 200], "delivered"), ([400], "failed")])
async def test_fresh_webhook_run_history_replays(
    client: Client, engine, settings, worker, answers: list[int], end: str
):
    """A run with a webhook starts its delivery, a workflow of its own, after finish_run and ends
    (patch webhook-2; agent_run_webhook.json is a run from before, which posted itself). The delivery
    retries once (503) then delivers, or is refused (400) and goes on the dead-letter list."""
    from tests.helpers import eventually
    from tests.webhook_receiver import receiving

    with receiving(answers) as receiver:
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("replay me", agent="quick", webhook=receiver.url)
        assert (await wp.result(run_id)).status == "completed"

        async def ended() -> str | None:
            found = await wp.webhooks.list(run_id=run_id)
            return found[0].delivery_id if found and found[0].status == end else None

        delivery_id = await eventually(ended, what=f"the delivery {end}")
        assert await client.get_workflow_handle(delivery_id).result() == end
    assert receiver.answered == answers
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_webhook_delivery.json" if end == "delivered" else None)
    await _fresh(client, delivery_id, [WebhookDeliveryWorkflow], f"webhook/webhook_delivery_{end}.json")


@pytest.mark.postgres
async def test_fresh_failed_start_history_replays(client: Client, settings, worker):
    """A run whose start fails writes its failed row (a patched branch: old histories skip it)."""
    from temporalio.client import WorkflowFailureError

    from waypoint.checks import new_run_id
    from waypoint.types import RunInput

    run_id = new_run_id()
    await client.start_workflow(
        Workflow.AGENT_RUN,
        RunInput(agent="nobody", task="hello", tenant_id=settings.tenant),
        id=run_id,
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError):
        await client.get_workflow_handle(run_id).result()
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_failed_start.json")


@pytest.mark.postgres
async def test_fresh_cancelled_in_flight_history_replays(client: Client, engine, settings, worker, fake_openai):
    """A cancel that stops a model call waiting for its next attempt (a patched branch: runs from
    before waited for the step to end)."""
    from tests.helpers import eventually, run_events
    from waypoint.testing.fake_openai import Reply

    fake_openai.responder = lambda body, n: Reply(503, {"error": {"message": "down"}}, {"retry-after": "30"})
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("replay me", agent="remote")
    await eventually(lambda: run_events(engine, run_id, "model_attempt_failed"), what="a failed model attempt")
    await wp.cancel(run_id)
    assert (await wp.result(run_id)).status == "cancelled"
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_cancelled_in_flight.json")


@pytest.mark.postgres
async def test_fresh_mcp_run_history_replays_and_carries_no_server_details(client: Client, engine, settings, tmp_path):
    """A run that calls an MCP tool: replay needs no server (the tools were recorded at the start, in
    Postgres), and history holds tool specs only, never a schema or the server's configuration."""
    from tests.mcp_agents import stdio_server
    from waypoint import Agent, ScriptedModel, ScriptedTurn
    from waypoint.agents import AgentRegistry
    from waypoint.app.worker import build_worker

    agent = Agent(
        name="mcp_replay",
        instructions="Multiply.",
        model=ScriptedModel([ScriptedTurn(tool_calls=[("multiply", {"a": 6, "b": 7})]), ScriptedTurn(content="42")]),
        mcp=[stdio_server(tmp_path / "mcp")],
    )
    async with build_worker(client, engine, settings, AgentRegistry([agent])):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("replay me", agent="mcp_replay")
        assert (await wp.result(run_id)).status == "completed"
    history = (await client.get_workflow_handle(run_id).fetch_history()).to_json()
    for detail in ("Multiply two integers", "inputSchema", "integer", "MCP_TEST_DIR", "mcp_server.py"):
        assert detail not in history
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_mcp.json")


@pytest.mark.postgres
async def test_fresh_sub_agent_histories_replay(client: Client, engine, settings, worker):
    """A run whose first turn calls four sub-agents, two at a time: two child runs that complete, one
    that fails and a call without a task (no child run); and the history of one of its children."""
    from waypoint.names import child_run_id

    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("delegate", agent="delegator")
    result = await wp.result(run_id)
    assert result.status == "completed"
    first, second, failed, bad = result.output.split(" | ")
    assert first == second == "The answer is 15."
    assert failed.startswith(f"error: sub-agent broken (run {child_run_id(run_id, 1, 2)}) ended failed")
    assert bad.startswith("error: invalid arguments for calculator")
    history = await client.get_workflow_handle(run_id).fetch_history()
    started = [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert started == [child_run_id(run_id, 1, i) for i in range(3)]
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_subagents.json")
    await _fresh(client, child_run_id(run_id, 1, 1), [AgentRunWorkflow], "agent_run_subagent_child.json")


@pytest.mark.postgres
async def test_fresh_experiment_histories_replay(client: Client, engine, settings, worker, fake_openai):
    """An experiment of two recorded demo runs (recorded tools) with a judge: two child runs, a
    judge_case activity each, the local plan, case and score steps; and its rescoring, which starts
    no run and reads the judge's verdicts back."""
    from tests.evals_helpers import JUDGE, VERDICT, finished_experiment

    fake_openai.answer(VERDICT, VERDICT)
    wp = Waypoint(client, engine, settings)
    report = await finished_experiment(wp, scorers=[JUDGE, "exact"])
    exp_id = report.experiment.experiment_id
    assert [r.scores["judge"]["value"] for r in report.results] == [0.8, 0.8]
    await client.get_workflow_handle(exp_id).result()  # its row is written before the workflow ends
    await _fresh(client, exp_id, [ExperimentWorkflow], "experiment/experiment_judged.json")
    again = await wp.evals.rescore(exp_id, scorers=[JUDGE])
    assert [r.scores["judge"]["value"] for r in (await wp.evals.wait(again.experiment_id)).results] == [0.8, 0.8]
    await client.get_workflow_handle(again.experiment_id).result()
    await _fresh(client, again.experiment_id, [ExperimentWorkflow], "experiment/experiment_rescored.json")
    assert len(fake_openai.seen) == 2
