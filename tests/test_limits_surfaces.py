"""A run waiting for capacity, and the limiter's keys, on every surface: `waypoint status`, `runs`
and `limits`; the HTTP API (`/v1/runs/{id}`, `/v1/limits`); the viewer's run and limits pages; the
Python API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from tests.browser import sign_in
from tests.conftest import ApiServer
from tests.helpers import eventually, waypoint
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.names import RunStatus
from waypoint.testing.fake_openai import FakeOpenAI, Turn

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

KEY = "openai:fake-model"


@pytest.fixture
def gate() -> threading.Event:
    return threading.Event()


@pytest.fixture
def held_fake(gate: threading.Event) -> Iterator[FakeOpenAI]:
    """A provider whose calls wait for `gate`: the one call in flight holds the key's only slot."""

    def answer(body: dict[str, Any], index: int) -> Turn:
        gate.wait(120)
        return Turn(content="done")

    fake = FakeOpenAI(responder=answer).start()
    yield fake
    gate.set()
    fake.stop()


@pytest.fixture
def settings(settings: Settings, tmp_path: Path, held_fake: FakeOpenAI) -> Settings:
    limits = tmp_path / "limits.toml"
    limits.write_text(
        f'[models."{KEY}"]\nin_flight = 1\n\n[tenants."{settings.tenant}"]\nweight = 2\n\n'
        '[tenants."someone-else"]\nweight = 5\nruns = 3\n'
    )
    update = {"limits_file": limits, "openai_base_url": held_fake.base_url, "model_timeout_seconds": 120}
    return settings.model_copy(update=update)


async def test_a_run_waiting_for_capacity_shows_its_key_and_place_everywhere(
    client: Client, engine: Any, settings: Settings, worker: Any, api: ApiServer, gate: threading.Event
) -> None:
    wp = Waypoint(client, engine, settings)
    first = await wp.start_run("one", agent="metered")
    await eventually(lambda: _status(wp, first, RunStatus.RUNNING), what="the first run's call in flight")
    second = await wp.start_run("two", agent="metered")
    await eventually(lambda: _status(wp, second, RunStatus.WAITING_CAPACITY), what="the second run in line")
    third = await wp.start_run("three", agent="metered")

    async def both_waiting() -> bool:
        try:
            rows = [await wp.run(r) for r in (second, third)]
        except NotFound:  # its row comes with its first activity
            return False
        return all(r.status == RunStatus.WAITING_CAPACITY and r.waiting_position for r in rows)

    await eventually(both_waiting, timeout=60, what="two runs waiting in the key's line")
    assert [(await wp.run(r)).waiting_position for r in (second, third)] == [1, 2]

    shown = await waypoint(settings, "status", third)
    assert f"capacity of {KEY}, #2 in line" in shown.out
    listed = {r["run_id"]: r for r in json.loads((await waypoint(settings, "runs", "--json")).out)}
    assert (listed[second]["waiting_key"], listed[second]["waiting_position"]) == (KEY, 1)
    assert "waiting_capacity #1" in (await waypoint(settings, "runs")).out
    report = json.loads((await waypoint(settings, "limits", "--json")).out)
    assert report["models"][KEY]["in_flight"] == 1
    own = {"runs": None, "weight": 2.0, "tokens_per_day": None, "cost_per_day": None, "budget_wait": "fail"}
    assert report["tenants"] == {settings.tenant: own}  # another tenant's entry is not shown
    assert report["today"] is None  # no daily budget
    key = next(k for k in report["keys"] if k["key"] == KEY)
    assert (key["in_flight"], key["waiting"]) == (1, 2)
    assert "Now" in (await waypoint(settings, "limits")).out

    run = (await api.http.get(f"/v1/runs/{second}")).json()
    assert (run["status"], run["waiting_key"], run["waiting_position"]) == ("waiting_capacity", KEY, 1)
    over_http = (await api.http.get("/v1/limits")).json()
    assert next(k for k in over_http["keys"] if k["key"] == KEY)["waiting"] == 2
    assert list(over_http["tenants"]) == [settings.tenant]
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as browser:  # the viewer: a session, no header
        await sign_in(browser, api.key)
        page = (await browser.get(f"/ui/runs/{third}")).text
        assert f"capacity of {KEY}, #2 in line" in page
        assert KEY in (await browser.get("/ui/limits")).text

    gate.set()
    results = [await wp.result(r) for r in (first, second, third)]
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 3
    assert (await wp.run(third)).waiting_key is None


async def _status(wp: Waypoint, run_id: str, status: str) -> bool:
    try:
        return (await wp.run(run_id)).status == status
    except NotFound:
        return False
