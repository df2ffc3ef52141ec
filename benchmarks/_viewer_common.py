"""What viewer.py and _fleet_page.py both do against a `waypoint serve`: wait for it, sign in at
/ui/login as a browser would, and time a page's GETs."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx


async def signed_in(http: httpx.AsyncClient, key: str) -> None:
    """Wait until the server answers, then sign in with `key` (the login form's CSRF token included)."""
    for _ in range(300):
        with contextlib.suppress(httpx.TransportError):
            if (await http.get("/healthz")).status_code == 200:
                break
        await asyncio.sleep(0.1)
    form = (await http.get("/ui/login")).text
    token = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    login = await http.post("/ui/login", data={"key": key, "csrf": token}, follow_redirects=True)
    assert login.status_code == 200, login.text


async def timed_gets(http: httpx.AsyncClient, path: str, calls: int) -> tuple[list[float], int]:
    """`calls` GETs of `path` after two uncounted warm-ups: the milliseconds of each, and the bytes."""
    times: list[float] = []
    size = 0
    for i in range(calls + 2):
        t = time.monotonic()
        r = await http.get(path)
        elapsed = time.monotonic() - t
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        size = len(r.content)
        if i >= 2:
            times.append(elapsed * 1000)
    return times, size
