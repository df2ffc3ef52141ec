"""Sub-agent runs in the web viewer, in Debian's chromium (fixtures and helpers of test_viewer):
the research demo's tree on its run page, a child's link back to the call that started it, the
children a step started with their answers, and the runs list marking sub-agent runs."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests import a11y
from tests.agents import listener
from tests.browser import logged_in, needs_browser, shot
from tests.conftest import ApiServer
from tests.helpers import eventually, research_run
from waypoint.agents import Agent, AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.names import child_run_id

pytestmark = pytest.mark.postgres

# Hands its task to a `listener` sub-agent, which adds slowly until its run is cancelled.
delegator = Agent(
    name="delegator",
    instructions="Hand the work to listener.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("listener", {"task": "count"})]), ScriptedTurn(content="done")]),
    agents=(listener,),
)


@needs_browser
@pytest.mark.timeout(180)  # a browser, a stack, a worker and five runs under CI load; a hang still fails
async def test_run_page_shows_the_tree_and_a_child_links_back_to_its_call(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
):
    wp, run_id = await research_run(client, engine, settings)
    readers = [child_run_id(run_id, 1, i) for i in range(3)]
    writer = child_run_id(run_id, 2, 0)
    tree = await wp.tree(run_id)

    _, page = await logged_in(browser, contexts, api)
    await page.goto(f"/ui/runs/{run_id}")
    rows = page.locator("#tree table.tree tbody tr")
    assert await rows.count() == 5  # the run and its four sub-agent runs, in call order
    assert await rows.evaluate_all("rs => rs.map(r => r.dataset.run)") == [run_id, *readers, writer]
    for child in [*readers, writer]:
        row = page.locator(f"#tree tr[data-run='{child}']")
        assert await row.get_attribute("data-depth") == "1"
        assert await row.locator(f"a[href='/ui/runs/{child}']").inner_text() == child
        assert "completed" in await row.locator("[data-col=status]").inner_text()
    assert "note_reader" in await page.locator(f"#tree tr[data-run='{readers[0]}']").inner_text()
    assert "report_writer" in await page.locator(f"#tree tr[data-run='{writer}']").inner_text()
    totals = await page.locator("#tree tfoot").inner_text()
    assert "5 runs" in totals and f"{tree.totals.tokens:,}" in totals and str(tree.totals.steps) in totals
    assert await a11y.problems(page) == []
    await shot(page, "tree")

    await page.click(f"#tree a[href='/ui/runs/{readers[1]}']")
    await page.wait_for_url(f"**/ui/runs/{readers[1]}")
    caller = page.locator("#run-caller")
    assert "step 1, call 1" in " ".join((await caller.inner_text()).split())
    await caller.locator(f"a[href='/ui/runs/{run_id}/steps/1']").wait_for()
    await caller.locator(f"a[href='/ui/runs/{run_id}']").click()
    await page.wait_for_url(f"**/ui/runs/{run_id}")

    await page.goto(f"/ui/runs/{run_id}/steps/1")
    started = page.locator("section[aria-labelledby=agents-h]")
    assert "Sub-agent runs this step started (3)" in await started.locator("h2").inner_text()
    children = await wp.children(run_id)
    for i, child in enumerate(readers):
        row = started.locator(f"tr[data-run='{child}']")
        assert await row.locator(f"a[href='/ui/runs/{child}']").inner_text() == child
        answer = next(c.output for c in children if c.run_id == child)
        assert answer and answer.startswith("notes/")  # the reader's finding...
        assert answer[:60] in await row.locator(".answer").inner_text()  # ...is the call's answer here
        card = page.locator("section[aria-labelledby=tools-h] .card").nth(i)
        assert await card.locator(f"a[href='/ui/runs/{child}']").count() == 1  # the child beside its call
    assert await a11y.problems(page) == []

    await page.goto("/ui")
    mark = page.locator(f"#runs tr[data-run='{writer}'] .sub-agent")
    assert f"sub-agent of {run_id}" in await mark.inner_text()
    assert await page.locator(f"#runs tr[data-run='{run_id}'] .sub-agent").count() == 0
    await page.check("input[name=roots]")  # only the runs no call started
    await page.click("button:text-is('Filter')")
    await page.wait_for_url("**roots=1*")
    listed = await page.locator("#runs tr[data-run]").evaluate_all("rs => rs.map(r => r.dataset.run)")
    assert run_id in listed and not set(listed) & {*readers, writer}
    assert await page.locator("input[name=roots]").is_checked()
    assert await a11y.problems(page) == []

    other_key, _ = await wp.keys.create(f"other-{settings.tenant}", "viewer test")
    _, other = await logged_in(browser, contexts, api, other_key)  # another tenant sees none of the tree
    for path in (f"/ui/runs/{run_id}/tree", f"/ui/runs/{readers[0]}", f"/ui/runs/{run_id}/steps/1"):
        assert (await other.request.get(path)).status == 404, path


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_a_live_runs_tree_follows_its_sub_agent_without_a_reload(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
):
    """A sub-agent run starts and steps inside one step of its caller: nothing in the caller's log
    says so, yet the caller's page shows the child appear and its steps grow, with no reload."""
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, AgentRegistry([delegator])):
        _, page = await logged_in(browser, contexts, api)
        run_id = await wp.start_run("count for me", agent="delegator")
        child = child_run_id(run_id, 1, 0)

        async def has_row() -> bool:
            try:
                await wp.run(run_id)
            except NotFound:
                return False
            return True

        await eventually(has_row, timeout=30, what="the run's row")
        await page.goto(f"/ui/runs/{run_id}")
        await page.evaluate("window.notReloaded = true")
        steps = page.locator(f"#tree tr[data-run='{child}'] [data-col=steps]")
        await steps.wait_for()  # the child's row, put in by tree.js if the page came before the child
        first = int(await steps.inner_text())

        async def grown() -> bool:
            return int(await steps.inner_text()) >= first + 2

        await eventually(grown, timeout=30, what="the child's steps growing on its caller's page")
        assert await page.evaluate("window.notReloaded") is True  # refreshed in place, not reloaded
        assert await page.locator("#tree").is_visible()
        await wp.cancel(run_id, "seen enough")

        async def ended() -> bool:
            return (await wp.run(child)).status == "cancelled"

        await eventually(ended, timeout=30, what="the child cancelled with its caller")
