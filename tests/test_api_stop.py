"""Stopping the HTTP API never hangs: past its grace, a stop that still waits (here, an app whose
shutdown never ends) is forced, then cut, with one warning line naming what happened."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import uvicorn

from waypoint.app.http import server as http_server
from waypoint.app.http.server import start_api, stop_api


def stuck_on_shutdown() -> Any:
    """An ASGI app whose lifespan shutdown waits for ever, and that answers no request."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await asyncio.Event().wait()  # never ends: only a cancel gets past it

    return app


async def test_a_stop_that_hangs_is_forced_then_cut(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(http_server, "STOP_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(http_server, "STOP_FORCE_SECONDS", 0.2)
    server = uvicorn.Server(uvicorn.Config(stuck_on_shutdown(), host="127.0.0.1", port=0, lifespan="on"))
    task = await start_api(server)
    with caplog.at_level(logging.WARNING, logger=http_server.__name__):
        await asyncio.wait_for(stop_api(server, task), 30)  # without the cut it waits for ever
    assert task.done()
    assert server.force_exit
    assert [r.getMessage() for r in caplog.records] == [
        "the HTTP API did not stop within 0.4 s: its open connections and tasks are cut"
    ]
