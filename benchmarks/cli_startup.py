"""How long the `waypoint` command takes as a user types it: a whole process, against a running stack.

    python benchmarks/cli_startup.py [--repeat 5] [--command "waypoint"]

Starts an embedded stack (Temporal dev server, PostgreSQL) on free ports in a temporary folder,
runs one demo run to completion so there is something to show, then times each command as a
subprocess: `--help`, `runs --json`, `status RUN --json` (a finished run: Postgres only) and
`--version`. Prints the median and the spread of `--repeat` runs after one warm-up, beside the
targets (`--help` <= 0.5 s, `runs`/`status` <= 1.0 s on the 2-core machine).

`--command` times another build of the CLI, e.g. `--command "python -m waypoint.cli"` in a checkout
of an older version.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import time
import uuid

from rich.console import Console
from rich.table import Table

from waypoint.agents import AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import DEMO_TASK, seed_workspace
from waypoint.gateway.temporal import connect
from waypoint.testing import embedded_stack, stack_settings

TARGETS = {"--help": 0.5, "runs --json": 1.0, "status RUN --json": 1.0, "--version": 0.5}


async def one_run(settings: Settings) -> str:
    seed_workspace(settings.resolved_workspace)
    engine = await prepare_database(settings.database_url or "")
    client = await connect(settings)
    try:
        async with build_worker(client, engine, settings, AgentRegistry.from_modules([])):
            wp = Waypoint(client, engine, settings)
            run_id = await wp.start_run(DEMO_TASK, agent="demo")
            await wp.result(run_id)
            return run_id
    finally:
        await engine.dispose()


def timed(argv: list[str], env: dict[str, str]) -> float | None:
    """Seconds the command took, or None when it failed (an older CLI may lack a command)."""
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - began
    return took if done.returncode == 0 else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--command", default="waypoint", help="How to call the CLI (split like a shell).")
    args = parser.parse_args()
    prefix = shlex.split(args.command)
    with embedded_stack() as stack:
        settings = stack_settings(stack, task_queue=f"bench-{uuid.uuid4().hex[:6]}", memory=False)
        run_id = asyncio.run(one_run(settings))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
        env |= settings.child_environment()
        table = Table(title=f"`{args.command}` wall time, {args.repeat} runs after a warm-up (seconds)")
        for col in ("command", "median", "min", "max", "target", "met"):
            table.add_column(col, justify="left" if col == "command" else "right")
        for label, target in TARGETS.items():
            argv = [*prefix, *label.replace("RUN", run_id).split()]
            if timed(argv, env) is None:  # the warm-up run also tells whether it works
                table.add_row(label, "fails", "", "", f"{target}", "")
                continue
            samples = [t for t in (timed(argv, env) for _ in range(args.repeat)) if t is not None]
            median = statistics.median(samples)
            met = "yes" if median <= target else "NO"
            table.add_row(label, f"{median:.2f}", f"{min(samples):.2f}", f"{max(samples):.2f}", f"{target}", met)
        Console().print(table)


if __name__ == "__main__":
    main()
