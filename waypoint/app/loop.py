"""The event loop of a command: `asyncio.run`, except at the end.

`asyncio.run` cancels the tasks still running when the command is done and waits for every one of
them, however long. A worker that did not stop in time (`waypoint.app.worker.running`) leaves
such tasks behind: an activity that ignores its cancellation, a tool stuck in a thread. Here they
get a moment, then are left behind with their loop: the process is exiting, and Temporal gives
their work to the next worker. Standard library only: every command runs on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

LEAVE_AFTER_SECONDS = 1.0
# Runners left open with tasks still running: referenced, so that no task is destroyed while it runs.
_left_behind: list[asyncio.Runner] = []


def run(main: Coroutine[Any, Any, T]) -> T:
    runner = asyncio.Runner()
    try:
        return runner.run(main)
    finally:
        loop = runner.get_loop()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        stuck = pending and loop.run_until_complete(asyncio.wait(pending, timeout=LEAVE_AFTER_SECONDS))[1]
        if stuck:
            _left_behind.append(runner)
        else:
            runner.close()
