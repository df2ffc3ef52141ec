"""Shared by the evaluation tests: recorded demo runs, a dataset of them, a finished experiment, an
LLM judge and the verdict the fake model gives as it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from waypoint.client import ExperimentReport, Waypoint
from waypoint.evals.types import ScorerSpec
from waypoint.testing.fake_openai import Turn

DEMO_TASK = "Read every note, count its words and write report.md"
JUDGE = ScorerSpec("judge", {"rubric": "Does the answer name the report and its total?", "model": "openai:judge"})
VERDICT = Turn(content=json.dumps({"score": 0.8, "reason": "names the report, not each note"}))


async def demo_runs(wp: Waypoint, count: int = 2) -> list[str]:
    """`count` finished runs of the demo agent (scripted: offline, a few steps each)."""
    ids = [await wp.start_run(f"{DEMO_TASK} (#{i})", agent="demo") for i in range(count)]
    for run_id in ids:
        assert (await wp.result(run_id)).status == "completed"
    return ids


async def finished_experiment(
    wp: Waypoint, dataset: str = "notes", *, runs: int = 2, timeout: float = 120, **options: Any
) -> ExperimentReport:
    """A dataset made from `runs` demo runs, and an experiment on it run to its end."""
    ids = await demo_runs(wp, runs)
    await wp.evals.create_dataset(dataset, run_ids=ids)
    options.setdefault("agent", "demo")
    options.setdefault("recorded_tools", True)
    options.setdefault("scorers", ["exact", "trajectory", "mentions_report"])
    exp = await wp.evals.start_experiment(dataset, **options)
    return await asyncio.wait_for(wp.evals.wait(exp.experiment_id), timeout)
