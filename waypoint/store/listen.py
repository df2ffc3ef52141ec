"""LISTEN on a dedicated connection: Postgres tells the API server when a run's log grows.

One asyncpg connection per process (outside the SQLAlchemy pool, which it would hold forever),
with a callback per channel. If the connection drops (a Postgres restart), it is opened again
with backoff and `on_reconnect` runs, so subscribers re-read what they may have missed: a
notification is a hint, the `events` table is the truth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg

from waypoint.store.db import async_url

log = logging.getLogger(__name__)

Handler = Callable[[str], None]


def asyncpg_dsn(url: str) -> str:
    """A `postgresql://` URL asyncpg accepts, from any URL the store accepts."""
    return async_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """`await Listener(url, {channel: handler}).start()`; handlers run on the event loop, get the payload."""

    def __init__(self, url: str, handlers: dict[str, Handler], *, on_reconnect: Callable[[], None] | None = None):
        self.dsn = asyncpg_dsn(url)
        self.handlers = handlers
        self.on_reconnect = on_reconnect
        self._conn: Any = None
        self._closing = False
        self._lost = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None

    async def start(self) -> Listener:
        await self._connect()
        self._keeper = asyncio.create_task(self._keep())
        return self

    async def _connect(self) -> None:
        conn = await asyncpg.connect(self.dsn)
        for channel, handler in self.handlers.items():
            await conn.add_listener(channel, self._callback(handler))
        conn.add_termination_listener(lambda _conn: self._lost.set())
        self._conn = conn

    @staticmethod
    def _callback(handler: Handler) -> Callable[..., None]:
        def callback(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            try:
                handler(payload)
            except Exception:  # a bad payload must not stop the listener
                log.exception("notification handler failed")

        return callback

    async def _keep(self) -> None:
        """Reopen the connection when it drops, then tell the subscribers to catch up."""
        while not self._closing:
            await self._lost.wait()
            if self._closing:
                return
            self._lost.clear()
            delay = 0.1
            while not self._closing:
                try:
                    await self._connect()
                    break
                except (OSError, asyncpg.PostgresError) as exc:
                    log.warning("LISTEN connection lost, retrying in %.1f s: %s", delay, exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
            if self.on_reconnect is not None:
                self.on_reconnect()

    async def close(self) -> None:
        self._closing = True
        self._lost.set()
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
