"""`python -m waypoint.app.health`: the worker container's healthcheck.

Exit 0 when a worker polls the configured task queue (Temporal lists it), 1 when none does or
Temporal cannot be reached; one line on stderr says which. It reads the same settings the worker
does, so it checks the queue that worker serves.
"""

from __future__ import annotations

import asyncio
import sys

from waypoint.config import Settings
from waypoint.errors import WaypointError


async def polled(settings: Settings) -> int:
    """How many workers poll the settings' task queue for workflow tasks."""
    from waypoint.gateway.temporal import TemporalGateway, connect

    client = await connect(settings, wait_seconds=0)
    return await TemporalGateway(client, settings).pollers(settings.task_queue)


def main() -> int:
    from waypoint.app.cli._common import settings as read_settings

    try:
        settings = read_settings()
        pollers = asyncio.run(polled(settings))
    except WaypointError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if pollers == 0:
        print(f"unhealthy: no worker polls task queue {settings.task_queue}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from waypoint.app.cli import leave

    leave(main())  # not sys.exit: a client's native threads can abort finalization (exit -6)
