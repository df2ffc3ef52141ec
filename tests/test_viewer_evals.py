"""Evaluations in the web viewer: the experiments page, an experiment's summary and per-case table
whose run links drill down into each case's run, the comparison of two experiments, and a running
experiment's page reloading itself. In Debian's chromium through Playwright (with the basic
accessibility check) and over plain HTTP, against a real uvicorn, worker, Temporal and Postgres."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests import a11y
from tests.browser import logged_in, needs_browser, shot, sign_in
from tests.conftest import ApiServer
from tests.evals_helpers import finished_experiment
from tests.helpers import eventually
from waypoint.client import Waypoint

pytestmark = pytest.mark.postgres


@needs_browser
@pytest.mark.timeout(180)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_experiment_pages_drill_down_into_a_cases_run(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    client: Client,
    engine: AsyncEngine,
    worker,
):
    wp = Waypoint(client, engine, api.settings)
    report = await finished_experiment(wp)
    exp_id = report.experiment.experiment_id
    other = await wp.evals.rescore(exp_id, scorers=["trajectory:mode=in_order", "mentions_report"])
    await asyncio.wait_for(wp.evals.wait(other.experiment_id), 60)
    first_case = report.results[0]

    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size({"width": 1280, "height": 800})
    await page.click("nav[aria-label=main] >> text=Experiments")
    await page.wait_for_url("**/ui/experiments")
    row = page.locator(f"tr[data-experiment='{exp_id}']")
    assert "notes@1" in await row.inner_text() and "completed" in await row.inner_text()
    assert await row.locator("[data-col=done]").inner_text() == "2/2"
    means = await row.locator("[data-col=means]").inner_text()
    assert "exact 1.000" in means and "trajectory 1.000" in means and "mentions_report 0.000" in means
    assert await a11y.problems(page) == []

    await page.click(f"a[href='/ui/experiments/{exp_id}']")
    await page.wait_for_url(f"**/ui/experiments/{exp_id}")
    assert await page.locator("tr[data-scorer=exact] [data-col=mean]").inner_text() == "1.000"
    assert await page.locator("tr[data-scorer=exact] [data-col=pass]").inner_text() == "100% (2/2)"
    assert await page.locator("tr[data-scorer=mentions_report] [data-col=pass]").inner_text() == "0% (0/2)"
    assert "0 errored" in await page.locator("#usage").inner_text()
    case = page.locator(f"tr[data-case='{first_case.case_id}']")
    assert await case.locator("td[data-scorer=exact]").inner_text() == "1.000 ✓ pass"
    assert await case.locator("td[data-scorer=mentions_report]").inner_text() == "0.000 ✗ fail"
    assert "scored" in await case.inner_text()
    assert not await page.locator("meta[http-equiv=refresh]").count()  # it ended: nothing to follow
    await shot(page, "experiment")  # before the check, whose Tab presses scroll the page
    assert await a11y.problems(page) == []

    # the comparison with the rescoring, offered on the page (same dataset version)
    await page.click(f"#compare-with a[href$='/compare/{other.experiment_id}']")
    await page.wait_for_url(f"**/ui/experiments/{exp_id}/compare/{other.experiment_id}")
    delta = await page.locator("table.compare tr[data-scorer=mentions_report]").inner_text()
    assert "0.000" in delta and "no" in delta  # the same runs scored alike: all ties, not significant
    assert not await page.locator("table.compare tr[data-scorer=exact]").count()  # not a scorer of B
    # each case: linked to the recorded run it was made from, its two answers side by side, each linked to its run
    rescored = await wp.evals.report(other.experiment_id)
    b_case = next(r for r in rescored.results if r.index == first_case.index)
    case_row = page.locator(f"table.compare-cases tr[data-case='{first_case.case_id}']")
    assert await case_row.locator("[data-col=case] a").get_attribute("href") == f"/ui/runs/{first_case.case_id}"
    sides = {}
    for side, result in (("a", first_case), ("b", b_case)):
        cell = case_row.locator(f"td.output[data-side={side}]")
        assert await cell.locator("a").first.get_attribute("href") == f"/ui/runs/{result.run_id}"
        output = (await wp.run(result.run_id)).output or ""
        assert output and output[:40] in await cell.inner_text()
        sides[side] = await cell.bounding_box()
    assert sides["a"] and sides["b"] and sides["a"]["y"] == sides["b"]["y"]  # one row...
    assert sides["a"]["x"] + sides["a"]["width"] <= sides["b"]["x"]  # ...A's answer left of B's
    assert await a11y.problems(page) == []

    # drill down: a case's run link lands on that run's page
    await page.goto(f"/ui/experiments/{exp_id}")
    await page.click(f"tr[data-case='{first_case.case_id}'] [data-col=run] a")
    await page.wait_for_url(f"**/ui/runs/{first_case.run_id}")
    assert first_case.run_id in await page.locator("h1").inner_text()


@pytest.mark.timeout(120)
async def test_a_running_experiments_page_reloads_itself_and_errors_are_pages(
    api: ApiServer, client: Client, engine: AsyncEngine, worker
):
    wp = Waypoint(client, engine, api.settings)
    await wp.evals.create_dataset("waits", lines=['{"task": "add until told to stop"}'])
    exp = await wp.evals.start_experiment("waits", agent="listener", scorers=["steps:max=3"])
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        await sign_in(http, api.key)
        live = await http.get(f"/ui/experiments/{exp.experiment_id}")
        assert live.status_code == 200
        assert '<meta http-equiv="refresh" content="2">' in live.text and "this page reloads itself" in live.text
        listed = await http.get("/ui/experiments")
        assert f'<a href="/ui/experiments/{exp.experiment_id}">' in listed.text and "0/1" in listed.text

        cancelled = await api.http.post(f"/v1/experiments/{exp.experiment_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text

        async def ended() -> bool:
            return (await wp.evals.experiment(exp.experiment_id)).status == "cancelled"

        await eventually(ended, timeout=30, what="the experiment's cancel")
        after = await http.get(f"/ui/experiments/{exp.experiment_id}")
        assert 'http-equiv="refresh"' not in after.text and "status-cancelled" in after.text

        missing = await http.get("/ui/experiments/exp-nope")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
        assert "no experiment" in missing.text
        mismatched = await http.get(f"/ui/experiments/{exp.experiment_id}/compare/exp-nope")
        assert mismatched.status_code == 404 and "text/html" in mismatched.headers["content-type"]
