"""ExperimentWorkflow's logic in Temporal's time-skipping environment: its activities replaced by
doubles registered under the same names, and its case runs by a double workflow registered as
AgentRunWorkflow. How cases are paged, started (once each, under derived ids, `concurrency` at a
time), judged, scored and errored, how a cancel and a continue-as-new end a run of it. What only the
real stack shows (Postgres results, recorded tools, a killed worker) is in tests/test_evals.py.

Most tests take well under a second of wall time; a judge's retried attempts cost about half a
second each, waiting out the retry in the dev server.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.experiment_doubles import CASE_FAIL, CASE_HANG, CaseRunWorkflow, ExperimentDoubles
from tests.ports import reserve_port
from waypoint import retry
from waypoint.evals.types import ExperimentInput, ExperimentResult, FinishInput
from waypoint.names import ExperimentStatus, experiment_run_id
from waypoint.testing import time_skipping
from waypoint.workflows.experiments import PAGE, ExperimentWorkflow

pytestmark = pytest.mark.timeout(60)


@dataclass
class ExperimentBench:
    client: Client
    task_queue: str

    async def start(self, doubles: ExperimentDoubles, **kw: Any) -> WorkflowHandle[Any, ExperimentResult]:
        exp = f"exp-{uuid.uuid4().hex[:8]}"
        return await self.client.start_workflow(
            ExperimentWorkflow.run,
            ExperimentInput(exp, "t", **kw),
            id=exp,
            task_queue=self.task_queue,
        )


@asynccontextmanager
async def bench(client: Client, doubles: ExperimentDoubles) -> AsyncIterator[ExperimentBench]:
    task_queue = f"exp-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client, task_queue=task_queue, workflows=[ExperimentWorkflow, CaseRunWorkflow], activities=doubles.activities()
    ):
        yield ExperimentBench(client, task_queue)


async def children(client: Client, handle: WorkflowHandle[Any, Any], run_id: str | None = None) -> list[str]:
    """The ids of the child runs one run of the workflow started, in order."""
    history = await client.get_workflow_handle(handle.id, run_id=run_id).fetch_history()
    return [
        e.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for e in history.events
        if e.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]


def grid(cases: int, repeat: int = 1) -> list[tuple[int, int]]:
    return [(i, k) for i in range(cases) for k in range(repeat)]


# --- every case, once -------------------------------------------------------------------------------


async def test_every_case_runs_once_under_its_derived_id(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(3, repeat=2))
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles, concurrency=4)
        result = await handle.result()
    exp = handle.id
    ids = [experiment_run_id(exp, i, k) for i, k in grid(3, repeat=2)]
    assert result == ExperimentResult(exp, ExperimentStatus.COMPLETED, cases=6, errored=0)
    # each once; the order is the order their case activities ended in (they run side by side)
    assert sorted(await children(b.client, handle)) == sorted(ids)
    assert sorted(doubles.worked) == sorted(ids)  # each run ran once
    assert sorted((s.index, s.repetition, s.run_id, s.error) for s in doubles.scored) == [
        (i, k, experiment_run_id(exp, i, k), None) for i, k in grid(3, repeat=2)
    ]
    assert doubles.finished == [FinishInput(exp, "t", ExperimentStatus.COMPLETED, None)]


async def test_at_most_concurrency_runs_at_once(ts: WorkflowEnvironment) -> None:
    # Each run waits until three are in flight (two waves of three): a workflow
    # that started more at once would be seen with more.
    doubles = ExperimentDoubles(runs=grid(6), crowd=3, hold=0.2)
    async with bench(ts.client, doubles) as b:
        result = await (await b.start(doubles, concurrency=3)).result()
    assert result.cases == 6
    assert doubles.most_in_flight == 3  # the slots were used, never more of them


async def test_plans_page_after_page_from_where_the_last_ended(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(4, repeat=2), page=3)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles, concurrency=2)
        result = await handle.result()
    assert result.cases == 8
    assert [(tuple(p.after) if p.after else None, p.limit) for p in doubles.plans] == [
        (None, PAGE),
        ((1, 0), PAGE),
        ((2, 1), PAGE),
    ]
    # Every case run once, page by page: within a page its runs start as slots free, in any order.
    planned = [experiment_run_id(handle.id, i, k) for i, k in grid(4, repeat=2)]
    started = await children(b.client, handle)
    assert sorted(started) == sorted(planned)
    pages = [planned.index(run_id) // 3 for run_id in started]
    assert pages == sorted(pages), started


# --- how a case can fail -----------------------------------------------------------------------------


async def test_a_case_whose_run_cannot_be_made_is_errored_and_the_others_go_on(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(3), case_error={1})
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles)
        result = await handle.result()
    assert (result.status, result.cases, result.errored) == (ExperimentStatus.COMPLETED, 3, 1)
    error = doubles.scored_as(1).error
    assert error is not None and error.startswith("the case's run could not be made") and "case 1 has no task" in error
    assert doubles.scored_as(1).run_id is None  # it has no run
    assert [doubles.scored_as(i).error for i in (0, 2)] == [None, None]
    assert len([m for m in doubles.made if m.index == 1]) == 1  # non-retryable: asked once
    assert sorted(await children(b.client, handle)) == [experiment_run_id(handle.id, i, 0) for i in (0, 2)]


async def test_a_case_that_cannot_be_scored_counts_errored_and_the_others_go_on(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(3), score_error={0})
    async with bench(ts.client, doubles) as b:
        result = await (await b.start(doubles)).result()
    assert (result.status, result.cases, result.errored) == (ExperimentStatus.COMPLETED, 3, 1)
    assert sorted(doubles.done()) == [(1, 0), (2, 0)]  # case 0 has no result: a continued run plans it again
    assert doubles.finished[-1].status == ExperimentStatus.COMPLETED


async def test_a_failed_run_is_still_scored(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(2), tasks={0: CASE_FAIL})
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles)
        result = await handle.result()
    assert (result.cases, result.errored) == (2, 0)
    failed = doubles.scored_as(0)
    assert (failed.run_id, failed.error) == (experiment_run_id(handle.id, 0, 0), None)  # its scorers see the run
    child = ts.client.get_workflow_handle(experiment_run_id(handle.id, 0, 0))
    assert (await child.describe()).status == WorkflowExecutionStatus.FAILED


async def test_a_judge_that_recovers_is_retried_until_its_verdict(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(1), judge_failures=2)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles, judges=["rubric"])
        result = await handle.result()
    assert (result.cases, result.errored) == (1, 0)
    assert [(j.judge, j.run_id) for j in doubles.judged] == [("rubric", experiment_run_id(handle.id, 0, 0))] * 3
    assert doubles.scored_as(0).error is None


@pytest.mark.parametrize(
    ("failures", "refuses", "attempts", "why"),
    [
        (1, True, 2, "HTTP 400"),  # a retryable failure, then one that is not
        (99, False, retry.JUDGE_ATTEMPTS, "HTTP 503"),  # every attempt fails: the policy gives up
    ],
    ids=["non-retryable", "attempts-spent"],
)
async def test_a_judge_that_gives_no_verdict_errors_its_case(
    ts: WorkflowEnvironment, failures: int, refuses: bool, attempts: int, why: str
) -> None:
    doubles = ExperimentDoubles(runs=grid(2), judge_failures=failures, judge_refuses=refuses)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles, judges=["rubric"])
        result = await handle.result()
    assert (result.status, result.cases, result.errored) == (ExperimentStatus.COMPLETED, 2, 2)
    for index in (0, 1):
        error = doubles.scored_as(index).error
        assert error is not None and error.startswith("judge 'rubric' gave no verdict") and why in error
        assert len([j for j in doubles.judged if j.index == index]) == attempts
    assert doubles.finished[-1].status == ExperimentStatus.COMPLETED


async def test_a_rescoring_starts_no_run(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(3), rescoring=True)
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles, judges=["rubric"])
        result = await handle.result()
    assert result.cases == 3
    assert await children(b.client, handle) == [] and doubles.made == [] and doubles.worked == []
    # Scored side by side: in any order, each case once, from its recorded run.
    assert sorted((s.index, s.run_id) for s in doubles.scored) == [(i, f"run-{i}-0") for i in range(3)]
    assert sorted(j.run_id or "" for j in doubles.judged) == [f"run-{i}-0" for i in range(3)]


# --- how an experiment ends ---------------------------------------------------------------------


async def test_a_cancelled_experiment_says_so_and_cancels_its_runs(ts: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(3), tasks={0: CASE_HANG})
    async with bench(ts.client, doubles) as b:
        handle = await b.start(doubles, concurrency=1)
        while not doubles.worked:
            await asyncio.sleep(0.02)
        await handle.cancel()
        result = await handle.result()
        child = ts.client.get_workflow_handle(experiment_run_id(handle.id, 0, 0))
        for _ in range(500):
            if (await child.describe()).status != WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.02)
    assert result.status == ExperimentStatus.CANCELLED
    assert doubles.finished == [FinishInput(handle.id, "t", ExperimentStatus.CANCELLED, "cancelled")]
    assert (await child.describe()).status == WorkflowExecutionStatus.CANCELED  # its parent-close policy
    assert [m.index for m in doubles.made] == [0]  # no case started after the cancel


@pytest.fixture(scope="module")
async def short_history() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server that suggests continue-as-new after 60 events (Temporal's default is 4 Ki events,
    which would take hundreds of cases)."""
    sooner = {"limit.historyCount.suggestContinueAsNew": 60}
    async with time_skipping(port=reserve_port(), dynamic_config=sooner) as env:
        yield env


async def test_continues_as_new_and_plans_again_without_the_finished_cases(short_history: WorkflowEnvironment) -> None:
    doubles = ExperimentDoubles(runs=grid(20), page=2)
    async with bench(short_history.client, doubles) as b:
        handle = await b.start(doubles, concurrency=2)
        result = await handle.result()
    exp = handle.id
    fresh = [n for n, p in enumerate(doubles.plans) if p.after is None]
    assert len(fresh) >= 2, doubles.plans  # the first run and at least one continued one
    assert all(doubles.busy_at_plan[n] == 0 for n in fresh)  # it continued with no run in flight
    # each case once over the whole chain: started once, scored once
    ids = [experiment_run_id(exp, i, 0) for i in range(20)]
    assert sorted(doubles.worked) == sorted(ids) and len(doubles.scored) == 20
    first = await children(b.client, handle, run_id=handle.run_id)  # the run that was started, not the last
    assert 0 < len(first) < 20
    assert result.status == ExperimentStatus.COMPLETED and result.cases == 20
    assert doubles.finished == [FinishInput(exp, "t", ExperimentStatus.COMPLETED, None)]
