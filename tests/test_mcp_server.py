"""`waypoint mcp`: the SDK's own MCP client talks to Waypoint over stdio and over streamable HTTP,
and sees only its tenant's runs; the tools that act are there only when configured."""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import cli_env, eventually, make_run, step, waypoint
from tests.mcp_client import READ_TOOLS, WRITE_TOOLS, call, error_of, over_stdio
from tests.ports import reserve_port
from waypoint.app.embedded import StackInfo
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.memory import Episode
from waypoint.store import RunStore

pytestmark = pytest.mark.postgres


async def two_tenants(store: RunStore, settings: Settings) -> tuple[str, str]:
    mine = await make_run(store, settings, [step(1, [("add", {"a": 2, "b": 3}, "5")]), step(2, [], content="5")])
    theirs = await make_run(store, settings.model_copy(update={"tenant": "someone-else"}), [step(1, [])])
    return mine, theirs


async def test_over_stdio_an_assistant_reads_its_tenants_runs_only(store: RunStore, settings: Settings):
    mine, theirs = await two_tenants(store, settings)
    mine_assistant, theirs_assistant = f"mine-{uuid.uuid4().hex[:8]}", f"theirs-{uuid.uuid4().hex[:8]}"
    for tenant, aid in ((settings.tenant, mine_assistant), ("someone-else", theirs_assistant)):
        values = {"graph_id": "calculator", "config": {}, "context": {}, "metadata": {}, "name": aid}
        await store.assistants.create_assistant(tenant, aid, {**values, "description": None})
    async with over_stdio(settings) as client:
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
        runs = await call(client, "list_runs")
        assert [r["run_id"] for r in runs] == [mine]
        assert {r["tenant_id"] for r in runs} == {settings.tenant}

        status = await call(client, "run_status", run_id=mine)
        assert status["run"]["steps"] == 2 and [line["step"] for line in status["timeline"]] == [1, 2]
        state = await call(client, "step_state", run_id=mine, step=1)
        assert any(m.get("content") == "5" for m in state["messages"])
        diff = await call(client, "diff_steps", run_id=mine, a=0, b=2)
        assert diff["added"]
        assert await error_of(client, "step_state", run_id=mine) == (
            "step_state: step is missing; call it as step_state(run_id: string, step: integer)"
        )
        assert client.server_info is not None and client.server_info.version == version("waypoint")
        assert "from 0 to 2147483647" in await error_of(client, "step_state", run_id=mine, step=3_000_000_000)

        for tool, args in (("run_status", {}), ("step_state", {"step": 1}), ("diff_steps", {"a": 0, "b": 1})):
            assert f"no run {theirs!r} for tenant {settings.tenant!r}" in await error_of(
                client, tool, run_id=theirs, **args
            )
        assert "start_run" not in {t.name for t in (await client.list_tools()).tools}

        # the tenant's assistants, not another's: what `waypoint assistants list --json` prints
        assistants = await call(client, "list_assistants")
        assert mine_assistant in [a["assistant_id"] for a in assistants]
        assert theirs_assistant not in [a["assistant_id"] for a in assistants]
        listed = await waypoint(settings, "assistants", "list", "--json")
        assert listed.code == 0 and json.loads(listed.out) == assistants, listed.err

        # the waterfall's data and the mirror check, the tenant's own: what /v1 answers
        timeline = await call(client, "run_timeline", run_id=mine)
        # a seeded run is live (no end recorded): its step 3 is in flight
        assert [(st["step"], st.get("in_flight", False)) for st in timeline["steps"]] == [
            (1, False),
            (2, False),
            (3, True),
        ]
        assert any(bar["kind"] == "tool" for bar in timeline["steps"][0]["bars"])
        assert f"no run {theirs!r} for tenant {settings.tenant!r}" in await error_of(
            client, "run_timeline", run_id=theirs
        )
        verdict = await call(client, "verify_runs")
        # the seeded run says it runs and Temporal has no workflow of it; the other tenant's is not checked
        assert (verdict["ok"], verdict["runs"]) == (False, 1), verdict
        assert {v["run_id"] for v in verdict["violations"]} == {mine}
        assert "since" in await error_of(client, "verify_runs", since="yesterday-ish")

        # the fleet: the tenant's runs only (the other tenant's run is not counted), a bad period refused
        fleet = await call(client, "fleet", period="1h")
        assert (fleet["tenant_id"], fleet["totals"]["runs"]) == (settings.tenant, 1)
        assert [r["run_id"] for r in fleet["slowest"]] == [mine]
        assert "unknown period '2y'" in await error_of(client, "fleet", period="2y")


def readme_mcp_config() -> dict[str, Any]:
    """The stdio configuration the MCP guide gives an MCP client (the first JSON block of its section)."""
    from tests.docs import first_block, page

    config = json.loads(first_block(page("guides/mcp.md"), "## Waypoint as an MCP server", "json"))
    return config["mcpServers"]["waypoint"]


async def test_an_mcp_client_starts_it_elsewhere_with_the_readmes_variables(
    store: RunStore, settings: Settings, tmp_path: Path
):
    """As Claude Desktop or an IDE does: from its own folder, with the SDK's minimal environment
    plus the configuration's `env`. Without those variables it says so at once, on stderr."""
    mine, _ = await two_tenants(store, settings)
    state, elsewhere = tmp_path / "project" / ".waypoint", tmp_path / "client"
    state.mkdir(parents=True)
    elsewhere.mkdir()
    # a `waypoint dev` runs in the project: its endpoints in stack.json, its lock held (here, by this process)
    info = StackInfo(settings.temporal_address, None, settings.database_url or "", str(state / "qdrant"), os.getpid())
    (state / "stack.json").write_text(json.dumps(dataclasses.asdict(info)))
    ours = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}  # this checkout's code
    config = readme_mcp_config()
    values = {"WAYPOINT_STATE_DIR": str(state), "WAYPOINT_TENANT": settings.tenant}
    assert set(config["env"]) == set(values) and Path(config["env"]["WAYPOINT_STATE_DIR"]).is_absolute()
    with open(state / "stack.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        command = [sys.executable, "-m", "waypoint", *config["args"]]
        params = StdioServerParameters(command=command[0], args=command[1:], env=values | ours, cwd=elsewhere)
        async with Client(params) as client:
            assert [r["run_id"] for r in await call(client, "list_runs")] == [mine]

        proc = await asyncio.create_subprocess_exec(
            *command, env=get_default_environment() | ours, cwd=elsewhere,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert (proc.returncode, out) == (1, b"")  # stdout is the MCP channel: nothing there
    line = err.decode().strip()
    assert line.startswith("error: no database") and len(line.splitlines()) == 1, line
    assert str(elsewhere / ".waypoint") in line and "WAYPOINT_STATE_DIR" in line and "WAYPOINT_DATABASE_URL" in line


async def test_memory_search_and_the_tools_that_act_when_configured(
    memory_worker: tuple[Waypoint, Any], store: RunStore, settings: Settings
):
    wp, episodes = memory_worker
    mine, theirs = await two_tenants(store, settings)
    await episodes.upsert(
        [
            Episode(settings.tenant, "calculator", mine, 1, "fact", "The vault code is 4412.", importance=0.9),
            Episode("someone-else", "calculator", theirs, 1, "fact", "The vault code is 9999.", importance=0.9),
        ]
    )
    async with over_stdio(settings, WAYPOINT_MCP_WRITE="true") as client:
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS | WRITE_TOOLS
        found = await call(client, "search_memory", query="what is the vault code", k=5)
        assert [m["text"] for m in found] == ["The vault code is 4412."]

        started = await call(client, "start_run", task="add", agent="calculator")
        result = await wp.result(started["run_id"])
        assert (result.status, result.output) == ("completed", "The answer is 15.")
        assert (await wp.run(started["run_id"])).tenant_id == settings.tenant

        forked = await call(client, "fork_run", run_id=started["run_id"], step=1)
        assert (await wp.result(forked["run_id"])).status == "completed"
        assert (await wp.run(forked["run_id"])).parent_run_id == started["run_id"]

        assert "has ended" in await error_of(client, "send_message", run_id=started["run_id"], text="hi")
        too_many = await error_of(client, "start_run", task="add", agent="calculator", max_steps=3_000_000_000)
        assert "at most 2147483647" in too_many
        assert "no run" in await error_of(client, "cancel_run", run_id=theirs)

        # a delayed run: scheduled at once, cancelled before it starts
        later = (await call(client, "start_run", task="add", agent="calculator", after_seconds=3600))["run_id"]

        async def held() -> Any:
            return next((r for r in await store.list_runs(settings.tenant) if r.run_id == later), None)

        row = await eventually(held, what="the scheduled row")
        assert row.status == "scheduled" and row.start_at is not None
        await call(client, "cancel_run", run_id=later)
        assert ((await wp.result(later)).status, (await wp.run(later)).steps) == ("cancelled", 0)

        # a scheduled agent: create, fire now, list with its run, delete
        made = await call(client, "create_schedule", agent="calculator", task="add", every_seconds=3600)
        sid = made["schedule_id"]
        await call(client, "change_schedule", schedule_id=sid, action="trigger")
        fired = await eventually(lambda: wp.runs(schedule_id=sid), what="the fired run")
        assert (await wp.result(fired[0].run_id)).status == "completed"
        listed = await call(client, "list_schedules")
        assert [(s["schedule_id"], s["recent"][0]["run_id"]) for s in listed] == [(sid, fired[0].run_id)]
        assert "invalid cron expression" in await error_of(
            client, "create_schedule", agent="calculator", task="add", cron="0 25 * * *"
        )
        assert (await call(client, "change_schedule", schedule_id=sid, action="delete"))["deleted"] is True
        assert "waypoint cron list" in await error_of(client, "change_schedule", schedule_id=sid, action="pause")


@pytest.fixture
def http_server(settings: Settings) -> Iterator[str]:
    port = reserve_port()
    env = cli_env(settings, WAYPOINT_MCP_API_KEY="s3cret-key")
    proc = subprocess.Popen(
        [sys.executable, "-m", "waypoint", "mcp", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
                assert time.monotonic() < deadline, "waypoint mcp did not listen"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_over_http_a_key_is_required_and_scopes_the_tenant(store: RunStore, settings: Settings, http_server: str):
    mine, _ = await two_tenants(store, settings)
    async with httpx.AsyncClient() as plain:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            answer = await plain.post(http_server, json=request, headers=headers)
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "unauthorized"

    async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-key"}) as http:
        async with Client(streamable_http_client(http_server, http_client=http)) as client:
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
            assert [r["run_id"] for r in await call(client, "list_runs")] == [mine]


async def test_the_http_transport_refuses_to_start_without_a_key(settings: Settings):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "waypoint", "mcp", "--transport", "http", env=cli_env(settings),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert err.decode().strip() == (
        "error: `waypoint mcp --transport http` needs a key: set WAYPOINT_MCP_API_KEY "
        "(clients send it as a bearer token)"
    )
