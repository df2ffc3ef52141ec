"""The web viewer (/ui) in a real browser: Debian's chromium driven by Playwright, against a real
uvicorn, a real worker, Temporal and Postgres. Nothing downloads a browser: without a chromium
binary these tests skip and say how to install one."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests import a11y
from tests.browser import form_token, logged_in, needs_browser, reached, shot, sign_in, start, visit
from tests.conftest import ApiServer
from tests.helpers import eventually
from waypoint.app.http.ui import session

pytestmark = pytest.mark.postgres


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_runs_page_lists_a_new_run_and_its_step_view(browser, contexts, api: ApiServer, worker):
    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size({"width": 1280, "height": 800})
    run_id = await start(api, "add for the viewer", "calculator")
    await eventually(reached(api, run_id, "completed"), timeout=30)
    await page.goto("/ui?text=for+the+viewer")
    row = page.locator("table.runs tbody tr", has=page.locator(f"a[href='/ui/runs/{run_id}']"))
    await row.wait_for()
    assert "completed" in await row.inner_text()  # status as text, not colour only
    await shot(page, "runs")
    await page.click(f"a[href='/ui/runs/{run_id}']")
    await page.wait_for_url(f"**/ui/runs/{run_id}")
    assert await page.locator("#steps tr[data-step]").count() == 3
    await shot(page, "run")
    await page.click("#steps a:text-is('2')")
    await page.wait_for_url("**/steps/2")
    text = await page.locator("main").inner_text()
    assert "The request the model received" in text and "add for the viewer" in text  # the rebuilt request
    assert "Tool calls (1)" in text
    await shot(page, "step")
    await page.goto(f"/ui/runs/{run_id}/diff?a=1&b=3")
    assert "The answer is 15." in await page.locator("main").inner_text()


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_run_page_shows_a_step_appear_live(browser, contexts, api: ApiServer, worker):
    run_id = await start(api, "count", "listener")

    async def stepped() -> bool:
        r = await api.http.get(f"/v1/runs/{run_id}")
        return r.status_code == 200 and r.json()["steps"] >= 1

    await eventually(stepped, timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await page.goto(f"/ui/runs/{run_id}")
    first = await page.locator("#steps tr[data-step]").count()
    await page.evaluate("window.notReloaded = true")
    await page.locator(f"#steps tr[data-step='{first + 2}']").wait_for()  # appended by the script
    assert await page.evaluate("window.notReloaded") is True  # live, not a reload
    await page.fill("#cancel-reason", "seen enough")
    await page.click("button:text-is('Cancel')")
    await page.wait_for_url("**notice=*")
    assert "cancel asked" in await page.locator(".notice").inner_text()
    assert await eventually(reached(api, run_id, "cancelled"), timeout=30) == "cancelled"


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_approve_unblocks_a_waiting_run_and_refusals_are_messages(browser, contexts, api: ApiServer, worker):
    run_id = await start(api, "delete two files", "careful")
    await eventually(reached(api, run_id, "waiting_approval"), timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await visit(page, f"/ui/runs/{run_id}")
    assert "waiting approval" in await page.locator("#run-status").inner_text()
    await page.click("form.approval button:text-is('Approve')")
    assert "approved" in await page.locator(".notice").inner_text()

    async def second_wait() -> bool:
        r = (await api.http.get(f"/v1/runs/{run_id}")).json()
        pending = (r.get("live") or {}).get("pending_approvals") or []
        return r["status"] == "waiting_approval" and bool(pending) and pending[0]["step"] == 2

    await eventually(second_wait, timeout=30)  # the first approval let step 1's call run
    await visit(page, f"/ui/runs/{run_id}")
    await page.fill("form.approval input[name=reason]", "keep b")
    await page.click("form.approval button:text-is('Deny')")
    await eventually(reached(api, run_id, "completed"), timeout=30)
    await visit(page, f"/ui/runs/{run_id}")
    assert "keep b" in await page.locator("#run-header").inner_text()
    # A refused action is a message on the page, not a traceback.
    await page.fill("#fork-step", "99")
    await page.click("#fork-form button")
    await page.wait_for_url("**refusal=*")
    assert "Refused:" in await page.locator("main").inner_text()


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_fork_from_a_step_creates_a_run_and_jumps_to_it(browser, contexts, api: ApiServer, worker):
    parent = await start(api, "add to fork", "calculator")
    await eventually(reached(api, parent, "completed"), timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await page.goto(f"/ui/runs/{parent}")
    await page.fill("#fork-step", "2")
    await page.fill("#fork-message", "once more")
    await page.click("#fork-form button")
    await page.wait_for_url(lambda url: "/ui/runs/" in url and parent not in url.split("?")[0])
    fork_id = page.url.split("/ui/runs/")[1].split("?")[0]
    assert "forked from" in await page.locator(".notice").inner_text()
    assert parent in await page.locator("#run-header").inner_text()  # lineage link to the parent
    await eventually(reached(api, fork_id, "completed"), timeout=30)
    row = (await api.http.get(f"/v1/runs/{fork_id}")).json()
    assert (row["parent_run_id"], row["fork_step"]) == (parent, 2)
    states = {}
    for run in (fork_id, parent):
        for step in (1, 2):
            states[run, step] = (await api.http.get(f"/v1/runs/{run}/steps/{step}/state")).json()["messages"]
    assert states[fork_id, 1] == states[parent, 1]  # its first steps are the parent's
    assert states[fork_id, 2] == [*states[parent, 2], {"role": "user", "content": "once more"}]
    await page.goto(f"/ui/runs/{parent}")
    assert fork_id in await page.locator("#run-header").inner_text()  # and from the parent to its fork


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_another_tenants_session_gets_a_404_page(browser, contexts, api: ApiServer, worker):
    run_id = await start(api, "mine", "calculator")
    await eventually(reached(api, run_id, "completed"), timeout=30)
    from waypoint.client import Waypoint

    wp = await Waypoint.connect(api.settings, temporal=False)
    try:
        other_key, _ = await wp.keys.create("tenant-b", "viewer test")
    finally:
        await wp.close()
    _, page = await logged_in(browser, contexts, api, other_key)
    response = await page.goto(f"/ui/runs/{run_id}")
    assert response is not None and response.status == 404
    assert "Not found" in await page.locator("h1").inner_text()
    await page.goto("/ui")
    assert run_id not in await page.locator("table.runs").inner_text()  # nor is it listed
    stream = await page.request.get(f"/v1/runs/{run_id}/stream")
    assert stream.status == 404  # the cookie reads only the session's own tenant


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_runs_page_filters_sorts_and_follows_live_statuses(browser, contexts, api: ApiServer, worker):
    """Since/until and sort are form fields the /v1 listing understands; the status of a run on
    the page changes without a reload; the runs page and a live run's page pass the basic
    accessibility check."""
    marker = uuid.uuid4().hex[:8]
    run_id = await start(api, f"count {marker}", "listener")

    async def stepped() -> bool:
        r = await api.http.get(f"/v1/runs/{run_id}")
        return r.status_code == 200 and r.json()["steps"] >= 1

    await eventually(stepped, timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await page.goto("/ui")
    await page.fill("#f-text", marker)
    await page.fill("#f-since", "1h")
    await page.select_option("#f-sort", "oldest")
    await page.click("button:text-is('Filter')")
    await page.wait_for_url("**sort=oldest*")
    row = page.locator(f"#runs tr[data-run='{run_id}']")
    assert "running" in await row.locator("[data-col=status]").inner_text()
    assert await a11y.problems(page) == []

    await page.evaluate("window.notReloaded = true")
    assert (await api.http.post(f"/v1/runs/{run_id}/pause")).status_code == 200
    await row.locator("[data-col=status] .status-paused").wait_for()  # the poll rewrote it
    assert await page.evaluate("window.notReloaded") is True
    await page.goto(f"/ui/runs/{run_id}")  # a live run's page: every action on it
    assert "paused" in await page.locator("#run-status").inner_text()
    assert await a11y.problems(page) == []

    await page.goto(f"/ui?text={marker}&until=2000-01-01")
    assert run_id not in await page.locator("table.runs").inner_text()  # created after that
    await page.goto(f"/ui?text={marker}&since=7d")
    await page.evaluate("window.notReloaded = true")
    assert (await api.http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "seen"})).status_code == 200
    await row.locator("[data-col=status] .status-cancelled").wait_for()
    assert await page.evaluate("window.notReloaded") is True
    assert await row.get_attribute("data-live") == "0"  # finished: no longer asked for
    response = await page.goto("/ui?since=yesterday")
    assert response is not None and response.status == 400
    assert "an ISO date" in await page.locator(".refusal").inner_text()


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_a_large_tool_output_is_fetched_on_demand(browser, contexts, api: ApiServer, worker):
    """A 100 kB tool result (and the same text as a message of the next request) is not in the
    step page: its start and a button that fetches the rest; the step view passes the basic
    accessibility check."""
    run_id = await start(api, "hoard", "hoarder")

    async def two_steps() -> bool:
        r = await api.http.get(f"/v1/runs/{run_id}")
        return r.status_code == 200 and r.json()["steps"] >= 2

    await eventually(two_steps, timeout=60)
    _, page = await logged_in(browser, contexts, api)
    html = await (await page.request.get(f"/ui/runs/{run_id}/steps/2")).text()
    assert "Tool calls (1)" in html and len(html) < 20_000, len(html)  # two 100 kB texts, neither sent
    await page.goto(f"/ui/runs/{run_id}/steps/2")
    tool = page.locator("section[aria-labelledby=tools-h] .card").first
    assert "Show all" in await tool.locator("button").inner_text()
    await tool.locator("button.fetch-full").click()
    await tool.locator("button.fetch-full").wait_for(state="detached")
    full = await tool.locator(".result pre").inner_text()  # the result (its raw record folds apart)
    assert len(full) == 100_000 and "0123456789abcdef" * 100 in full  # the output itself, whole
    message = page.locator("ol.messages button.fetch-full").first  # step 1's output, as step 2 received it
    await message.click()
    await message.wait_for(state="detached")
    assert max(len(t) for t in await page.locator("ol.messages pre").all_inner_texts()) >= 100_000
    assert await a11y.problems(page) == []
    missing = await page.request.get(f"/ui/runs/{run_id}/steps/2/tools/7")
    assert missing.status == 404 and "has 1 tool results" in await missing.text()


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_step_view_shows_recalled_memories_with_their_source(browser, contexts, api: ApiServer, memory_worker):
    first = await start(api, "What is the launch code?", "scout")
    await eventually(reached(api, first, "completed"), timeout=60)

    async def remembered() -> bool:
        return bool((await api.http.get(f"/v1/runs/{first}/memories")).json()["memories"])

    await eventually(remembered, timeout=60)
    second = await start(api, "What is the launch code?", "scout")
    await eventually(reached(api, second, "completed"), timeout=60)
    refs = (await api.http.get(f"/v1/runs/{second}/steps/0/state")).json()["request"]["recalled"]
    assert any(ref["run_id"] == first for ref in refs)
    _, page = await logged_in(browser, contexts, api)
    await page.goto(f"/ui/runs/{second}/steps/1")
    table = page.locator("table.recalled")
    for ref in refs:  # each with its source run and step, linked
        link = table.locator(f"a[href='/ui/runs/{ref['run_id']}/steps/{ref['step']}']")
        assert await link.inner_text() == f"{ref['run_id']} step {ref['step']}"
    assert "ZEBRA-7" in await table.inner_text()  # what was recalled
    await table.locator(f"a[href^='/ui/runs/{first}/steps/']").first.click()
    await page.wait_for_url(f"**/ui/runs/{first}/steps/*")
    assert first in await page.locator("h1").inner_text()


async def test_session_cookies_are_signed_and_only_read(api: ApiServer):
    """Without a browser: a forged or expired cookie is no session, the cookie never makes a /v1
    write, the login page offers no "Log out", and a form needs the page's token and origin."""
    secret = session.secret_of(api.settings.ui_secret)
    good = session.issue(secret, 7)
    assert session.key_in(secret, good) == 7
    assert session.key_in(secret, "8" + good[1:]) is None  # another key's id: the signature says no
    assert session.key_in(secret, session.issue(secret, 7, now=0)) is None  # expired
    async with httpx.AsyncClient(base_url=api.url) as http:
        assert (await http.get("/ui", follow_redirects=False)).status_code == 303
        assert "Log out" not in (await http.get("/ui/login")).text
        bad = await http.post("/ui/login", data={"key": "nope", "csrf": form_token((await http.get("/ui/login")).text)})
        assert bad.status_code == 401 and "unknown or revoked API key" in bad.text
        login = await sign_in(http, api.key)
        cookie = login.headers["set-cookie"].lower()
        assert login.status_code == 303 and "httponly" in cookie and "samesite=strict" in cookie
        page = await http.get("/ui")
        assert page.status_code == 200 and "Log out" in page.text
        assert (await http.get("/v1/runs")).status_code == 200  # reads with the cookie
        write = await http.post("/v1/runs", json={"task": "x", "agent": "calculator"})
        assert write.status_code == 401  # writes need the key
        token = form_token(page.text)
        foreign = await http.post("/ui/logout", data={"csrf": token}, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403 and "evil.example" in foreign.text
        assert (await http.post("/ui/logout", data={}, headers={"Origin": api.url})).status_code == 403
        assert (await http.get("/ui")).status_code == 200  # neither logged out
        out = await http.post("/ui/logout", data={"csrf": token}, headers={"Origin": api.url}, follow_redirects=False)
        assert out.status_code == 303


async def test_revoking_a_key_ends_its_viewer_sessions_at_once(api: ApiServer):
    from waypoint.client import Waypoint

    wp = await Waypoint.connect(api.settings, temporal=False)
    try:
        key, row = await wp.keys.create(api.settings.tenant, "to revoke")
        async with httpx.AsyncClient(base_url=api.url) as http:
            assert (await sign_in(http, key)).status_code == 303
            assert (await http.get("/ui")).status_code == 200
            assert (await http.get("/v1/runs")).status_code == 200
            await wp.keys.revoke(str(row.id))  # what `waypoint keys revoke` does
            page = await http.get("/ui", follow_redirects=False)
            assert page.status_code == 303 and page.headers["location"].startswith("/ui/login")
            listing = await http.get("/v1/runs")
            assert listing.status_code == 401 and "revoked" in listing.json()["error"]["message"]
    finally:
        await wp.close()


async def test_a_bad_path_or_query_value_is_an_html_page(api: ApiServer):
    async with httpx.AsyncClient(base_url=api.url) as http:
        await sign_in(http, api.key)
        for path in ("/ui/runs/r-1/steps/two", "/ui/runs/r-1/diff?a=one&b=2", "/ui/runs/r-1/rows?after=-1"):
            r = await http.get(path)
            assert r.status_code == 422 and r.headers["content-type"].startswith("text/html"), (path, r.text)
            assert "the request does not fit this endpoint" in r.text and "Log out" in r.text
        missing = await http.get("/ui/no-such-page")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")


@pytest.mark.timeout(90)
async def test_forms_from_another_site_are_refused_under_dev(client, engine, settings, worker):
    """`waypoint dev` has no keys and no session: a form posted by another site's page, or
    without the token the viewer's page carries, is a 403 page and forks nothing; the /v1 API
    refuses a write from another site's page too; the viewer's own form works."""
    from waypoint.app.http.server import api_server, start_api, stop_api, url_of
    from waypoint.client import Waypoint

    server = api_server(settings, host="127.0.0.1", port=0, auth=False, waypoint=Waypoint(client, engine, settings))
    task = await start_api(server)
    try:
        url = url_of(server)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            started = await http.post("/v1/runs", json={"task": "add to fork", "agent": "calculator"})
            parent = started.json()["run_id"]

            def completed(run_id: str):
                async def probe() -> bool:
                    r = await http.get(f"/v1/runs/{run_id}")
                    return r.status_code == 200 and r.json()["status"] == "completed"

                return probe

            await eventually(completed(parent), timeout=30)
            token = form_token((await http.get(f"/ui/runs/{parent}")).text)
            fork = f"/ui/runs/{parent}/fork"
            evil = {"Origin": "http://evil.example"}
            r = await http.post(fork, data={"step": "1", "csrf": token}, headers=evil)
            assert r.status_code == 403 and r.headers["content-type"].startswith("text/html")
            r = await http.post(fork, data={"step": "1"}, headers={"Origin": url})
            assert r.status_code == 403 and "CSRF token" in r.text
            r = await http.post(fork, data={"step": "1", "csrf": "0" * 64}, headers={"Referer": f"{url}/ui"})
            assert r.status_code == 403
            r = await http.post(f"/v1/runs/{parent}/fork", json={"step": 1}, headers=evil)
            assert r.status_code == 403 and r.json()["error"]["code"] == "cross_origin"
            r = await http.post(
                fork, data={"step": "1", "csrf": token}, headers={"Origin": url}, follow_redirects=False
            )
            assert r.status_code == 303, r.text
            forked = r.headers["location"].split("/ui/runs/")[1].split("?")[0]
            await eventually(completed(forked), timeout=30)
            lineage = (await http.get(f"/v1/runs/{parent}/lineage")).json()["lineage"]
            assert [x["run_id"] for x in lineage if x["relation"] == "fork"] == [forked]  # the refused forked nothing
    finally:
        await stop_api(server, task)


@pytest.mark.timeout(90)
async def test_dev_mode_needs_no_login_and_shows_memory_and_compactions(api: ApiServer, memory_worker, settings):
    """With auth off (`waypoint dev`) the pages open without a session; the memory tab lists the
    run's episodes and searches the tenant's memory; the compactions tab lists what each pass did."""
    from waypoint.app.http.server import api_server, start_api, stop_api, url_of

    wp, _ = memory_worker
    run_id = await start(api, "What is the launch code?", "scout")
    await eventually(reached(api, run_id, "completed"), timeout=60)

    async def remembered() -> bool:
        return bool((await api.http.get(f"/v1/runs/{run_id}/memories")).json()["memories"])

    await eventually(remembered, timeout=60)
    assert (await api.http.post(f"/v1/runs/{run_id}/compact")).json()["selected"] == 1
    listed = (await api.http.get(f"/v1/runs/{run_id}/compactions")).json()["compactions"]
    server = api_server(settings, host="127.0.0.1", port=0, auth=False, waypoint=wp)
    task = await start_api(server)
    try:
        async with httpx.AsyncClient(base_url=url_of(server), timeout=60) as http:
            runs = await http.get("/ui", follow_redirects=False)
            assert runs.status_code == 200 and run_id in runs.text  # no login page
            memory = await http.get(f"/ui/runs/{run_id}/memory", params={"q": "launch code"})
            assert memory.status_code == 200 and 'role="alert"' not in memory.text
            assert "None yet." not in memory.text and f"{run_id} step" in memory.text  # episodes and a hit
            compactions = await http.get(f"/ui/runs/{run_id}/compactions")
            assert compactions.status_code == 200 and ("No compactions" in compactions.text) == (not listed)
            for c in listed:  # the page shows what the API lists
                assert f"{c['tokens_before']} → {c['tokens_after']}" in compactions.text
    finally:
        await stop_api(server, task)
