"""The web viewer's pages, measured: server time (p50/p95) and bytes sent per page.

    python benchmarks/viewer.py [--steps 1500] [--runs 120] [--calls 40]

Starts an embedded stack (Temporal, Postgres) in a temporary folder and `waypoint serve` as a
child process, writes `--runs` runs and one run of `--steps` steps with the real store (the
`record_step` a worker runs; each step one tool call), logs in at /ui/login with an API key,
then GETs each page `--calls` times (after two uncounted warm-ups):

- the runs page (/ui, 50 runs a page), and sorted by tokens with a time filter (no index
  serves that order: it sorts the tenant's runs),
- the run page of the long run (its whole timeline, rendered server-side in one query),
- a step view in the middle of it (the request rebuilt from the checkpoint, the step's events),
- the diff of two neighbouring steps.

Server time is the time to the last byte as a client on the same machine sees it (loopback, so
the network adds well under a millisecond). Target: p50 <= 150 ms for each page. Run it as a
file (it imports `step_overhead.py` from this folder). Numbers move with the load of the
machine; the exit code is 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.table import Table
from step_overhead import console, on_stack
from stream import a_step, bench_settings, new_run, pct

from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack, free_port
from waypoint.names import RunStatus
from waypoint.store import RunStore

TARGET_P50_MS = 150.0


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    assert stack.info is not None
    tenant = "bench"
    settings = bench_settings(stack, workdir, tenant)
    engine = await prepare_database(stack.info.database_url)
    store = RunStore(engine)
    key, _ = await store.create_key(tenant, "bench")
    with console.status(f"writing {args.runs} runs and one of {args.steps} steps..."):
        for _ in range(args.runs):
            run_id = await new_run(store, tenant)
            await store.record_step(a_step(run_id, tenant, 1))
            await store.finish_run(tenant, run_id, RunStatus.COMPLETED, "done", None)
        long_run = await new_run(store, tenant)
        for n in range(1, args.steps + 1):
            await store.record_step(a_step(long_run, tenant, n))
        await store.finish_run(tenant, long_run, RunStatus.COMPLETED, "done", None)
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
    }
    results: dict[str, tuple[list[float], int]] = {}
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for _ in range(200):
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/healthz")).status_code == 200:
                        break
                await asyncio.sleep(0.1)
            form = (await http.get("/ui/login")).text  # the login form's CSRF token, as a browser posts it
            token = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            login = await http.post("/ui/login", data={"key": key, "csrf": token}, follow_redirects=True)
            assert login.status_code == 200, login.text
            for name, path in pages.items():
                with console.status(name):
                    times: list[float] = []
                    size = 0
                    for i in range(args.calls + 2):
                        t = time.monotonic()
                        r = await http.get(path)
                        elapsed = time.monotonic() - t
                        assert r.status_code == 200, (path, r.status_code, r.text[:300])
                        size = len(r.content)
                        if i >= 2:
                            times.append(elapsed * 1000)
                    results[name] = (times, size)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--calls", type=int, default=40)
    on_stack(bench, parser.parse_args())


if __name__ == "__main__":
    main()
