"""The run page's waterfall and charts in a real browser (Debian's chromium through Playwright),
against a real uvicorn, worker, Temporal and Postgres, and the API they are drawn from
(GET /v1/runs/{id}/timeline): a retried model call, parallel tool calls, an approval wait, a
sub-agent run expanding in place, a live run growing, charts whose numbers are the API's."""

from __future__ import annotations

import pytest

from tests import a11y
from tests.browser import logged_in, needs_browser, reached, start, visit
from tests.conftest import ApiServer
from tests.helpers import eventually
from waypoint.testing.fake_openai import Reply, Turn

pytestmark = pytest.mark.postgres


async def timeline(api: ApiServer, run_id: str, **params: int) -> dict:
    r = await api.http.get(f"/v1/runs/{run_id}/timeline", params=params)
    assert r.status_code == 200, r.text
    data: dict = r.json()
    return data


async def bars_of(page, step: int) -> list[dict]:
    """The bars the page drew in a step's row: kind, lane, attempt, their tooltip."""
    row = page.locator(f".waterfall .wf-row[data-step='{step}'][data-depth='0']")
    await row.wait_for()
    return await row.locator(".wf-bar").evaluate_all(
        "(bars) => bars.map((b) => ({kind: b.dataset.kind, lane: Number(b.dataset.lane),"
        " attempt: b.dataset.attempt ? Number(b.dataset.attempt) : null, title: b.title,"
        " top: b.getBoundingClientRect().top, left: b.getBoundingClientRect().left}))"
    )


@needs_browser
@pytest.mark.timeout(150)
async def test_a_retried_model_call_and_parallel_tools_are_bars_and_the_charts_are_the_apis_numbers(
    browser, contexts, api: ApiServer, worker, fake_openai
):
    fake_openai.answer(
        Reply(503, {"error": {"message": "overloaded"}}, {"retry-after-ms": "300"}, delay=0.2),
        Turn(tool_calls=[("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})], prompt_tokens=40, cached_tokens=16),
        Turn(content="3 and 7", prompt_tokens=90, completion_tokens=5),
    )
    run_id = await start(api, "add twice", "remote")
    await eventually(reached(api, run_id, "completed"), timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size({"width": 1280, "height": 900})
    await visit(page, f"/ui/runs/{run_id}")
    await page.locator(".waterfall[data-ready='1']").wait_for()

    first = await bars_of(page, 1)
    kinds = [b["kind"] for b in first]
    # Under load an attempt may also time out and be retried: at least the 503's, then the answer.
    assert kinds.count("failed_attempt") >= 1 and kinds.count("retry_wait") >= 1 and kinds.count("model") == 1
    failed = [b for b in first if b["kind"] == "failed_attempt"]
    refused = next(b for b in failed if "HTTP 503" in b["title"])
    assert f"attempt {refused['attempt']}" in refused["title"]
    model = next(b for b in first if b["kind"] == "model")
    assert model["attempt"] > max(b["attempt"] for b in failed) and "40 tokens in, 7 out" in model["title"]
    tools = [b for b in first if b["kind"] == "tool"]
    assert sorted(b["lane"] for b in tools) == [0, 1]  # parallel calls side by side, one lane each
    assert tools[0]["top"] != tools[1]["top"]

    api_steps = (await timeline(api, run_id))["steps"]
    assert [s["step"] for s in api_steps] == [1, 2]
    api_kinds = [b["kind"] for b in api_steps[0]["bars"]]
    assert sorted(api_kinds) == sorted(kinds)  # the page drew what the API says

    await page.click("#chart-data summary")
    # The table is built when the toggle first opens: wait for its rows, not just the click.
    await page.wait_for_function(f"document.querySelectorAll('#chart-data tbody tr').length >= {len(api_steps)}")
    cells = await page.locator("#chart-data tbody tr").evaluate_all(
        "(rows) => rows.map((r) => [...r.children].map((c) => c.textContent))"
    )
    expected = [
        [
            str(s["step"]),
            str(s["input_tokens"]),
            str(s["cache_read_tokens"]),
            str(s["output_tokens"]),
            f"{s['cumulative_cost_usd']:.6f}",
            str(s["context_tokens"]),
            "yes" if s["compacted"] else "",
            str(s["model_ms"]),
        ]
        for s in api_steps
    ]
    assert cells == expected
    assert cells[0][1:4] == ["40", "16", "7"] and cells[1][1] == "90"
    assert await page.locator("[data-chart] svg path").count() >= 4  # every chart drew its series
    assert await a11y.problems(page) == []

    await page.locator(".wf-row[data-step='2'] .wf-bar[data-kind='model']").click()
    await page.wait_for_url(f"**/ui/runs/{run_id}/steps/2")


@needs_browser
@pytest.mark.timeout(150)
async def test_an_approval_wait_is_a_bar_while_it_waits_and_after(browser, contexts, api: ApiServer, worker):
    run_id = await start(api, "delete two files", "careful")
    await eventually(reached(api, run_id, "waiting_approval"), timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await visit(page, f"/ui/runs/{run_id}")
    await page.locator(".waterfall[data-ready='1']").wait_for()
    waiting = page.locator(".wf-row.wf-inflight[data-step='1'] .wf-bar[data-kind='approval']")
    assert "waiting for approval: delete_file" in (await waiting.get_attribute("title") or "")
    assert "so far" in (await waiting.get_attribute("title") or "")  # still open

    pending = (await api.http.get(f"/v1/runs/{run_id}")).json()["live"]["pending_approvals"]
    await api.http.post(f"/v1/runs/{run_id}/approve", json={"call_id": pending[0]["call_id"]})

    async def second_wait() -> bool:
        steps = (await timeline(api, run_id))["steps"]
        return len(steps) == 2 and steps[-1]["in_flight"] and any(b["kind"] == "approval" for b in steps[-1]["bars"])

    await eventually(second_wait, timeout=30)
    steps = (await timeline(api, run_id))["steps"]
    waited = [b for b in steps[0]["bars"] if b["kind"] == "approval"]
    assert len(waited) == 1 and not waited[0].get("open") and waited[0]["end_ms"] > waited[0]["start_ms"]
    tool = next(b for b in steps[0]["bars"] if b["kind"] == "tool")
    assert tool["start_ms"] >= waited[0]["end_ms"] - 5  # the call ran after its approval
    await visit(page, f"/ui/runs/{run_id}")
    await page.locator(".wf-row[data-step='1']:not(.wf-inflight) .wf-bar[data-kind='approval']").wait_for()
    await api.http.post(f"/v1/runs/{run_id}/deny", json={})


@needs_browser
@pytest.mark.timeout(150)
async def test_a_live_run_grows_as_its_steps_land(browser, contexts, api: ApiServer, worker):
    run_id = await start(api, "count", "listener")

    async def stepped() -> bool:
        r = await api.http.get(f"/v1/runs/{run_id}/timeline")  # 404 until its worker writes its row
        return r.status_code == 200 and any(not s["in_flight"] for s in r.json()["steps"])

    await eventually(stepped, timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await visit(page, f"/ui/runs/{run_id}")
    await page.locator(".waterfall[data-ready='1']").wait_for()
    drawn = await page.locator(".wf-row:not(.wf-inflight)").count()
    await page.evaluate("window.notReloaded = true")
    later = page.locator(f".wf-row:not(.wf-inflight)[data-step='{drawn + 2}'] .wf-bar[data-kind='model']")
    await later.wait_for()  # drawn from the stream's news, not a reload
    assert await page.evaluate("window.notReloaded") is True
    await page.locator("#chart-data summary").click()
    row = page.locator(f"#chart-data tbody tr[data-step='{drawn + 2}']")
    await row.wait_for()  # the table fills on the details' toggle event, a task after the click
    assert await row.count() == 1
    await api.http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "seen enough"})
    await eventually(reached(api, run_id, "cancelled"), timeout=30)


@needs_browser
@pytest.mark.timeout(150)
async def test_sub_agent_runs_expand_in_place(browser, contexts, api: ApiServer, worker):
    run_id = await start(api, "delegate", "delegator")
    await eventually(reached(api, run_id, "completed"), timeout=60)
    bars = (await timeline(api, run_id))["steps"][0]["bars"]
    children = sorted(b["child_run_id"] for b in bars if b["kind"] == "subagent")
    assert children == [f"{run_id}.1.0", f"{run_id}.1.1", f"{run_id}.1.2"]
    _, page = await logged_in(browser, contexts, api)
    await visit(page, f"/ui/runs/{run_id}")
    await page.locator(".waterfall[data-ready='1']").wait_for()
    button = page.locator(".wf-row[data-step='1'] .wf-expand")
    assert await button.get_attribute("aria-expanded") == "false"
    await button.click()
    child_rows = page.locator(f".wf-row[data-depth='1'][data-run='{run_id}.1.0']")
    await child_rows.first.wait_for()
    assert await child_rows.count() == 3  # the calculator's three steps
    agent = (await api.http.get(f"/v1/runs/{run_id}.1.0")).json()["agent"]
    labels = await child_rows.locator(".wf-label .wf-name").all_inner_texts()
    assert labels == [f"{agent} · 1", f"{agent} · 2", f"{agent} · 3"]  # whose steps, not a piece of a run id
    assert await page.locator(".wf-row[data-step='1'] .wf-expand").get_attribute("aria-expanded") == "true"


async def test_the_timeline_is_the_tenants_own_and_checks_its_input(api: ApiServer, worker):
    run_id = await start(api, "add for the timeline", "calculator")
    await eventually(reached(api, run_id, "completed"), timeout=30)
    data = await timeline(api, run_id)
    assert [s["step"] for s in data["steps"]] == [1, 2, 3] and data["context_budget"] == 16_000
    assert [b["lane"] for b in data["steps"][0]["bars"] if b["kind"] == "tool"] == [0, 1]
    assert [s["step"] for s in (await timeline(api, run_id, after_step=2))["steps"]] == [3]
    assert (await api.http.get(f"/v1/runs/{run_id}/timeline", params={"after_step": -1})).status_code == 422
    wp_key, _ = await _other_tenant_key(api)
    other = await api.http.get(f"/v1/runs/{run_id}/timeline", headers={"Authorization": f"Bearer {wp_key}"})
    assert other.status_code == 404
    schema = (await api.http.get("/openapi.json")).json()
    assert "Timeline" in schema["components"]["schemas"]


async def _other_tenant_key(api: ApiServer) -> tuple[str, object]:
    from waypoint.client import Waypoint

    wp = await Waypoint.connect(api.settings, temporal=False)
    try:
        return await wp.keys.create("tenant-b", "timeline test")
    finally:
        await wp.close()
