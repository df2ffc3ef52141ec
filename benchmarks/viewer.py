"""The web viewer's pages, measured: server time (p50/p95) and bytes sent per page.

    python benchmarks/viewer.py [--steps 1500] [--runs 120] [--calls 40] [--loads 7] [--no-browser]
                                [--fleet-runs 10000]

Starts an embedded stack (Temporal, Postgres) in a temporary folder and `waypoint serve` as a
child process, writes `--runs` runs and one run of `--steps` steps with the real store (the
`record_step` a worker runs; each step one tool call), logs in at /ui/login with an API key,
then GETs each page `--calls` times (after two uncounted warm-ups):

- the runs page (/ui, 50 runs a page), and sorted by tokens with a time filter (no index
  serves that order: it sorts the tenant's runs),
- the run page of the long run (its whole timeline, rendered server-side in one query),
- a step view in the middle of it (the request rebuilt from the checkpoint, the step's events),
- the diff of two neighbouring steps,
- the long run's waterfall data (GET /v1/runs/{id}/timeline, what the run page draws).

Then, unless `--no-browser`, the run page of the long run in chromium (Playwright, Debian's
`chromium`; nothing downloads), loaded `--loads` times in fresh tabs: first contentful paint,
time to interactive (the waterfall and charts drawn: the page's `waterfall-drawn` mark), both
from the navigation's start, the JS heap in use after it (CDP `Performance.getMetrics`), and
how long a zoom takes to redraw. Target: p50 under 1 s to interactive.

Last, unless `--fleet-runs 0`, the fleet page (`_fleet_page.py`): `--fleet-runs` more runs of three
steps written through the store, then /ui/fleet over 1h, 24h and 7d. Target: p50 under 300 ms.

Server time is the time to the last byte as a client on the same machine sees it (loopback, so
the network adds well under a millisecond). Target: p50 <= 150 ms for each page. Run it as a
file (it imports `step_overhead.py` from this folder). Numbers move with the load of the
machine; the exit code is 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
from _fleet_page import fleet_page, fleet_table
from _viewer_common import signed_in, timed_gets
from rich.table import Table
from step_overhead import console, on_stack
from stream import a_step, bench_settings, new_run, pct

from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack, free_port
from waypoint.names import RunStatus
from waypoint.store import RunStore

TARGET_P50_MS = 150.0
TARGET_INTERACTIVE_MS = 1000.0

# In the page: paint and the waterfall's mark, from the navigation's start; a zoom's redraw.
PAINTED = """() => ({
  fcp: performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? null,
  drawn: performance.getEntriesByName("waterfall-drawn")[0]?.startTime ?? null,
  rows: document.querySelectorAll(".wf-row").length,
})"""
ZOOM = """() => new Promise((done) => {
  const t = performance.now();
  document.querySelector("[data-zoom=in]").click();
  requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t)));
})"""


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    assert stack.info is not None
    tenant = "bench"
    settings = bench_settings(stack, workdir, tenant)
    engine = await prepare_database(stack.info.database_url)
    store = RunStore(engine)
    key, _ = await store.keys.create_key(tenant, "bench")
    with console.status(f"writing {args.runs} runs and one of {args.steps} steps..."):
        for _ in range(args.runs):
            run_id = await new_run(store, tenant)
            await store.steps.record_step(a_step(run_id, tenant, 1))
            await store.log.finish_run(tenant, run_id, RunStatus.COMPLETED, "done", None)
        long_run = await new_run(store, tenant)
        for n in range(1, args.steps + 1):
            await store.steps.record_step(a_step(long_run, tenant, n))
        await store.log.finish_run(tenant, long_run, RunStatus.COMPLETED, "done", None)
    port = free_port()
    env = settings.child_environment(WAYPOINT_API_PORT=str(port))
    proc = subprocess.Popen([sys.executable, "-m", "waypoint", "serve"], env=env, stdout=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    middle = args.steps // 2
    pages = {
        "runs page": "/ui",
        "runs page, most tokens first": "/ui?sort=tokens&since=7d",
        f"run page ({args.steps} steps)": f"/ui/runs/{long_run}",
        f"step view (step {middle})": f"/ui/runs/{long_run}/steps/{middle}",
        "diff of two steps": f"/ui/runs/{long_run}/diff?a={middle - 1}&b={middle}",
        f"timeline API ({args.steps} steps)": f"/v1/runs/{long_run}/timeline",
    }
    results: dict[str, tuple[list[float], int]] = {}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            await signed_in(http, key)
            for name, path in pages.items():
                with console.status(name):
                    results[name] = await timed_gets(http, path, args.calls)
        loads = await in_browser(url, key, f"/ui/runs/{long_run}", args.loads) if args.browser else []
    finally:
        proc.terminate()
        proc.wait(15)
        await engine.dispose()

    table = Table(title="Web viewer pages (one `waypoint serve` process)", title_justify="left")
    for col in ("page", "p50 ms", "p95 ms", "bytes", "target p50"):
        table.add_column(col, justify="left" if col == "page" else "right")
    for name, (times, size) in results.items():
        p50 = statistics.median(times)
        met = "met" if p50 <= TARGET_P50_MS else "MISSED"
        table.add_row(name, f"{p50:.1f}", f"{pct(times, 95):.1f}", f"{size:,}", f"<= {TARGET_P50_MS:g} ({met})")
    console.print(table)
    if loads:
        print_loads(loads, args.steps)
    if args.fleet_runs:
        console.print(fleet_table(await fleet_page(stack, workdir, runs=args.fleet_runs, calls=args.calls)))


async def in_browser(url: str, key: str, path: str, loads: int) -> list[dict[str, float]]:
    """Each load of `path` in a fresh tab of one logged-in chromium context: paint, interactive, heap, zoom."""
    import shutil

    from playwright.async_api import async_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        console.print("no chromium binary: `apt-get install -y chromium`; the browser numbers are skipped")
        return []
    found = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = await browser.new_context(base_url=url, viewport={"width": 1280, "height": 900})
        page = await context.new_page()
        await page.goto("/ui/login")
        await page.fill("#key", key)
        await page.click("button[type=submit]")
        await page.wait_for_url("**/ui")
        await page.close()
        with console.status(f"loading the run page {loads} times in chromium"):
            for i in range(loads + 1):
                page = await context.new_page()
                cdp = await context.new_cdp_session(page)
                await cdp.send("Performance.enable")
                await page.goto(path)
                await page.locator(".waterfall[data-ready='1']").wait_for(timeout=60_000)
                marks = await page.evaluate(PAINTED)
                metrics = {m["name"]: m["value"] for m in (await cdp.send("Performance.getMetrics"))["metrics"]}
                zoom = await page.evaluate(ZOOM)
                await page.close()
                if i:  # the first load warms the server and the browser's cache
                    found.append(
                        {
                            "fcp": marks["fcp"],
                            "drawn": marks["drawn"],
                            "rows": marks["rows"],
                            "heap": metrics["JSHeapUsedSize"] / 2**20,
                            "zoom": zoom,
                        }
                    )
        await browser.close()
    return found


def print_loads(loads: list[dict[str, float]], steps: int) -> None:
    table = Table(title=f"The run page of a {steps}-step run in chromium ({len(loads)} loads)", title_justify="left")
    for col in ("measure", "p50", "max", "target"):
        table.add_column(col, justify="left" if col == "measure" else "right")

    def row(name: str, key: str, unit: str, target: str = "") -> None:
        values = [v[key] for v in loads]
        table.add_row(name, f"{statistics.median(values):.1f} {unit}", f"{max(values):.1f} {unit}", target)

    interactive = statistics.median(v["drawn"] for v in loads)
    met = "met" if interactive < TARGET_INTERACTIVE_MS else "MISSED"
    row("first contentful paint", "fcp", "ms")
    row("interactive (waterfall and charts drawn)", "drawn", "ms", f"< {TARGET_INTERACTIVE_MS:g} ms ({met})")
    row("JS heap in use", "heap", "MB")
    row("a zoom's redraw", "zoom", "ms")
    row("waterfall rows in the DOM", "rows", "")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--loads", type=int, default=7, help="loads of the run page in chromium")
    parser.add_argument("--no-browser", dest="browser", action="store_false", help="skip the chromium part")
    parser.add_argument("--fleet-runs", type=int, default=10_000, help="runs behind the fleet page (0: skip it)")
    on_stack(bench, parser.parse_args())


if __name__ == "__main__":
    main()
