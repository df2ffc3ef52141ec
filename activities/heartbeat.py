"""Heartbeats for activities that may run long.

A killed worker stops heartbeating, and Temporal retries the attempt on another
worker after the heartbeat timeout instead of waiting out the whole
start-to-close timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from temporalio import activity

from waypoint.retry import HEARTBEAT_EVERY


@contextlib.asynccontextmanager
async def heartbeating(*details: Any, every: float = HEARTBEAT_EVERY) -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs."""

    async def beat() -> None:
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
