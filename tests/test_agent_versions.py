"""Agent versions across a deploy: a run keeps the instructions and tools it started with when a
worker on a changed agent takes it over; a new run gets the new version. And what the store keeps
of versions: fingerprints, the runs filter, tenant isolation."""

from __future__ import annotations

import asyncio
import importlib
import uuid

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.browser import sign_in
from tests.conftest import ApiServer
from tests.helpers import eventually, one_line_error, waypoint
from tests.mcp_client import call, over_stdio
from tests.processes import kill
from waypoint.agents import AgentRegistry
from waypoint.app.devstack import spawn_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import InvalidInput, NotFound
from waypoint.names import RunStatus
from waypoint.store import RunStore
from waypoint.store.steps import NewRun
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.types import RunPlan
from waypoint.versions import AgentVersion, current_version

pytestmark = pytest.mark.postgres


def version_of(module: str):
    agent = importlib.import_module(module).versioned
    return current_version(agent, AgentRegistry([agent]))


def tool_set(body: dict) -> dict[str, str]:
    """The tools one request offered: name -> description."""
    return {t["function"]["name"]: t["function"]["description"] for t in body.get("tools") or []}


def system_text(body: dict) -> str:
    return "\n".join(str(m.get("content")) for m in body["messages"] if m.get("role") == "system")


@pytest.mark.timeout(240)
async def test_a_run_keeps_its_agent_version_across_a_deploy_that_changes_it(
    client: Client, engine: AsyncEngine, settings: Settings, fake_openai: FakeOpenAI
):
    v1, v2 = version_of("tests.versioned_agents_v1"), version_of("tests.versioned_agents_v2")
    assert v1.fingerprint != v2.fingerprint
    fake_openai.answer(
        Turn(tool_calls=[("lookup", {"query": "ducks"})]),  # waits for approval: the deploy happens here
        Turn(tool_calls=[("archive", {"note": "ducks"})]),  # a tool deploy 2 removed
        Turn(content="done with A"),
        Turn(content="done with B"),  # the new run's
    )
    wp = Waypoint(client, engine, settings)
    worker = await asyncio.to_thread(
        spawn_worker, settings.child_environment(WAYPOINT_AGENTS="tests.versioned_agents_v1")
    )
    workers = [worker]
    try:
        old = await wp.start_run("find ducks", agent="versioned")

        async def waits() -> bool:
            try:
                return (await wp.run(old)).status == RunStatus.WAITING_APPROVAL
            except NotFound:  # its row is not written yet
                return False

        await eventually(waits, what="the run waiting for approval", timeout=60)
        kill(worker)
        workers.append(
            await asyncio.to_thread(
                spawn_worker, settings.child_environment(WAYPOINT_AGENTS="tests.versioned_agents_v2")
            )
        )
        await wp.approve(old)
        result = await asyncio.wait_for(wp.result(old), 120)
        assert (result.status, result.output) == ("completed", "done with A"), result
        assert len(fake_openai.seen) == 3

        new = await wp.start_run("find geese", agent="versioned")
        fresh = await asyncio.wait_for(wp.result(new), 60)
        assert fresh.output == "done with B"
        catalog = await wp.agent("versioned")  # registered by the worker now serving it
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(15)

    bodies = [s.body for s in fake_openai.seen]
    for body in bodies[:3]:  # every call of the old run, before and after the deploy
        assert "Version A" in system_text(body) and "Version B" not in system_text(body)
        assert tool_set(body) == {
            "lookup": "Look a query up (version A).",
            "archive": "Archive a note (only version A has this tool).",
        }
    assert "Version B" in system_text(bodies[3])
    assert set(tool_set(bodies[3])) == {"lookup", "summarize"}

    old_row, new_row = await wp.run(old), await wp.run(new)
    assert old_row.agent_fingerprint == v1.fingerprint
    assert new_row.agent_fingerprint == v2.fingerprint == catalog.fingerprint
    assert (await wp.agent_version(v1.fingerprint[:8])).instructions == v1.instructions
    assert (await wp.agent_version(v2.fingerprint)).tool_names == ["lookup", "summarize"]
    assert [r.run_id for r in await wp.runs(fingerprint=v1.fingerprint[:10])] == [old]
    assert [r.run_id for r in await wp.runs(fingerprint=v2.fingerprint.upper()[:10])] == [new]

    # The removed tool: one error result that says why and names the fix, not a retried activity.
    results = [e.payload for e in await wp.events(old, kinds=["tool_result"])]
    archived = [p for p in results if p["name"] == "archive"]
    assert len(archived) == 1 and archived[0]["is_error"]
    assert "removed from agent 'versioned' by a deploy" in archived[0]["output"]
    assert "deploy the tool back" in archived[0]["output"]
    assert next(p for p in results if p["name"] == "lookup")["output"] == "found ducks (B)"  # the tool ran on deploy 2


async def test_agent_versions_are_the_tenants_own(client: Client, engine: AsyncEngine, settings: Settings, worker):
    """A run's version is readable by its tenant only; another tenant gets "not found" for it, and
    its runs filter finds nothing; bad fingerprints are refused naming the rule."""
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add 2 and 3", agent="calculator")
    await asyncio.wait_for(wp.result(run_id), 60)
    fingerprint = (await wp.run(run_id)).agent_fingerprint
    assert fingerprint is not None and len(fingerprint) == 64
    version = await wp.agent_version(fingerprint)
    assert version.agent == "calculator" and version.models == ["scripted"]
    assert [r.run_id for r in await wp.runs(fingerprint=fingerprint[:6])] == [run_id]

    other = "tenant-other-" + settings.tenant[-8:]
    with pytest.raises(NotFound):
        await wp.agent_version(fingerprint, tenant_id=other)
    assert await wp.runs(fingerprint=fingerprint[:6], tenant_id=other) == []
    for bad in ("xyz123", "abc", "a" * 65, "ab cd"):
        with pytest.raises(InvalidInput, match="hex digits"):
            await wp.runs(fingerprint=bad)
        with pytest.raises(InvalidInput, match="hex digits"):
            await wp.agent_version(bad)


async def versioned_run(store: RunStore, tenant: str, instructions: str) -> tuple[str, str]:
    """A run row (as start_run writes it) started with a version of these instructions; (run id, fingerprint)."""
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    version = AgentVersion("calculator", instructions, [], ["scripted"])
    plan = RunPlan(model="scripted", max_steps=5)
    await store.steps.create_run(NewRun(run_id, tenant, "calculator", "add", instructions, plan, version=version))
    return run_id, version.fingerprint


@pytest.mark.timeout(180)
async def test_every_surface_shows_and_filters_by_the_fingerprint(api: ApiServer, store: RunStore, settings: Settings):
    """HTTP (/v1/runs?fingerprint=, the run's JSON, /v1/agent-versions/{fp}), the viewer (runs list
    filter, run page), MCP's list_runs and the CLI (`runs --fingerprint`, `status`, `agent-version`)
    all find the run of one version and not the other's; another tenant gets 404 for the version."""
    one, fp_one = await versioned_run(store, settings.tenant, f"Add, version one {uuid.uuid4().hex}.")
    two, fp_two = await versioned_run(store, settings.tenant, f"Add, version two {uuid.uuid4().hex}.")
    http = api.http

    listed = (await http.get("/v1/runs", params={"fingerprint": fp_one[:10]})).json()["runs"]
    assert [r["run_id"] for r in listed] == [one] and listed[0]["agent_fingerprint"] == fp_one
    assert (await http.get(f"/v1/runs/{two}")).json()["agent_fingerprint"] == fp_two
    version = await http.get(f"/v1/agent-versions/{fp_one[:8]}")
    assert version.status_code == 200 and version.json()["fingerprint"] == fp_one
    assert version.json()["instructions"].startswith("Add, version one")
    for bad in ("nothex", "ab", "f" * 65):
        r = await http.get("/v1/runs", params={"fingerprint": bad})
        assert r.status_code == 400 and "hex digits" in r.json()["error"]["message"], r.text
    assert (await http.get(f"/v1/agent-versions/{'0' * 64}")).status_code == 404
    key_b, _ = await Waypoint(None, store.engine, settings).keys.create("tenant-b", "b")  # type: ignore[arg-type]
    other = await http.get(f"/v1/agent-versions/{fp_one}", headers={"Authorization": f"Bearer {key_b}"})
    assert other.status_code == 404 and other.json()["error"]["code"] == "not_found"

    async with httpx.AsyncClient(base_url=api.url) as viewer:
        await sign_in(viewer, api.key)
        page = (await viewer.get("/ui", params={"fingerprint": fp_two[:12]})).text
        assert two in page and one not in page and f'value="{fp_two[:12]}"' in page
        assert fp_one in (await viewer.get(f"/ui/runs/{one}")).text

    async with over_stdio(settings) as client:
        runs = await call(client, "list_runs", fingerprint=fp_two[:6])
        assert [r["run_id"] for r in runs] == [two] and runs[0]["agent_fingerprint"] == fp_two

    listing = await waypoint(settings, "runs", "--fingerprint", fp_one[:8])
    assert listing.code == 0 and one in listing.out and two not in listing.out and fp_one[:12] in listing.out
    assert fp_two in (await waypoint(settings, "status", two)).out
    shown = await waypoint(settings, "agent-version", fp_one[:8])
    assert shown.code == 0 and "Add, version one" in shown.out and fp_one in shown.out
    assert "hex digits" in one_line_error(await waypoint(settings, "runs", "--fingerprint", "xyz!"))
