"""The worker process of many_runs.py: what `waypoint worker` runs (`run_worker`, settings from the
`WAYPOINT_*` environment), with Temporal's worker limits from the command line.

    python benchmarks/_many_runs_worker.py [--max-cached-workflows N] [--max-concurrent-workflow-tasks N]
                                           [--max-concurrent-activities N]

It prints `worker ready` once it polls and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio

from _peers_common import READY_LINE

from waypoint.app.worker import run_worker, stop_event
from waypoint.client import database_url
from waypoint.config import Settings
from waypoint.gateway.temporal import connect
from waypoint.store.db import engine_for


async def serve(limits: dict[str, int | None]) -> None:
    settings = Settings()
    engine = engine_for(settings, database_url(settings))
    try:
        client = await connect(settings)

        def ready() -> None:
            print(f"{READY_LINE}: {settings.task_queue}", flush=True)

        await run_worker(client, engine, settings, stop_event(), ready, **limits)
    finally:
        await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("max-cached-workflows", "max-concurrent-workflow-tasks", "max-concurrent-activities"):
        parser.add_argument(f"--{name}", type=int, default=None, help="Temporal's default when unset")
    args = parser.parse_args()
    asyncio.run(serve(vars(args)))


if __name__ == "__main__":
    main()
