"""The web viewer (/ui) as the tests drive it: Debian's chromium through Playwright (skipped, with how
to install one, when there is no chromium binary), a logged-in browser context, waiting for a run's
status, and logging in without a browser (the login form's CSRF token). The `browser` and `contexts`
fixtures are in tests/conftest.py."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:  # tests.conftest imports this module (for its browser fixture)
    from tests.conftest import ApiServer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary: `apt-get install -y chromium` (.ci/run does it)"
)
STEP_MS = 15_000  # the longest a page waits for something to appear
# WAYPOINT_VIEWER_SCREENSHOTS=docs: the first test saves the README's screenshots there.
SHOTS = os.environ.get("WAYPOINT_VIEWER_SCREENSHOTS")


async def shot(page, name: str, *, full_page: bool = False) -> None:
    if SHOTS:
        await page.screenshot(path=str(Path(SHOTS) / f"viewer-{name}.png"), full_page=full_page)


async def logged_in(browser, contexts: list, api: ApiServer, key: str | None = None) -> tuple:
    """A fresh browser context logged in through the login form with an API key."""
    context = await browser.new_context(base_url=api.url)
    contexts.append(context)
    page = await context.new_page()
    page.set_default_timeout(STEP_MS)
    await page.goto("/ui")
    assert "/ui/login" in page.url  # no session: the login page
    await page.fill("#key", key or api.key)
    await page.click("button[type=submit]:has-text('Log in')")
    await page.wait_for_url("**/ui")
    return context, page


async def start(api: ApiServer, task: str, agent: str) -> str:
    r = await api.http.post("/v1/runs", json={"task": task, "agent": agent})
    assert r.status_code == 201, r.text
    run_id: str = r.json()["run_id"]
    return run_id


async def status_of(api: ApiServer, run_id: str) -> str | None:
    r = await api.http.get(f"/v1/runs/{run_id}")
    return r.json()["status"] if r.status_code == 200 else None


def reached(api: ApiServer, run_id: str, *wanted: str):
    async def probe() -> str | None:
        status = await status_of(api, run_id)
        return status if status in wanted else None

    return probe


async def visit(page, url: str) -> None:
    """page.goto, again if it was cut short: a run page open in this tab reloads itself when the
    run's status changes, and a reload landing on a navigation aborts it (net::ERR_ABORTED, or
    "interrupted by another navigation" to the same page) or, under load, leaves the navigation
    waiting for a load event that belongs to the reload."""
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    for attempt in range(3):
        try:
            await page.goto(url, wait_until="domcontentloaded", timeout=10_000)
            return
        except PlaywrightError as exc:
            said = str(exc)
            cut = (
                isinstance(exc, PlaywrightTimeout)
                or "ERR_ABORTED" in said
                or "interrupted by another navigation" in said
            )
            if not cut or attempt == 2:
                raise


def form_token(html: str) -> str:
    """The CSRF token the page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found[1]


async def sign_in(http: httpx.AsyncClient, key: str) -> httpx.Response:
    """Log in as the login form does: its token, the key."""
    token = form_token((await http.get("/ui/login")).text)
    return await http.post("/ui/login", data={"key": key, "csrf": token}, follow_redirects=False)
