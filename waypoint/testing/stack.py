"""The embedded stack for tests and benchmarks: a Temporal dev server, an embedded PostgreSQL and the
folder of the embedded Qdrant shard, started in one call and stopped on exit.

    from waypoint.testing import embedded_stack, stack_settings

    with embedded_stack() as stack:                 # a temporary folder, free ports, no UI
        settings = stack_settings(stack, task_queue="mine")
        ...                                         # connect, migrate, run a worker, start runs

It is what `waypoint dev` starts, without the worker and the HTTP API: open a worker on it with
`waypoint.app.worker.run_worker` or your own Worker and `WaypointPlugin`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import tempfile
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

from waypoint.app.embedded import EmbeddedStack, free_port
from waypoint.config import Settings


@contextlib.contextmanager
def embedded_stack(
    state_dir: Path | str | None = None,
    *,
    temporal_port: int | None = None,
    ui_port: int | None = None,
    postgres: bool = True,
    migrate: bool = True,
) -> Iterator[EmbeddedStack]:
    """A running embedded stack in `state_dir` (default: a temporary folder, removed after), Temporal
    on `temporal_port` (default: a free one) and headless unless `ui_port` is given; `postgres=False`
    when the database is elsewhere. Its database exists and is migrated (`migrate=False`: left to
    you). Its endpoints are `stack.info`; it stops when the block ends. Usable from async code too
    (the start blocks for a second or two)."""
    with contextlib.ExitStack() as exits:
        if state_dir is None:
            state_dir = exits.enter_context(tempfile.TemporaryDirectory(prefix="waypoint-stack-"))
        stack = EmbeddedStack(
            Path(state_dir), temporal_port=temporal_port or free_port(), ui_port=ui_port, postgres=postgres
        )
        exits.callback(stack.stop)
        info = stack.start()
        if postgres and migrate:
            _in_own_loop(_prepare(info.database_url))
        yield stack


async def _prepare(url: str) -> None:
    from waypoint.app.devstack import prepare_database

    engine = await prepare_database(url)
    await engine.dispose()


def _in_own_loop(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end on an event loop of its own, in a thread: the caller may be inside one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work).result()


def stack_settings(stack: EmbeddedStack, **overrides: Any) -> Settings:
    """Settings that point at a running embedded stack (its Temporal, Postgres and Qdrant folder),
    with `overrides` over them (`task_queue=`, `memory=`, ...)."""
    info = stack.info
    if info is None:
        raise RuntimeError("the embedded stack is not running: use it inside `with embedded_stack() as stack:`")
    found: dict[str, Any] = {
        "state_dir": stack.state_dir,
        "temporal_address": info.temporal_address,
        "database_url": info.database_url or None,
        "qdrant_path": Path(info.qdrant_path),
    }
    return Settings(**{**found, **overrides})


__all__ = ["embedded_stack", "stack_settings"]
