"""Agent Protocol assistants with versions, driven by `langgraph-sdk` against a real `waypoint serve`,
a real worker and Postgres: created, run (their config reaching the agent), updated, set back, deleted."""

from __future__ import annotations

import json

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError, ConflictError, NotFoundError

from tests.browser import sign_in
from tests.conftest import ApiServer
from tests.helpers import cli_env, human, waypoint
from waypoint.client import Waypoint
from waypoint.errors import Conflict, NotFound

pytestmark = pytest.mark.postgres


@pytest.fixture
def wp(client, engine, settings) -> Waypoint:
    return Waypoint(client, engine, settings)


async def _ran(api: ApiServer, lg, assistant_id: str) -> tuple[dict, dict]:
    """Run the assistant on a new thread to its end: (its protocol run, its /v1 run with `run_started`)."""
    thread = await lg.threads.create()
    run = await lg.runs.create(thread["thread_id"], assistant_id, input=human("add 2 and 3"))
    await lg.runs.join(thread["thread_id"], run["run_id"])
    shaped = await lg.runs.get(thread["thread_id"], run["run_id"])
    row = (await api.http.get(f"/v1/runs/{run['run_id']}")).json()
    started = await api.http.get(f"/v1/runs/{run['run_id']}/events", params={"kind": "run_started"})
    return shaped, {**row, "run_started": started.json()["events"][0]["payload"]}


async def test_assistant_versions_with_langgraph_sdk(api: ApiServer, worker):
    lg = get_client(url=api.url, api_key=api.key)
    made = await lg.assistants.create(
        "calculator",
        config={"configurable": {"instructions": "Add, briefly.", "model": "scripted", "thread_id": "ignored"}},
        context={"max_steps": 2},
        metadata={"team": "math"},
        name="brief calculator",
    )
    aid = made["assistant_id"]
    assert (made["graph_id"], made["version"], made["name"]) == ("calculator", 1, "brief calculator")
    assert (await lg.assistants.get(aid))["context"] == {"max_steps": 2}
    found = await lg.assistants.search(metadata={"team": "math"})
    assert [a["assistant_id"] for a in found] == [aid]
    assert {"calculator", aid} <= {a["assistant_id"] for a in await lg.assistants.search(limit=100)}
    assert await lg.assistants.count(graph_id="calculator") == 2  # the agent's own and this one
    assert (await lg.assistants.get_schemas(aid))["graph_id"] == "calculator"
    assert {"source": "tools", "target": "model"} in (await lg.assistants.get_graph(aid))["edges"]

    # its run runs the calculator with its instructions and its max_steps, and records the version
    shaped, row = await _ran(api, lg, aid)
    assert shaped["assistant_id"] == aid and shaped["metadata"]["assistant_version"] == 1
    assert (row["assistant_id"], row["assistant_version"], row["agent"]) == (aid, 1, "calculator")
    assert row["run_started"]["instructions"] == "Add, briefly."
    assert (row["status"], row["steps"]) == ("max_steps", 2)  # the calculator alone answers at step 3

    # an update is version 2; the versions list both; set_latest goes back to 1 for new runs
    # (what an update leaves out stays: here its context is replaced, by none)
    second = await lg.assistants.update(aid, config={"configurable": {"instructions": "Add, at length."}}, context={})
    assert (second["version"], second["metadata"]) == (2, {"team": "math"})
    versions = await lg.assistants.get_versions(aid)
    assert [v["version"] for v in versions] == [2, 1]
    assert versions[0]["config"]["configurable"]["instructions"] == "Add, at length."
    _, row = await _ran(api, lg, aid)
    assert (row["assistant_version"], row["run_started"]["instructions"], row["status"]) == (
        2,
        "Add, at length.",
        "completed",  # version 2 has no max_steps: the agent's own
    )
    # the viewer's run page names the assistant and the version it ran
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        await sign_in(http, api.key)
        page = (await http.get(f"/ui/runs/{row['run_id']}")).text
    assert f'<dt>Assistant</dt><dd id="run-assistant">{aid}, version 2 ' in page, page[:2000]
    back = await lg.assistants.set_latest(aid, 1)
    assert back["version"] == 1 and back["context"] == {"max_steps": 2}
    _, row = await _ran(api, lg, aid)
    assert (row["assistant_version"], row["run_started"]["instructions"]) == (1, "Add, briefly.")
    assert (row["status"], row["steps"]) == ("max_steps", 2)
    # a run's own config goes over its assistant's
    thread = await lg.threads.create()
    own = await lg.runs.wait(thread["thread_id"], aid, input=human("add"), config={"configurable": {"max_steps": 3}})
    assert own["messages"][-1]["content"] == "The answer is 15."
    # a catalog agent runs as its built-in assistant, version 1
    shaped, row = await _ran(api, lg, "calculator")
    assert (row["assistant_id"], row["assistant_version"], row["run_started"]["instructions"]) == (
        "calculator",
        1,
        "Add numbers with the add tool, then answer.",
    )

    await lg.assistants.delete(aid)
    with pytest.raises(NotFoundError):
        await lg.assistants.get(aid)
    assert row["run_id"]  # its runs stay (and keep the id and version they ran)


async def test_what_an_assistant_refuses(api: ApiServer, worker, wp):
    lg = get_client(url=api.url, api_key=api.key)
    http = api.http
    aid = (await lg.assistants.create("calculator", assistant_id="calc-a"))["assistant_id"]
    with pytest.raises(ConflictError):
        await lg.assistants.create("calculator", assistant_id=aid)
    assert (await lg.assistants.create("calculator", assistant_id=aid, if_exists="do_nothing"))["version"] == 1

    r = await http.patch(f"/assistants/{aid}", json={"graph_id": "looper"})
    assert r.status_code == 400 and "keeps its graph" in r.json()["error"]["message"]
    r = await http.post("/assistants", json={"graph_id": "calculator", "config": {"configurable": {"temp": 1}}})
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "temp" in message and "instructions" in message and "max_steps" in message
    r = await http.post("/assistants", json={"graph_id": "calculator", "context": {"model": "nonsense"}})
    assert r.status_code == 400 and "unknown model spec" in r.json()["error"]["message"]
    r = await http.post("/assistants", json={"graph_id": "nobody"})
    assert r.status_code == 400 and "no agent" in r.json()["error"]["message"]
    r = await http.post("/assistants", json={"graph_id": "calculator", "assistant_id": "looper"})
    assert r.status_code == 409
    r = await http.post("/threads/x/runs", json={"assistant_id": aid, "input": human("x"), "context": {"tempo": 1}})
    assert r.status_code == 400 and "tempo" in r.json()["error"]["message"]

    assert (await http.get("/assistants/nobody")).status_code == 404
    assert (await http.patch("/assistants/nobody", json={})).status_code == 404
    assert (await http.delete("/assistants/nobody")).status_code == 404
    assert (await http.post(f"/assistants/{aid}/latest", json={"version": 7})).status_code == 404
    assert (await http.post("/assistants/calculator/latest", json={"version": 2})).status_code == 404
    # a catalog agent is read-only: its change names the way (an assistant of it)
    r = await http.patch("/assistants/calculator", json={"name": "x"})
    assert r.status_code == 409 and "POST /assistants" in r.json()["error"]["message"]
    with pytest.raises(ConflictError):
        await lg.assistants.delete("calculator")
    assert [v["version"] for v in await lg.assistants.get_versions("calculator")] == [1]
    with pytest.raises(BadRequestError):
        await lg.assistants.update(aid, context={"user_budget": 3})
    assert (await lg.assistants.get(aid))["version"] == 1  # nothing was written

    # another tenant sees none of it, and cannot take its id
    with pytest.raises(NotFound):
        await wp.assistants.get(aid, tenant_id="other")
    with pytest.raises(Conflict):
        await wp.assistants.create("calculator", assistant_id=aid, if_exists="do_nothing", tenant_id="other")


async def test_the_assistants_on_v1_and_the_cli(api: ApiServer, worker, wp, settings):
    """`GET /v1/assistants` and `waypoint assistants list|show|versions` read the same client."""
    made = await wp.assistants.create("calculator", assistant_id="cli-calc", name="for the CLI")
    await wp.assistants.update("cli-calc", context={"max_steps": 4})
    listed = (await api.http.get("/v1/assistants")).json()["assistants"]
    assert {"calculator", made.assistant_id} <= {a["assistant_id"] for a in listed}
    one = (await api.http.get("/v1/assistants/cli-calc")).json()
    assert (one["version"], one["context"]) == (2, {"max_steps": 4})
    assert [v["version"] for v in (await api.http.get("/v1/assistants/cli-calc/versions")).json()["versions"]] == [2, 1]
    assert (await api.http.get("/v1/assistants/nobody")).status_code == 404
    env = cli_env(settings) | {"COLUMNS": "160"}
    listed = await waypoint(settings, "assistants", "list", env=env)
    assert "cli-calc" in listed.out and "calculator" in listed.out and "built in" in listed.out, listed.out
    shown = await waypoint(settings, "assistants", "show", "cli-calc", "--json", env=env)
    assert json.loads(shown.out)["context"] == {"max_steps": 4}
    missing = await waypoint(settings, "assistants", "show", "nobody", env=env)
    assert missing.code == 1 and missing.err.startswith("error:") and "nobody" in missing.err
