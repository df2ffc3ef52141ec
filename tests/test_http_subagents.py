"""Sub-agent trees through every surface, on the real stack with the research demo (a lead run that
starts three `note_reader` runs at once, then a `report_writer` run): a run's parent and children,
its tree and totals, one stream of the whole tree (resumable across all its runs), langgraph-sdk's
subgraph streaming, and the MCP tool; another tenant reaches none of it."""

from __future__ import annotations

import httpx
import pytest
from langgraph_sdk import get_client
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.conftest import ApiServer
from tests.helpers import Sse, sse_events
from tests.mcp_client import call, over_stdio
from waypoint.agents import AgentRegistry
from waypoint.app.http.trees import parse_tree_position
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.demo_research import RESEARCH_TASK, research
from waypoint.names import child_run_id
from waypoint.store.schema import events, runs

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]


@pytest.fixture
def research_worker(client: Client, engine: AsyncEngine, settings: Settings):
    """A worker of the research demo's agents (`async with research_worker():`), the workspace seeded."""
    seed_workspace(settings.resolved_workspace)
    return lambda: build_worker(client, engine, settings, AgentRegistry([research]))


def tree_ids(run_id: str) -> list[str]:
    """The research tree's runs in call order: the lead, three readers (step 1), the writer (step 2)."""
    return [run_id, *(child_run_id(run_id, 1, i) for i in range(3)), child_run_id(run_id, 2, 0)]


async def stream_tree(api: ApiServer, run_id: str, *, last_id: str | None = None, until=None) -> list[Sse]:
    """The log events of the tree's stream (deltas left out) until `until(event)` or its end."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    got: list[Sse] = []
    params = {"children": "true", "deltas": "false"}
    async with api.http.stream("GET", f"/v1/runs/{run_id}/stream", params=params, headers=headers) as response:
        assert response.status_code == 200
        async for event in sse_events(response):
            got.append(event)
            if until is not None and until(event):
                break
    return got


async def logs(engine: AsyncEngine, run_ids: list[str]) -> dict[str, list[int]]:
    async with engine.connect() as conn:
        query = select(events.c.run_id, events.c.seq).where(events.c.run_id.in_(run_ids)).order_by(events.c.seq)
        found: dict[str, list[int]] = {r: [] for r in run_ids}
        for run_id, seq in (await conn.execute(query)).all():
            found[run_id].append(seq)
    return found


async def test_a_runs_tree_over_http_and_one_resumable_stream_of_all_its_runs(
    api: ApiServer, research_worker, client: Client, engine: AsyncEngine, settings: Settings
):
    wp = Waypoint(client, engine, settings)
    async with research_worker():
        pass  # its catalog lets the run start; no worker runs it until the stream is open
    run_id = await wp.start_run(RESEARCH_TASK, agent="research")
    ids = tree_ids(run_id)
    readers, writer = ids[1:4], ids[4]

    async with research_worker():
        # opened before the run's first step: every sub-agent run starts while it is open
        first = await stream_tree(api, run_id, until=lambda e: e.data.get("run_id") == readers[1])
        resumed = await stream_tree(api, run_id, last_id=first[-1].id)  # to the end of the whole tree
        assert (await wp.result(run_id)).status == "completed"

    # every event of every run of the tree came once, in its run's order, tagged with its run
    received = [e for e in first + resumed if e.id is not None]
    assert all(e.event == e.data["kind"] for e in received)
    by_run: dict[str, list[int]] = {r: [] for r in ids}
    for event in received:
        by_run[event.data["run_id"]].append(event.data["seq"])
    assert by_run == await logs(engine, ids)  # nothing lost, nothing twice, across the cut
    assert readers[1] in {e.data["run_id"] for e in first}  # the cut came inside the tree, not before it
    # live: each sub-agent run's events came while its caller still ran, not after the lead had ended
    ended = [e.data["run_id"] for e in received if e.event == "run_finished"]
    assert sorted(ended) == sorted(ids) and ended[-1] == run_id
    assert {e.data["run_id"] for e in resumed} >= {writer}  # a run the cut-off id did not name yet
    # the id is a cursor per run: the last one names where each run's log ends
    assert parse_tree_position(run_id, received[-1].id) == {r: seqs[-1] for r, seqs in by_run.items()}
    assert parse_tree_position(run_id, first[-1].id)[readers[1]] == first[-1].data["seq"]

    # the run names its children, each child its caller
    got = (await api.http.get(f"/v1/runs/{run_id}")).json()
    assert got["parent"] is None
    assert [(c["run_id"], c["step"], c["call_index"]) for c in got["children"]] == [
        (readers[0], 1, 0),
        (readers[1], 1, 1),
        (readers[2], 1, 2),
        (writer, 2, 0),
    ]
    assert [c["agent"] for c in got["children"]] == ["note_reader"] * 3 + ["report_writer"]
    assert {c["status"] for c in got["children"]} == {"completed"}
    assert all(c["steps"] == 3 for c in got["children"][:3])
    child = (await api.http.get(f"/v1/runs/{readers[2]}")).json()
    assert child["parent"] == {"run_id": run_id, "step": 1, "call_index": 2} and child["children"] == []
    assert got["children"][2]["input_tokens"] == child["input_tokens"]
    assert got["children"][2]["cost_usd"] == child["cost_usd"]

    # the tree: depth first in call order, and totals that are the sums of its rows
    tree = (await api.http.get(f"/v1/runs/{run_id}/tree")).json()
    assert [(n["run_id"], n["depth"], n["caller_run_id"]) for n in tree["nodes"]] == [
        (run_id, 0, None),
        *((r, 1, run_id) for r in ids[1:]),
    ]
    assert [(n["caller_step"], n["caller_call_index"]) for n in tree["nodes"][1:]] == [(1, 0), (1, 1), (1, 2), (2, 0)]
    async with engine.connect() as conn:
        rows = (await conn.execute(select(runs).where(runs.c.root_run_id == run_id))).mappings().all()
    assert {r["run_id"] for r in rows} == set(ids)
    assert tree["totals"] == {
        "runs": 5,
        "steps": sum(r["steps"] for r in rows),
        "input_tokens": sum(r["input_tokens"] for r in rows),
        "output_tokens": sum(r["output_tokens"] for r in rows),
        "tokens": sum(r["input_tokens"] + r["output_tokens"] for r in rows),
        "cost_usd": pytest.approx(float(sum(r["cost_usd"] for r in rows))),
    }
    assert tree["totals"]["steps"] == 3 + 3 * 3 + 2  # the lead 3 steps, each reader 3, the writer 2
    below = (await api.http.get(f"/v1/runs/{readers[0]}/tree")).json()
    assert [n["run_id"] for n in below["nodes"]] == [readers[0]] and below["totals"]["runs"] == 1
    listed = {r["run_id"] for r in (await api.http.get("/v1/runs?limit=50")).json()["runs"]}
    assert {run_id, *readers} <= listed
    roots = {r["run_id"] for r in (await api.http.get("/v1/runs?limit=50&roots=true")).json()["runs"]}
    assert run_id in roots and not roots & set(readers)

    # a stream of a finished tree from a position: only what comes after it
    rest = await stream_tree(api, run_id, last_id=first[-1].id)
    assert sorted((e.data["run_id"], e.data["seq"]) for e in rest) == sorted(
        (e.data["run_id"], e.data["seq"]) for e in resumed
    )
    bad = await api.http.get(f"/v1/runs/{run_id}/stream?children=true", headers={"Last-Event-ID": "3,x:1"})
    assert bad.status_code == 400 and "14,1.0:6" in bad.json()["error"]["message"]

    # another tenant: 404 for the tree, its stream, and each run of it
    key_b, _ = await wp.keys.create("tenant-b", "b")
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {key_b}"}, timeout=60) as b:
        for url in (
            f"/v1/runs/{run_id}/tree",
            f"/v1/runs/{run_id}/stream?children=true",
            f"/v1/runs/{readers[0]}",
            f"/v1/runs/{readers[0]}/tree",
        ):
            r = await b.get(url)
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", (url, r.text)


async def test_langgraph_sdk_streams_the_sub_agent_runs_as_subgraphs_and_mcp_shows_the_tree(
    api: ApiServer, research_worker, settings: Settings
):
    lg = get_client(url=api.url, api_key=api.key)
    async with research_worker():
        parts = [
            part
            async for part in lg.runs.stream(
                None,
                "research",
                input={"messages": [{"role": "user", "content": RESEARCH_TASK}]},
                stream_mode=["values", "updates"],
                stream_subgraphs=True,
                version="v2",
            )
        ]
    run_id = next(p["data"]["run_id"] for p in parts if p["type"] == "metadata")
    ids = tree_ids(run_id)
    agents = ["note_reader"] * 3 + ["report_writer"]
    # langgraph-sdk splits the event name: each sub-agent run's parts carry its namespace
    namespaces = {tuple(p["ns"]) for p in parts}
    assert namespaces == {(), *((f"{agent}:{child}",) for agent, child in zip(agents, ids[1:], strict=True))}
    top = [p for p in parts if not p["ns"]]
    assert top[-1]["type"] == "values"
    assert top[-1]["data"]["messages"][-1]["content"].startswith("3 sub-agents read the notes at once")
    for agent, child in zip(agents, ids[1:], strict=True):
        mine = [p for p in parts if p["ns"] == [f"{agent}:{child}"]]
        assert {p["type"] for p in mine} == {"values", "updates"}
        output = (await api.http.get(f"/v1/runs/{child}")).json()["output"]
        assert mine[-1]["type"] == "values" and mine[-1]["data"]["messages"][-1]["content"] == output
        task = mine[0]["data"]["messages"][0]
        assert task["type"] == "human" and task["content"].startswith(("Read notes/", "Write research.md"))

    # the MCP server answers the same tree
    tree = (await api.http.get(f"/v1/runs/{run_id}/tree")).json()
    async with over_stdio(settings) as mcp:
        answered = await call(mcp, "run_tree", run_id=run_id)
        assert answered == tree
        assert [n["run_id"] for n in answered["nodes"]] == ids and answered["totals"]["runs"] == 5
        child = await call(mcp, "run_tree", run_id=ids[4])
        assert [(n["run_id"], n["depth"], n["caller_step"]) for n in child["nodes"]] == [(ids[4], 0, 2)]
