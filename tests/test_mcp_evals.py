"""Evaluations through `waypoint mcp` (the SDK's own MCP client over stdio, a real worker, Temporal
and Postgres): the datasets and experiments tools read the tenant's own, start_experiment answers at
once with the id, and `experiment` shows the summary once the experiment has ended."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.evals_helpers import demo_runs, finished_experiment
from tests.helpers import eventually
from tests.mcp_client import READ_TOOLS, WRITE_TOOLS, call, error_of, over_stdio
from waypoint.client import Waypoint
from waypoint.config import Settings

pytestmark = pytest.mark.postgres

EVAL_TOOLS = {"list_datasets", "list_experiments", "experiment", "compare_experiments"}


@pytest.mark.timeout(180)
async def test_an_assistant_starts_an_experiment_and_reads_its_summary(
    client: Client, engine: AsyncEngine, settings: Settings, worker
):
    wp = Waypoint(client, engine, settings)
    theirs = Waypoint(client, engine, settings.model_copy(update={"tenant": "someone-else-evals"}))
    await theirs.evals.create_dataset("hidden", lines=['{"task": "not yours"}'])
    earlier = await finished_experiment(wp, "notes", scorers=["exact", "trajectory"])
    await wp.evals.create_dataset("notes", run_ids=await demo_runs(wp, 1))  # version 2, one case

    async with over_stdio(settings) as reader:
        tools = {t.name for t in (await reader.list_tools()).tools}
        assert EVAL_TOOLS <= tools and "start_experiment" not in tools  # a write: only when configured

    async with over_stdio(settings, WAYPOINT_MCP_WRITE="true") as mcp:
        assert {t.name for t in (await mcp.list_tools()).tools} == READ_TOOLS | WRITE_TOOLS
        datasets = await call(mcp, "list_datasets")
        assert [(d["name"], d["version"], d["versions"]) for d in datasets] == [("notes", 2, 2)]

        started = await call(
            mcp,
            "start_experiment",
            dataset="notes",
            agent="demo",
            recorded_tools=True,
            scorers=["exact", "steps:max=9"],
        )
        exp_id = started["experiment_id"]
        assert started["status"] == "running" and started["dataset_version"] == 2 and started["cases_total"] == 1

        async def ended() -> dict | None:
            found = await call(mcp, "experiment", experiment_id=exp_id, summary_only=True)
            return found if found["experiment"]["status"] != "running" else None

        report = await eventually(ended, timeout=90, interval=0.3, what=f"the end of {exp_id}")
        assert "results" not in report and report["experiment"]["status"] == "completed"
        assert [(s["scorer"], s["mean"], s["n"]) for s in report["summary"]["scorers"]] == [
            ("exact", 1.0, 1),
            ("steps", 1.0, 1),
        ]
        full = await call(mcp, "experiment", experiment_id=exp_id)
        assert [r["run_status"] for r in full["results"]] == ["completed"]
        assert (await wp.evals.experiment(exp_id)).tenant_id == settings.tenant

        listed = await call(mcp, "list_experiments", dataset="notes")
        assert [e["experiment_id"] for e in listed] == [exp_id, earlier.experiment.experiment_id]
        different = await error_of(
            mcp, "compare_experiments", experiment_a=earlier.experiment.experiment_id, experiment_b=exp_id
        )
        assert "different datasets (notes v1, notes v2)" in different
        rescored = await wp.evals.rescore(earlier.experiment.experiment_id, scorers=["trajectory:mode=subset"])
        await wp.evals.wait(rescored.experiment_id, timeout=60)
        compared = await call(
            mcp,
            "compare_experiments",
            experiment_a=earlier.experiment.experiment_id,
            experiment_b=rescored.experiment_id,
        )
        assert [(d["scorer"], d["n"], d["ties"]) for d in compared["scorers"]] == [("trajectory", 2, 2)]

        assert "unknown scorer 'nope'" in await error_of(
            mcp, "start_experiment", dataset="notes", agent="demo", scorers=["nope"]
        )
        assert "no dataset 'hidden'" in await error_of(mcp, "start_experiment", dataset="hidden", agent="demo")
        assert "no experiment" in await error_of(mcp, "experiment", experiment_id="exp-nope")
