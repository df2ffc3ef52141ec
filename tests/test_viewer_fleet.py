"""The fleet page and a live run tree in the web viewer, in Debian's chromium (fixtures and helpers of
test_viewer): a run's tree shows its children with status, steps, cost and links, and follows a child
that ends without a reload; /ui/fleet shows what GET /v1/fleet counts (a 429 under its model key),
another tenant's page shows none of the first tenant's costs or runs, and both pages pass the a11y check."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests import a11y
from tests.agents import add, listener
from tests.browser import logged_in, needs_browser, shot
from tests.conftest import ApiServer
from tests.helpers import eventually, waypoint
from waypoint.agents import Agent, AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.names import child_run_id
from waypoint.testing.capacity import rate_limited
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn

pytestmark = pytest.mark.postgres

KEY = "openai:fake-model"  # the `metered` test agent's model


# The first child's answer waits until the test has seen its page show the child running (the
# worker runs in the test's event loop): the page then has an end to follow, however long it took to load.
PAGE_SAW_THE_CHILD = asyncio.Event()


async def _done_once_seen(messages: list) -> ScriptedTurn:
    await PAGE_SAW_THE_CHILD.wait()
    return ScriptedTurn(content="the sum is 3")


quick_child = Agent(
    name="quick_child",
    description="Adds, then answers once told to.",
    instructions="Add numbers.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("add", {"a": 1, "b": 2})]),
            ScriptedTurn(tool_calls=[("add", {"a": 1, "b": 2})]),
            _done_once_seen,
        ]
    ),
    tools=(add,),
)
# Calls quick_child, then a listener that runs until the lead is cancelled: the lead stays live
# after its first child ends, so its page must follow that end in place.
lead = Agent(
    name="fleet_lead",
    instructions="Delegate.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("quick_child", {"task": "add 1 and 2"})]),
            ScriptedTurn(tool_calls=[("listener", {"task": "count"})]),
            ScriptedTurn(content="done"),
        ]
    ),
    agents=(quick_child, listener),
)


async def _row_of(wp: Waypoint, run_id: str):
    try:
        return await wp.run(run_id)
    except NotFound:  # its row comes with its first activity
        return None


@needs_browser
@pytest.mark.timeout(180)  # a browser, a stack, a worker and three runs under CI load; a hang still fails
async def test_a_live_tree_shows_its_children_and_follows_one_that_ends(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
):
    wp = Waypoint(client, engine, settings)
    PAGE_SAW_THE_CHILD.clear()
    async with build_worker(client, engine, settings, AgentRegistry([lead])):
        _, page = await logged_in(browser, contexts, api)
        await page.set_viewport_size({"width": 1280, "height": 800})
        run_id = await wp.start_run("delegate", agent="fleet_lead")
        first, second = child_run_id(run_id, 1, 0), child_run_id(run_id, 2, 0)

        async def first_running() -> bool:
            row = await _row_of(wp, first)
            return row is not None and row.status == "running"

        await eventually(first_running, timeout=60, what="the first child running")
        await page.goto(f"/ui/runs/{run_id}")
        await page.evaluate("window.notReloaded = true")
        row = page.locator(f"#tree tr[data-run='{first}']")
        await row.wait_for()
        assert await row.locator(f"a[href='/ui/runs/{first}']").inner_text() == first
        assert "quick_child" in await row.inner_text()
        assert "running" in await row.locator("[data-col=status]").inner_text()
        PAGE_SAW_THE_CHILD.set()

        async def shown_completed() -> bool:
            return "completed" in await row.locator("[data-col=status]").inner_text()

        await eventually(shown_completed, timeout=60, what="the child's end on its caller's page")
        done = await wp.run(first)
        assert int(await row.locator("[data-col=steps]").inner_text()) == done.steps == 3
        assert await row.locator("[data-col=cost]").inner_text() == f"{done.cost_usd:.4f}"
        later = page.locator(f"#tree tr[data-run='{second}']")
        await later.wait_for()  # the next child joins the table as it starts
        assert await later.get_attribute("data-depth") == "1"
        assert await page.evaluate("window.notReloaded") is True  # followed in place, not reloaded
        await page.evaluate("window.scrollTo(0, 0)")
        await shot(page, "tree-live")
        # The page reloads at the end (tree.js may show the end first): the check waits for the
        # reload, after which the finished tree holds still for the a11y check's Tab walk.
        async with page.expect_navigation():
            await wp.cancel(run_id, "seen enough")
        assert (await wp.result(run_id)).status == "cancelled"
        await page.locator(f"#tree tr[data-run='{run_id}'] .status-cancelled").wait_for()
        assert await a11y.problems(page) == []


@pytest.fixture
def throttling_fake(fake_openai: FakeOpenAI) -> FakeOpenAI:
    """The provider answers the first call 429 (retry at once), then answers."""
    fake_openai.answer(Reply(429, rate_limited(0, "test"), {"retry-after": "0"}), Turn(content="the sum is 3"))
    return fake_openai


@needs_browser
@pytest.mark.timeout(180)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_fleet_page_counts_what_the_api_counts_and_only_the_tenants_own(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    worker,
    throttling_fake: FakeOpenAI,
    settings: Settings,
    client: Client,
    engine: AsyncEngine,
):
    wp = Waypoint(client, engine, settings)
    metered = await wp.start_run("add 1 and 2", agent="metered")
    scripted = await wp.start_run("add 2 and 3", agent="calculator")
    for run_id in (metered, scripted):
        assert (await wp.result(run_id)).status == "completed"

    api_stats = (await api.http.get("/v1/fleet", params={"period": "1h"})).json()
    assert api_stats["totals"]["runs"] == 2
    assert api_stats["by_status"] == {"completed": 2}
    steps = (await wp.run(metered)).steps + (await wp.run(scripted)).steps
    assert api_stats["totals"]["steps"] == steps
    key = next(k for k in api_stats["model_keys"] if k["key"] == KEY)
    assert (key["own_calls"], key["own_failed"], key["own_throttled"]) == (1, 1, 1)  # the 429, under its key
    assert key["throttled"] >= 1 and key["calls"] >= 1  # every tenant's calls of the key
    assert {c["agent"] for c in api_stats["costs"]} == {"metered", "calculator"}
    assert {r["run_id"] for r in api_stats["slowest"]} == {metered, scripted}
    cli = json.loads((await waypoint(settings, "fleet", "--period", "1h", "--json")).out)
    assert cli["totals"] == api_stats["totals"] and cli["model_keys"][0]["key"] == api_stats["model_keys"][0]["key"]
    bad = await api.http.get("/v1/fleet", params={"period": "2y"})
    assert bad.status_code == 422
    refused_cli = await waypoint(settings, "fleet", "--period", "2y")
    assert refused_cli.code == 1 and refused_cli.err.strip() == (
        "error: unknown period '2y': use one of 1h, 6h, 24h, 7d, 30d"
    ), refused_cli.err
    table = (await waypoint(settings, "fleet", "--period", "1h")).out
    assert "Slowest runs" in table and "Cost per day and agent" in table

    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size({"width": 1280, "height": 900})
    await page.click("nav[aria-label=main] a:text-is('Fleet')")
    await page.wait_for_url("**/ui/fleet")
    await page.select_option("#period", "1h")
    await page.click("button:text-is('Show')")
    await page.wait_for_url("**/ui/fleet?period=1h")
    assert await page.locator("#total-runs").inner_text() == "2"
    assert await page.locator("#total-steps").inner_text() == str(steps)
    assert await page.locator("#by-status [data-status=completed]").inner_text() == "2"
    key_row = page.locator(f"#keys-table tr[data-key='{KEY}']")
    for col in ("calls", "failed", "throttled", "own_calls", "own_throttled"):
        assert await key_row.locator(f"[data-col={col}]").text_content() == str(key[col]), col
    assert await page.locator("#runs-chart rect").count() >= 1 and await page.locator("#keys-chart rect").count() >= 2
    for table in ("slowest-table", "costliest-table"):
        assert await page.locator(f"#{table} a[href='/ui/runs/{metered}']").count() == 1
    assert await page.locator("#cost-table tr[data-agent=metered]").count() == 1
    assert await a11y.problems(page) == []
    await page.evaluate("window.scrollTo(0, 0)")  # the a11y check's Tab walk scrolled it
    await shot(page, "fleet")
    await page.locator("summary:text-is('Model keys as a table')").click()
    assert await key_row.is_visible()  # the chart's numbers, behind its toggle
    await page.locator(f"#slowest-table a[href='/ui/runs/{metered}']").click()
    await page.wait_for_url(f"**/ui/runs/{metered}")
    refused = await page.goto("/ui/fleet?period=2y")
    assert refused is not None and refused.status == 400
    assert "unknown period '2y'" in await page.locator("main").inner_text()

    other_key, _ = await wp.keys.create(f"other-{settings.tenant}", "fleet test")
    _, other = await logged_in(browser, contexts, api, other_key)
    await other.goto("/ui/fleet?period=1h")
    assert await other.locator("#total-runs").inner_text() == "0"
    assert await other.locator("#cost-table tr[data-agent]").count() == 0  # none of the first tenant's costs
    text = await other.locator("main").inner_text()
    assert metered not in text and scripted not in text
    shared = other.locator(f"#keys-table tr[data-key='{KEY}']")  # the key is shared: shown, with none of it theirs
    assert await shared.locator("[data-col=own_calls]").text_content() == "0"
    assert int(await shared.locator("[data-col=throttled]").text_content()) >= 1
    assert await a11y.problems(other) == []
