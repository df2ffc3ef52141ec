"""Wall time of `waypoint demo`, cold (fresh state folder) and warm (the same folder again).

    python benchmarks/demo_wall.py [--repeats 3]

Each run is the real CLI in a subprocess, so the numbers include interpreter
start, imports, starting and stopping the embedded stack, and the run itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from waypoint.app.embedded import free_port

# A hung demo should fail the benchmark, not stall it.
RUN_TIMEOUT_S = 300
console = Console()


def child_env(port: int) -> dict[str, str]:
    # A WAYPOINT_* variable from the caller's shell (an external database, another model) would
    # change what is measured, so the child sees only the port chosen here.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WAYPOINT_")}
    env["WAYPOINT_TEMPORAL_ADDRESS"] = f"localhost:{port}"
    return env


def stop(proc: subprocess.Popen[bytes]) -> None:
    # SIGTERM first: the CLI turns it into a clean stop of Temporal and Postgres; SIGKILL would orphan Postgres.
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_demo(state_dir: Path, port: int, log: Path) -> float:
    """Run `waypoint demo` once; returns its wall time in seconds, or exits with one line on failure."""
    cmd = [sys.executable, "-m", "waypoint", "--state-dir", str(state_dir), "demo"]
    with open(log, "wb") as out:
        began = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=child_env(port), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            code = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop(proc)
            raise SystemExit(f"waypoint demo did not finish within {RUN_TIMEOUT_S} s: {last_line(log)}") from None
        except BaseException:
            stop(proc)
            raise
        wall = time.perf_counter() - began
    if code != 0:
        raise SystemExit(f"waypoint demo exited with code {code}: {last_line(log)}")
    return wall


def last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm runs after the cold one")
    args = parser.parse_args()
    if args.repeats < 0:
        parser.error("--repeats cannot be negative")
    tmp = Path(tempfile.mkdtemp(prefix="waypoint-demo-bench-"))
    state_dir, port = tmp / "state", free_port()
    rows: list[tuple[str, float]] = []
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("waypoint demo", total=args.repeats + 1)
            for i in range(args.repeats + 1):
                phase = "cold (initdb)" if i == 0 else f"warm {i}"
                progress.update(task, description=f"waypoint demo: {phase}")
                rows.append((phase, run_demo(state_dir, port, tmp / f"run-{i}.log")))
                progress.advance(task)
    finally:
        # A failed run raises SystemExit with its one-line reason, which Python prints before exiting 1.
        shutil.rmtree(tmp, ignore_errors=True)

    table = Table(title="waypoint demo wall time", title_justify="left")
    table.add_column("phase")
    table.add_column("wall s", justify="right")
    for phase, wall in rows:
        table.add_row(phase, f"{wall:.2f}")
    warm = [wall for phase, wall in rows if phase.startswith("warm")]
    if warm:
        table.add_row("warm median", f"{statistics.median(warm):.2f}", style="bold")
    console.print(table)


if __name__ == "__main__":
    main()
