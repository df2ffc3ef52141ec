"""The viewer as a person reads it (issue 41), in Debian's chromium through Playwright with the basic
accessibility check on each page: a step's messages, calls and results shown as text and tables with
the raw records behind toggles; a long run's steps a page at a time and a long request's old
messages folded (page heights measured); a step's tool time as wall time with the sum marked; the
waterfall's last axis label inside the axis; the fleet page's colours the status badges' own and
its model-key bars on an axis; the favicon.

Runs are written with the real store (`record_step`, as a worker does) where the test needs many
steps or exact times; a run of the `calculator` agent through the worker where it needs real records."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from tests import a11y
from tests.browser import logged_in, needs_browser, reached, shot, start, visit
from tests.conftest import ApiServer
from tests.helpers import eventually
from waypoint.names import RunStatus
from waypoint.store import RunStore
from waypoint.store.schema import runs, tool_effects
from waypoint.store.steps import NewRun
from waypoint.types import ModelTurn, RunPlan, StepRecord, ToolCall, ToolResult, Usage

pytestmark = pytest.mark.postgres

LONG_STEPS = 200
# Page heights at 1280 px wide. A run's page is its header, waterfall, charts and actions (about
# 1,900 px with a long run's header) and its 50 steps a page (about 29 px a row, 1,450 px): under
# 3,600 px however long the run. With all 200 steps it was 7,477 px, and a 1,500-step run's page
# grew to tens of thousands. A step's page shows its request's last turn open (6 messages at
# most, each folded past 8 lines), the answer and its tool calls: under 2,500 px; step 100 of the
# same run, its 200-odd messages each shown whole, was 13,430 px.
RUN_PAGE_MAX_PX = 3_600
STEP_PAGE_MAX_PX = 2_500
WIDE = {"width": 1280, "height": 800}

HEIGHT = "() => document.documentElement.scrollHeight"


def report(n: int) -> str:
    """A tool's output of a few lines, like a search's (every 10th step's, 12: past the fold)."""
    lines = 12 if n % 10 == 0 else 6
    return "\n".join(f"result {n}.{i}: a line of what the tool found for query {n}" for i in range(lines))


async def new_run(store: RunStore, tenant: str, task: str, agent: str = "calculator") -> str:
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    plan = RunPlan(model="scripted", max_steps=1_000, context_tokens=1_000_000)
    await store.steps.create_run(NewRun(run_id, tenant, agent, task, "Search, then answer.", plan))
    return run_id


async def long_run(store: RunStore, tenant: str, steps: int = LONG_STEPS) -> str:
    """A finished run of `steps` steps, each a search call and its result (every 7th two calls in
    parallel, with their ledger rows: times to show), the last an answer."""
    run_id = await new_run(store, tenant, "Find every mention of the vault, step by step")
    for n in range(1, steps):
        calls = [ToolCall(id=f"c{n}", name="search", arguments=json.dumps({"query": f"vault {n}", "limit": 5}))]
        results = [ToolResult(call_id=f"c{n}", name="search", output=report(n), duration_ms=40 + n * 53 % 300)]
        if n % 7 == 0:
            calls.append(
                ToolCall(id=f"c{n}b", name="fetch", arguments=json.dumps({"url": f"https://vault.example/{n}"}))
            )
            results.append(ToolResult(call_id=f"c{n}b", name="fetch", output=f"page {n}", duration_ms=120))
        turn = ModelTurn(
            model="scripted", content=None, tool_calls=calls, usage=Usage(100 + n, 12), latency_ms=200 + n * 37 % 400
        )
        await store.steps.record_step(StepRecord(run_id, tenant, n, turn, results, context_tokens=1_000_000))
        if len(results) == 2:  # the worker's ledger rows: the second call ended 30 ms after the first
            ended = datetime.now(UTC)
            for i, r in enumerate(results):
                await _ledger(store.engine, run_id, n, i, r.name, ended + timedelta(milliseconds=30 * i), r.duration_ms)
    done = ModelTurn(model="scripted", content="The vault is mentioned in every step.", tool_calls=[], latency_ms=640)
    await store.steps.record_step(StepRecord(run_id, tenant, steps, done, [], context_tokens=1_000_000))
    await store.log.finish_run(tenant, run_id, RunStatus.COMPLETED, "The vault is mentioned in every step.", None)
    return run_id


@needs_browser
@pytest.mark.timeout(240)  # 200 steps written, a browser and a stack under CI load; a hang still fails
async def test_a_long_runs_steps_come_a_page_at_a_time_and_its_old_messages_fold(
    browser, contexts, api: ApiServer, store: RunStore
):
    run_id = await long_run(store, api.settings.tenant)
    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size(WIDE)
    await visit(page, f"/ui/runs/{run_id}")
    await page.locator(".waterfall[data-ready='1']").wait_for()  # the page at its full height
    steps = await page.locator("#steps tr[data-step]").evaluate_all("(rows) => rows.map((r) => +r.dataset.step)")
    assert steps == list(range(1, 51))
    height = await page.evaluate(HEIGHT)
    assert height < RUN_PAGE_MAX_PX, f"the run page is {height} px tall"
    await page.set_viewport_size({"width": 1280, "height": 1000})
    await page.evaluate("document.getElementById('actions-h').scrollIntoView()")  # the steps and their pager
    await shot(page, "long-run")
    await page.set_viewport_size(WIDE)
    pager = page.locator("nav.pager").first
    assert [await a.inner_text() for a in await pager.locator("a").all()] == ["1", "2", "3", "4", "Next →"]
    assert "page 1 of 4" in await pager.inner_text()
    assert await a11y.problems(page) == []

    await pager.locator("a[rel=next]").click()
    await page.wait_for_url(f"**/ui/runs/{run_id}?page=2")
    assert await page.locator("#steps tr[data-step]").first.get_attribute("data-step") == "51"
    assert await page.locator("#steps tr[data-step]").count() == 50
    assert "51–100 of 200" in await page.locator("#timeline-h").inner_text()
    await page.locator("nav.pager").first.locator("a:text-is('4')").click()
    await page.wait_for_url(f"**/ui/runs/{run_id}?page=4")
    assert await page.locator("#steps tr[data-step]").count() == 50
    assert "The vault is mentioned" in await page.locator("#step-200").inner_text()
    beyond = await page.goto(f"/ui/runs/{run_id}?page=5")
    assert beyond is not None and beyond.status == 404
    assert "pick page 1 to 4" in await page.locator("main").inner_text()

    # Step 100: 214 messages in its request; the last turn open, the ones before behind one toggle.
    await visit(page, f"/ui/runs/{run_id}/steps/100")
    height = await page.evaluate(HEIGHT)
    assert height < STEP_PAGE_MAX_PX, f"step 100's page is {height} px tall"
    received = (await api.http.get(f"/v1/runs/{run_id}/steps/99/state")).json()["messages"]
    assert len(received) > 200
    earlier = page.locator("details#earlier")
    assert f"{len(received) - 6} earlier messages" in await earlier.locator("> summary").inner_text()
    assert not await earlier.locator("ol.messages li").first.is_visible()
    shown = page.locator("section[aria-labelledby=req-h] > ol.messages > li")
    assert await shown.count() == 6
    last = shown.last  # step 99's result, whole (6 lines)
    assert "result 99.5" in await last.inner_text()
    result = page.locator("#tool-0 .result details.fold")  # step 100's own result: 12 lines, folded
    assert "result 100.0" in await result.locator("summary").inner_text()
    assert "12 lines" in await result.locator("summary").inner_text()
    assert not await result.locator("pre").is_visible()
    assert await a11y.problems(page) == []
    await earlier.locator("> summary").click()
    assert await earlier.locator("ol.messages li").first.is_visible()
    assert "Search, then answer." in await earlier.locator("ol.messages li").first.inner_text()  # the system prompt
    assert await page.evaluate(HEIGHT) > height  # opened: the old messages are there when asked for


@needs_browser
@pytest.mark.timeout(150)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_a_step_reads_as_roles_text_and_calls_with_the_raw_record_behind_a_toggle(
    browser, contexts, api: ApiServer, worker
):
    run_id = await start(api, "add for the viewer", "calculator")
    await eventually(reached(api, run_id, "completed"), timeout=30)
    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size(WIDE)
    missing: list[str] = []  # what the page asks for and does not get (it asked for /favicon.ico)
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    await visit(page, f"/ui/runs/{run_id}/steps/2")

    messages = page.locator("section[aria-labelledby=req-h] ol.messages > li")
    roles = [await r.inner_text() for r in await messages.locator(".role").all()]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assert "add for the viewer" in await messages.nth(1).inner_text()
    call = messages.nth(2).locator(".call").first  # the model's call of step 1, its arguments as a table
    assert "→ add" in await call.inner_text()
    args = await call.locator("table.fields tr").evaluate_all(
        "(rows) => rows.map((r) => [r.querySelector('th').textContent, r.querySelector('td').textContent])"
    )
    assert args == [["a", "2"], ["b", "3"]]
    assert "result of add" in await messages.nth(3).inner_text() and "5" in await messages.nth(3).inner_text()

    answer = page.locator("section[aria-labelledby=answer-h] .card.answer")
    text = await answer.inner_text()
    assert "scripted" in text and "tokens in" in text and "Calls 1 tool" in text
    assert await answer.locator("a[href='#tool-0']").inner_text() == "add"
    raw = answer.locator("details.raw pre")
    assert "sha256" in (await raw.text_content() or "")  # the record's internals are on the page...
    assert not await raw.is_visible()  # ...behind the toggle
    main = await page.locator("main").inner_text()
    assert "sha256" not in main and '"usage"' not in main and "finish_reason" not in main
    tool = page.locator("#tool-0")
    assert "add" in await tool.locator("h3").inner_text() and "ok" in await tool.locator("h3").inner_text()
    assert await tool.locator(".result pre").inner_text() == "15"
    assert not await tool.locator("details.raw pre").is_visible()
    await shot(page, "step", full_page=True)
    assert await a11y.problems(page) == []
    assert missing == []
    await answer.locator("details.raw summary").click()
    assert await raw.is_visible() and "input_tokens" in await raw.inner_text()
    assert await raw.locator(".j-key").count() > 5  # highlighted JSON


async def _ledger(engine: AsyncEngine, run_id: str, step: int, index: int, name: str, ended, took_ms: int) -> None:
    """A tool call's ledger row that ended at `ended`, having taken `took_ms` (as the worker writes it)."""
    row = {
        "idempotency_key": f"{run_id}:{step}:{index}",
        "run_id": run_id,
        "step": step,
        "call_index": index,
        "tool": name,
        "arguments": "{}",
        "output": "ok",
        "outcome": "ok",
        "duration_ms": took_ms,
        "attempt": 1,
        "created_at": ended,
    }
    async with engine.begin() as conn:
        await conn.execute(insert(tool_effects).values(**row))


@needs_browser
@pytest.mark.timeout(150)  # a browser and a stack under CI load; a hang still fails
async def test_parallel_tool_calls_show_their_wall_time_and_the_axis_keeps_its_last_label(
    browser, contexts, api: ApiServer, store: RunStore, engine: AsyncEngine
):
    """Two calls in parallel, 800 and 900 ms, the second ending 100 ms after the first: the step's
    tools took 900 ms of wall time (the sum, 1,700 ms, marked as such). The run lasted exactly 2 s,
    so the waterfall's axis has a tick at its very end, whose label must stay inside the axis."""
    tenant = api.settings.tenant
    run_id = await new_run(store, tenant, "Fetch two pages at once")
    calls = [
        ToolCall(id="c1_0", name="fetch", arguments='{"url": "a"}'),
        ToolCall(id="c1_1", name="fetch", arguments='{"url": "b"}'),
    ]
    results = [
        ToolResult(call_id="c1_0", name="fetch", output="page a", duration_ms=800),
        ToolResult(call_id="c1_1", name="fetch", output="page b", duration_ms=900),
    ]
    await store.steps.record_step(
        StepRecord(run_id, tenant, 1, ModelTurn(model="scripted", content=None, tool_calls=calls), results)
    )
    await store.steps.record_step(
        StepRecord(run_id, tenant, 2, ModelTurn(model="scripted", content="two pages", tool_calls=[]), [])
    )
    await store.log.finish_run(tenant, run_id, RunStatus.COMPLETED, "two pages", None)
    async with engine.begin() as conn:
        finished = (await conn.execute(select(runs.c.finished_at).where(runs.c.run_id == run_id))).scalar_one()
        await conn.execute(
            update(runs).where(runs.c.run_id == run_id).values(created_at=finished - timedelta(seconds=2))
        )
    first_end = finished - timedelta(milliseconds=500)
    await _ledger(engine, run_id, 1, 0, "fetch", first_end, 800)
    await _ledger(engine, run_id, 1, 1, "fetch", first_end + timedelta(milliseconds=100), 900)

    listed = (await api.http.get(f"/v1/runs/{run_id}/steps")).json()["steps"]
    assert (listed[0]["tools_ms"], listed[0]["tools_wall_ms"]) == (1700, 900)
    assert listed[1]["tools_wall_ms"] is None  # no tool calls: nothing timed

    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size(WIDE)
    await visit(page, f"/ui/runs/{run_id}")
    cell = page.locator("#step-1 [data-col=tool-time]")
    assert (await cell.inner_text()).split() == ["900", "ms", "sum", "1700", "ms"]
    assert await page.locator("#step-2 [data-col=tool-time]").inner_text() == "-"
    assert "parallel count once" in await page.locator("#tool-time-note").inner_text()

    await page.locator(".waterfall[data-ready='1']").wait_for()
    ticks = await page.locator(".wf-axis").evaluate(
        """(axis) => { const box = axis.getBoundingClientRect();
          return [...axis.querySelectorAll('.wf-tick')].map((t) => { const r = t.getBoundingClientRect();
            return { text: t.textContent, inside: r.left >= box.left - 0.5 && r.right <= box.right + 0.5 }; }); }"""
    )
    assert ticks[-1]["text"] == "2.00 s"  # a tick at the axis's very end
    assert [t["text"] for t in ticks if not t["inside"]] == []
    assert await a11y.problems(page) == []


@needs_browser
@pytest.mark.timeout(150)  # a browser and a stack under CI load; a hang still fails
async def test_the_fleet_pages_colours_are_the_status_badges_and_its_key_bars_have_an_axis(
    browser, contexts, api: ApiServer, store: RunStore
):
    tenant = api.settings.tenant
    ended = {
        RunStatus.COMPLETED: "done",
        RunStatus.FAILED: None,
        RunStatus.CANCELLED: None,
        RunStatus.MAX_STEPS: None,
    }
    for status, output in ended.items():
        run_id = await new_run(store, tenant, f"a run that ends {status}")
        turn = ModelTurn(model="scripted", content="ok", tool_calls=[], usage=Usage(10, 2))
        await store.steps.record_step(StepRecord(run_id, tenant, 1, turn, []))
        await store.log.finish_run(tenant, run_id, status, output, None if output else "it ended so")
    await new_run(store, tenant, "a run still running")

    _, page = await logged_in(browser, contexts, api)
    await page.set_viewport_size(WIDE)
    await visit(page, "/ui/fleet?period=1h")
    shown = await page.locator("#runs-h ~ ul.legend li").count()
    assert shown == 5
    for status in [*ended, RunStatus.RUNNING]:
        badge = page.locator(f"#by-status .status-{status}")
        colour = await badge.evaluate("(el) => getComputedStyle(el).color")
        swatch = await page.locator(f"ul.legend .swatch.s-{status}").evaluate(
            "(el) => getComputedStyle(el).backgroundColor"
        )
        bar = await page.locator(f"#runs-chart rect.s-{status}").first.evaluate("(el) => getComputedStyle(el).fill")
        assert swatch == colour == bar, (status, swatch, colour, bar)
    colours = {
        await page.locator(f"ul.legend .swatch.s-{s}").evaluate("(el) => getComputedStyle(el).backgroundColor")
        for s in [*ended, RunStatus.RUNNING]
    }
    assert len(colours) == 5  # a colour means one status

    axis = page.locator("#keys-chart text.x-tick")
    labels = await axis.all_text_contents()
    assert labels[0] == "0" and labels[-1].endswith(" calls") and len(labels) == 3
    bounds = await page.locator("#keys-chart").evaluate(
        """(svg) => { const box = svg.getBoundingClientRect();
          return [...svg.querySelectorAll('text.x-tick')].every((t) => { const r = t.getBoundingClientRect();
            return r.left >= box.left && r.right <= box.right + 0.5; }); }"""
    )
    assert bounds is True  # the last label ends inside the chart
    assert await a11y.problems(page) == []


async def test_the_favicon_is_served_and_named_by_every_page(api: ApiServer):
    async with httpx.AsyncClient(base_url=api.url) as http:
        icon = await http.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
        assert icon.text.startswith("<svg") and "max-age" in icon.headers["cache-control"]
        login = await http.get("/ui/login")  # the one page without a session: every page extends its base
        assert '<link rel="icon" href="/favicon.ico" type="image/svg+xml">' in login.text


def test_the_cli_timeline_says_wall_time_and_marks_the_sum():
    """`waypoint status`/`timeline` print a step's tool time as the viewer does."""
    from datetime import UTC, datetime

    from waypoint.app.console import tools_time
    from waypoint.store.reads import StepLine

    at = datetime.now(UTC)
    parallel = StepLine(step=1, at=at, action="tools", tools=["fetch", "fetch"], tools_ms=1700, tools_wall_ms=900)
    assert tools_time(parallel) == "900 ms (sum 1700)"
    untimed = StepLine(step=1, at=at, action="tools", tools=["fetch", "fetch"], tools_ms=1700)
    assert tools_time(untimed) == "1700 ms (sum)"  # no times recorded: the sum, said to be one
    one = StepLine(step=1, at=at, action="tools", tools=["fetch"], tools_ms=40, tools_wall_ms=41)
    assert tools_time(one, unit="") == "41"


def test_a_step_reading_escapes_folds_and_shortens():
    """What the step page renders: JSON highlighted and escaped, a record's long strings cut (the page
    carries a text once), the last turn open, calls read from either shape a record has."""
    from waypoint.app.http.ui.reading import call_of, chat, highlight, open_from, shortened, text_of

    html = str(highlight({"<b>": "</pre><script>", "n": 1.5, "ok": None}))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<span class="j-key">&#34;&lt;b&gt;&#34;</span>' in html and '<span class="j-num">1.5</span>' in html
    assert '<span class="j-lit">null</span>' in html
    cut = shortened({"output": "x" * 5000, "n": [{"s": "y" * 10}]})
    assert cut["output"].startswith("x" * 300 + "…") and "5,000 characters" in cut["output"]
    assert cut["n"] == [{"s": "y" * 10}]
    assert (text_of("short").mode, text_of("a\n" * 9).mode, text_of("z" * 3000, "/u").mode) == (
        "whole",
        "fold",
        "start",
    )
    assert text_of('{"a": 1}').json == {"a": 1} and text_of("[not json").json is None

    flat = call_of({"id": "c1", "name": "add", "arguments": '{"a": 2}'})
    nested = call_of({"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}})
    assert flat == nested and flat.fields == [("a", 2, False)]
    assert call_of({"id": "c2", "name": "raw", "arguments": "not json"}).arguments is None

    turns = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for n in range(5):
        turns += [
            {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}", "name": "t", "arguments": "{}"}]}
        ]
        turns += [{"role": "tool", "tool_call_id": f"c{n}", "content": f"r{n}"}]
    shown = chat(turns, "/m")
    assert open_from(shown) == len(turns) - 6 and shown[-1].tool_name == "t"
    wide = [*turns[:2], {"role": "assistant", "content": None, "tool_calls": []}, *turns[3:4] * 8]
    assert open_from(chat(wide, "/m")) == 2  # the last turn stays open, however many results it has
