"""Scheduled agents in the web viewer: the schedules page (when each fires next, its last runs
linked with their statuses), a schedule's page, "fired by" on a run's page, and the pause, resume
and fire-now forms reaching Temporal. Over HTTP (a real uvicorn, worker, Temporal and Postgres);
the basic accessibility check of both pages in Debian's chromium when there is one."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client, WorkflowExecutionStatus

from tests import a11y
from tests.browser import form_token, logged_in, needs_browser, shot, sign_in
from tests.conftest import ApiServer
from tests.helpers import eventually
from waypoint.client import Waypoint
from waypoint.names import RunStatus

pytestmark = pytest.mark.postgres


async def fired_runs(wp: Waypoint, schedule_id: str, count: int) -> list[str]:
    """The ids of the runs the schedule fired, oldest first, once there are `count` and all ended."""

    async def ended() -> list[str]:
        runs = await wp.runs(schedule_id=schedule_id)
        done = len(runs) == count and all(r.status == RunStatus.COMPLETED for r in runs)
        return [r.run_id for r in reversed(runs)] if done else []

    # A fire goes through Temporal's scheduler, then a worker: generous under CI's load (30 s ran out once).
    return await eventually(ended, timeout=60, what=f"{count} completed run(s) of {schedule_id}")


async def closed(client: Client, run_id: str) -> bool:
    """Whether the run's workflow has closed: its row says `completed` a moment before, and a fire
    while it is open is skipped (the schedule's overlap policy)."""
    return (await client.get_workflow_handle(run_id).describe()).status != WorkflowExecutionStatus.RUNNING


async def paused(client: Client, schedule_id: str) -> bool:
    return (await client.get_schedule_handle(schedule_id).describe()).schedule.state.paused


@pytest.mark.timeout(150)
async def test_schedules_page_lists_next_fires_and_runs_and_its_buttons_reach_temporal(
    api: ApiServer, client: Client, engine: AsyncEngine, worker
):
    wp = Waypoint(client, engine, api.settings)
    made = await wp.schedules.create(agent="calculator", task="add 2 and 3 on schedule", every=3600)
    sid = made.schedule_id
    await client.get_schedule_handle(sid).trigger()  # Temporal fires it
    [first] = await fired_runs(wp, sid, 1)
    row = await wp.schedules.get(sid)

    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        await sign_in(http, api.key)
        page = await http.get("/ui/schedules")
        assert page.status_code == 200
        html = page.text
        assert '<a href="/ui/schedules">Schedules</a>' in html  # in the nav
        assert f'<a href="/ui/schedules/{sid}">{sid}</a>' in html and "every 1h" in html
        assert row.next_runs[0].strftime("%Y-%m-%d %H:%M:%S") in html  # the next fire time
        assert f'<a href="/ui/runs/{first}">{first}</a> <span class="status status-completed">' in html
        assert "status-active" in html and f"/ui/schedules/{sid}/pause" in html
        token = form_token(html)

        detail = await http.get(f"/ui/schedules/{sid}")
        assert detail.status_code == 200 and "add 2 and 3 on schedule" in detail.text
        assert f'href="/ui/runs/{first}"' in detail.text
        run_page = await http.get(f"/ui/runs/{first}")
        assert f'schedule <a href="/ui/schedules/{sid}">{sid}</a>' in run_page.text  # fired by

        origin = {"Origin": api.url}
        # a form without the page's token changes nothing
        refused = await http.post(f"/ui/schedules/{sid}/pause", data={}, headers=origin)
        assert refused.status_code == 403 and not await paused(client, sid)

        r = await http.post(f"/ui/schedules/{sid}/pause", data={"csrf": token}, headers=origin, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/schedules?notice=paused")
        assert await paused(client, sid)
        listed = (await http.get("/ui/schedules")).text
        assert "status-paused" in listed and f"/ui/schedules/{sid}/resume" in listed

        form = {"csrf": token, "back": "schedule"}
        r = await http.post(f"/ui/schedules/{sid}/resume", data=form, headers=origin, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith(f"/ui/schedules/{sid}?notice=resumed")
        assert not await paused(client, sid)

        await eventually(lambda: closed(client, first), what=f"the close of {first}'s workflow")
        r = await http.post(f"/ui/schedules/{sid}/trigger", data=form, headers=origin, follow_redirects=False)
        assert r.status_code == 303 and "notice=fired" in r.headers["location"]
        _, second = await fired_runs(wp, sid, 2)
        assert f'href="/ui/runs/{second}"' in (await http.get(f"/ui/schedules/{sid}")).text

        # another tenant's (or no) schedule: the refusal comes back on the page, Temporal untouched
        r = await http.post(
            "/ui/schedules/sched-nope/pause", data={"csrf": token}, headers=origin, follow_redirects=True
        )
        assert r.status_code == 200 and "no schedule &#39;sched-nope&#39;" in r.text
        missing = await http.get("/ui/schedules/sched-nope")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    await wp.schedules.delete(sid)


@needs_browser
@pytest.mark.timeout(120)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_schedules_pages_pass_the_basic_accessibility_check(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    client: Client,
    engine: AsyncEngine,
    worker,
):
    wp = Waypoint(client, engine, api.settings)
    made = await wp.schedules.create(agent="calculator", task="add on schedule", cron="0 9 * * mon-fri", tz="UTC")
    sid = made.schedule_id
    await client.get_schedule_handle(sid).trigger()
    await fired_runs(wp, sid, 1)
    _, page = await logged_in(browser, contexts, api)
    await page.goto("/ui/schedules")
    assert "cron 0 9 * * mon-fri" in await page.locator("table.schedules").inner_text()
    assert await a11y.problems(page) == []
    await shot(page, "schedules")
    await page.click(f"button[aria-label='Pause schedule {sid}']")  # no script: a plain form post
    await page.wait_for_url("**/ui/schedules?notice=*")
    assert "paused" in await page.locator(f"tr[data-schedule='{sid}'] [data-col=state]").inner_text()
    await page.goto(f"/ui/schedules/{sid}")
    assert await a11y.problems(page) == []
    await wp.schedules.delete(sid)
