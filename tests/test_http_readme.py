"""The HTTP API guide's curl examples (docs/guides/http-api.md), run by bash as a user would run them:
`waypoint serve`, a key from `waypoint keys create`, curl against the API, a worker serving the demo agent."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.docs import first_block, page
from tests.ports import reserve_port
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace

pytestmark = pytest.mark.postgres


def curl_block() -> str:
    return first_block(page("guides/http-api.md"), "## Try it with curl")


@pytest.mark.timeout(240)
async def test_the_readme_curl_examples_run(client, engine, worker, settings: Settings):
    seed_workspace(settings.resolved_workspace)
    port = reserve_port()
    script = "set -e\n" + curl_block().replace("8000", str(port))
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        script,
        env=settings.child_environment(COLUMNS="200"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    text = out.decode().replace("\r\n", "\n")  # SSE lines may end in CRLF
    assert proc.returncode == 0, (text, err.decode())
    assert '{"ok":true}' in text
    blocks = re.findall(r"id: (\d+)\nevent: (\w+)\n", text)
    ids = [int(i) for i, _ in blocks]
    last = ids.index(max(ids))
    assert blocks[last][1] == "run_finished"
    assert ids == list(range(1, max(ids) + 1)) + list(range(6, max(ids) + 1))  # whole, then after event 5
    bodies = json_bodies(text.rsplit("event: run_finished\n", 1)[1].split("\n\n", 1)[1])
    steps, events, fork, refused = bodies[-4:]
    assert steps["steps"][0]["step"] == 1
    assert [e["kind"] for e in events["events"]] == ["tool_result", "tool_result"]
    assert fork["fork_step"] == 2 and fork["parent_run_id"] == steps["run_id"]
    forked = await Waypoint(client, engine, settings).result(fork["run_id"], tenant_id="acme")  # on from step 2
    assert forked.status == "completed" and "words in 3 notes" in (forked.output or ""), forked
    assert refused["error"]["code"] == "unauthorized"


def json_bodies(text: str) -> list:
    """The JSON values printed one after another (curl adds no newline)."""
    decoder = json.JSONDecoder()
    found, at = [], 0
    while (at := text.find("{", at)) != -1:
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found
