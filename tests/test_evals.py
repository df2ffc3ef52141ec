"""Evaluations on the real stack (Temporal, Postgres, the worker, the fake OpenAI server): datasets
made from runs, versions and tenants; an experiment with recorded tools repeats no effect and runs
each case as a rerun tagged with it; a scorer that raises; the LLM judge, its retries, its
recorded verdict and its last attempt against a model that stays down; a worker SIGKILLed
mid-experiment. The workflow's own logic, against doubles, is in tests/test_experiment_workflow.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.agents import PONDER_STARTED
from tests.evals_helpers import JUDGE, VERDICT, demo_runs, finished_experiment
from tests.helpers import eventually
from tests.processes import kill, worker_env
from waypoint.activities.evals import EvalActivities
from waypoint.activities.model import ModelActivities
from waypoint.agents import AgentRegistry
from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.errors import NotFound
from waypoint.evals.cases import ExpectedCall
from waypoint.evals.types import CaseInput
from waypoint.names import CaseStatus, ExperimentStatus, LineageKind, experiment_run_id
from waypoint.store import RunStore
from waypoint.store.schema import eval_judgements, events, experiment_results, runs
from waypoint.testing.fake_openai import FakeOpenAI, Reply

pytestmark = pytest.mark.postgres

DEMO_CALLS = ["list_files", *["read_file"] * 3, *["word_stats"] * 3, "write_file"]


def other_tenant(settings: Settings) -> str:
    return f"{settings.tenant}-other"


# --- datasets ------------------------------------------------------------------------------------


async def test_a_dataset_from_runs_versions_and_tenants_and_its_experiment_with_recorded_tools(
    worker, client: Client, engine: AsyncEngine, settings
):
    """One pair of recorded runs for both: the dataset's versions and tenants, then an experiment
    on its first version, whose recorded tools repeat no effect and whose case runs are reruns."""
    seed_workspace(settings.resolved_workspace)
    report_md = settings.resolved_workspace / "report.md"
    wp = Waypoint(client, engine, settings)
    ids = await demo_runs(wp, 2)
    first = await wp.evals.create_dataset("notes", run_ids=ids)
    assert (first.version, first.cases) == (1, 2)
    cases = await wp.evals.cases("notes")
    for case, run_id in zip(cases, ids, strict=True):
        run = await wp.run(run_id)
        assert (case.case_id, case.source_run_id, case.task) == (run_id, run_id, run.task)
        assert case.expected_output == run.output and "report.md" in (run.output or "")
        assert [c.name for c in case.expected_tools or []] == DEMO_CALLS
        assert (case.expected_tools or [])[0] == ExpectedCall("list_files", {"folder": "notes"})

    second = await wp.evals.create_dataset("notes", run_ids=ids[:1])
    assert (second.version, second.cases) == (2, 1)
    assert (await wp.evals.dataset("notes")).version == 2
    assert (await wp.evals.dataset("notes", version=1)).cases == 2
    assert await wp.evals.cases("notes", version=1) == cases  # a new version leaves the old one as it was

    with pytest.raises(NotFound):
        await wp.evals.dataset("notes", tenant_id=other_tenant(settings))
    with pytest.raises(NotFound):  # nor can it make a dataset of this tenant's runs
        await wp.evals.create_dataset("theirs", run_ids=ids, tenant_id=other_tenant(settings))

    assert report_md.exists()
    report_md.unlink()  # the originals' effect: a case run that wrote it again would bring it back
    exp = await wp.evals.start_experiment(
        "notes", version=1, agent="demo", recorded_tools=True, scorers=["exact", "trajectory"]
    )
    with pytest.raises(NotFound):
        await wp.evals.experiment(exp.experiment_id, tenant_id=other_tenant(settings))
    with pytest.raises(NotFound):
        await wp.evals.report(exp.experiment_id, tenant_id=other_tenant(settings))
    assert await wp.evals.experiments(tenant_id=other_tenant(settings)) == []
    report = await wp.evals.wait(exp.experiment_id, timeout=60)

    assert report.experiment.status == ExperimentStatus.COMPLETED
    assert not report_md.exists()  # write_file was answered from the record
    assert [(r.status, r.scores["exact"]["value"], r.scores["trajectory"]["value"]) for r in report.results] == [
        (CaseStatus.SCORED, 1.0, 1.0)
    ] * 2
    expected = {experiment_run_id(exp.experiment_id, i, 0) for i in range(2)}
    assert {r.run_id for r in report.results} == expected
    tagged = await wp.runs(batch_id=exp.experiment_id)
    assert {r.run_id for r in tagged} == expected
    sources = {r.run_id: r.parent_run_id or "" for r in tagged}
    assert sorted(sources.values()) == sorted(ids)  # each a rerun of its case's run
    assert {(r.lineage_kind, r.batch_id) for r in tagged} == {(LineageKind.RERUN, exp.experiment_id)}


# --- experiments ---------------------------------------------------------------------------------


async def test_a_case_whose_recorded_run_was_deleted_is_errored_and_the_experiment_completes(
    worker, client: Client, engine: AsyncEngine, settings
):
    """experiment_case refuses the case (a local activity's NotFound): before the fix, that failure
    escaped the workflow, which failed with the experiment's row left `running`."""
    wp = Waypoint(client, engine, settings)
    ids = await demo_runs(wp, 2)
    await wp.evals.create_dataset("notes", run_ids=ids)
    await wp.delete(ids[0])
    exp = await wp.evals.start_experiment("notes", agent="demo", recorded_tools=True, scorers=["exact"])
    report = await wp.evals.wait(exp.experiment_id, timeout=60)
    assert report.experiment.status == ExperimentStatus.COMPLETED
    gone, kept = report.results
    assert gone.status == CaseStatus.ERRORED and f"recorded run {ids[0]} was deleted" in (gone.error or "")
    assert (kept.status, kept.scores["exact"]["value"]) == (CaseStatus.SCORED, 1.0)


async def test_a_scorer_that_raises_errors_every_case_and_the_experiment_completes(
    worker, client: Client, engine: AsyncEngine, settings
):
    wp = Waypoint(client, engine, settings)
    report = await finished_experiment(wp, scorers=["exploding", "exact", "mentions_report"])
    assert report.experiment.status == ExperimentStatus.COMPLETED
    assert len(report.results) == 2
    for result in report.results:
        assert result.status == CaseStatus.ERRORED
        assert result.error == "scorer 'exploding' raised ValueError: the scorer broke on purpose"
        assert result.scores["exact"]["value"] == 1.0  # the others' scores are kept
        assert "mentions_report" in result.scores


async def test_the_judge_retries_a_503_its_verdict_is_recorded_and_its_last_attempt_fails_retryably(
    worker, client: Client, engine: AsyncEngine, settings, agents: AgentRegistry, fake_openai: FakeOpenAI
):
    from waypoint.retry import JUDGE_ATTEMPTS

    fake_openai.answer(Reply(503, {"error": {"message": "overloaded", "type": "server_error"}}), VERDICT)
    wp = Waypoint(client, engine, settings)
    report = await finished_experiment(wp, runs=1, scorers=[JUDGE, "exact"])
    assert report.experiment.status == ExperimentStatus.COMPLETED
    (result,) = report.results
    assert (result.status, result.scores["judge"]["value"]) == (CaseStatus.SCORED, 0.8), result
    assert result.scores["judge"]["reason"] == "names the report, not each note"
    assert len(fake_openai.seen) == 2  # the 503, then the verdict
    assert all(s.body["model"] == "judge" for s in fake_openai.seen)

    again = await wp.evals.rescore(report.experiment.experiment_id, scorers=[JUDGE])
    rescored = await wp.evals.wait(again.experiment_id, timeout=60)
    assert [r.scores["judge"]["value"] for r in rescored.results] == [0.8]
    assert [r.run_id for r in rescored.results] == [result.run_id]  # the same run, not a new one
    assert len(fake_openai.seen) == 2  # the verdict was read back, not asked again

    # A judge that stays down: the real activity, on its last attempt, against a model that answers
    # 503: one request, and a retryable failure that names the status (which the workflow's "gave no
    # verdict" error quotes). That the policy gives up after JUDGE_ATTEMPTS, the case errored and the
    # experiment completed, is the workflow's logic: test_experiment_workflow.py's attempts-spent case,
    # with the same policy. (A whole experiment here would wait out the real backoffs: 1, 2, 4, 8 s.)
    async with engine.begin() as conn:  # its verdict unrecorded: the judge asks again
        await conn.execute(delete(eval_judgements).where(eval_judgements.c.run_id == result.run_id))
    fake_openai.burst(503, 120)
    store = RunStore(engine)
    acts = EvalActivities(store, agents, settings, ModelActivities(store, agents, settings).adapter)
    case = CaseInput(report.experiment.experiment_id, settings.tenant, 0, 0, run_id=result.run_id, judge="judge")
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=JUDGE_ATTEMPTS)
    with pytest.raises(ApplicationError) as failed:
        await env.run(acts.judge_case, case)
    assert not failed.value.non_retryable and "503" in str(failed.value), failed.value
    assert fake_openai.burst_answers[503] == 1  # one request an attempt: the policy's count is the server's


@pytest.mark.timeout(180)
async def test_a_worker_killed_mid_experiment_costs_no_case_and_starts_none_twice(
    client: Client, engine: AsyncEngine, settings: Settings
):
    """Four cases of a slow agent, two at a time; the worker process dies while both are in their
    tool. On a new worker: every case has one result and one run, under its derived id, and no run
    was started twice."""
    markers = settings.resolved_workspace / PONDER_STARTED
    env = worker_env(settings)
    workers = [await asyncio.to_thread(spawn_worker, env)]
    try:
        wp = Waypoint(client, engine, settings)
        lines = [json.dumps({"task": f"topic {i}", "expected_output": f"pondered topic {i}"}) for i in range(4)]
        await wp.evals.create_dataset("topics", lines=lines)
        exp = await wp.evals.start_experiment("topics", agent="ponderer", concurrency=2, scorers=["exact"])
        exp_id = exp.experiment_id

        async def both_in_their_tool() -> bool:
            return markers.exists() and sum(p.name.endswith("-1") for p in markers.iterdir()) == 2

        await eventually(both_in_their_tool, timeout=60, what="two case runs in their tool")
        kill(workers[-1])
        workers.append(await asyncio.to_thread(spawn_worker, env))
        report = await wp.evals.wait(exp_id, timeout=120)
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)

    assert report.experiment.status == ExperimentStatus.COMPLETED
    derived = [experiment_run_id(exp_id, i, 0) for i in range(4)]
    assert [(r.index, r.run_id, r.status, r.scores["exact"]["value"]) for r in report.results] == [
        (i, derived[i], CaseStatus.SCORED, 1.0) for i in range(4)
    ]
    killed = sorted(p.name.rsplit("-", 1)[0] for p in markers.iterdir() if p.name.endswith("-2"))
    assert len(killed) == 2  # the two calls the kill interrupted ran again...
    async with engine.connect() as conn:
        results = await conn.scalar(
            select(func.count()).select_from(experiment_results).where(experiment_results.c.experiment_id == exp_id)
        )
        tagged = list(
            (
                await conn.execute(select(runs.c.run_id).where(runs.c.batch_id == exp_id).order_by(runs.c.run_id))
            ).scalars()
        )
        started = list(
            (
                await conn.execute(
                    select(events.c.run_id, func.count())
                    .where(events.c.run_id.in_(derived), events.c.kind == "run_started")
                    .group_by(events.c.run_id)
                    .order_by(events.c.run_id)
                )
            ).all()
        )
    assert results == 4
    assert tagged == derived  # ...in the same runs: one run per case
    assert [tuple(r) for r in started] == [(run_id, 1) for run_id in derived]
    history = await client.get_workflow_handle(exp_id).fetch_history()
    children = [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
    assert sorted(children) == derived  # and no case run was started twice
