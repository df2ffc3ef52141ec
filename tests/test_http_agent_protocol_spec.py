"""The open Agent Protocol (langchain-ai/agent-protocol, openapi.json 0.1.6) drives Waypoint: every operation
of the spec has a route, schemathesis sends requests generated from the spec to a real `waypoint serve`
(no 5xx; every answer fits the spec's schemas), and a real conversation through the spec's names
answers as its schemas say. tests/data/agent_protocol_0.1.6.json is the spec reduced to its facts
(tests/data/reduce_openapi.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error, response_schema_conformance
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.conftest import ApiServer
from tests.helpers import eventually, human

pytestmark = pytest.mark.postgres

SPEC_PATH = Path(__file__).parent / "data" / "agent_protocol_0.1.6.json"
SPEC = json.loads(SPEC_PATH.read_text())
METHODS = ("get", "post", "put", "patch", "delete")
OPERATIONS = [(path, method) for path, item in SPEC["paths"].items() for method in item if method in METHODS]
# Waypoint answers these 501 `not_supported`: the streaming protocol's thread streams (its channel-filtered
# SSE stream and its WebSocket: an upgrade is refused with the same JSON error), and writes to the store
# and its namespace listing (Waypoint's store is its episodic memory: runs write it, POST
# /store/items/search reads it). Every other operation is served.
NOT_YET = {
    ("/threads/{thread_id}/stream", "post"),
    ("/threads/{thread_id}/stream", "get"),
    ("/store/items", "put"),
    ("/store/items", "get"),
    ("/store/items", "delete"),
    ("/store/namespaces", "post"),
}
EXAMPLES = 6  # per operation: the whole fuzz stays within seconds


def test_the_reduced_spec_is_the_whole_spec():
    assert SPEC["info"]["version"] == "0.1.6" and len(OPERATIONS) == 27
    text = SPEC_PATH.read_text()
    assert '"summary"' not in text and '"example' not in text


def concrete(path: str) -> str:
    return (
        path.replace("{agent_id}", "calculator")
        .replace("{thread_id}", str(uuid.uuid4()))
        .replace("{run_id}", str(uuid.uuid4()))
    )


async def test_every_operation_of_the_spec_has_a_route(api: ApiServer):
    for path, method in OPERATIONS:
        kwargs: dict[str, Any] = {"json": {}} if method in ("post", "put", "patch") else {}
        if path == "/store/items" and method == "delete":
            kwargs = {"content": b"{}", "headers": {"Content-Type": "application/json"}}
        r = await api.http.request(method.upper(), concrete(path), **kwargs)
        answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
        code = answer["error"]["code"] if isinstance(answer, dict) and "error" in answer else None
        assert r.status_code != 405 and code not in ("route_not_found", "method_not_allowed"), (path, method, r.text)
        assert r.status_code != 501 or (path, method) in NOT_YET, (path, method, r.text)


def exercise(operation: schemathesis.APIOperation, url: str, headers: dict[str, str]) -> None:
    """EXAMPLES requests generated for one operation; raises what schemathesis found."""
    allowed_501 = (operation.path, operation.method.lower()) in NOT_YET

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy())
    def check(case: schemathesis.Case) -> None:
        response = case.call(base_url=url, headers=headers, timeout=30)
        if allowed_501 and response.status_code == 501:
            assert response.json()["error"]["code"] == "not_supported"
            return
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    check()


def fuzz(url: str, key: str) -> list[str]:
    """Every operation of the spec (schemathesis is sync: this runs in a thread while the server answers
    on the test's event loop); the failures, as text."""
    failures: list[str] = []
    for result in schemathesis.openapi.from_dict(SPEC).get_all_operations():
        operation = result.ok()
        try:
            exercise(operation, url, {"Authorization": f"Bearer {key}"})
        except Exception as e:  # noqa: BLE001 - collected, so one run names every failing operation
            failures.append(f"{operation.method.upper()} {operation.path}: {e!r}"[:3000])
    return failures


async def test_requests_generated_from_the_spec(api: ApiServer):
    """No 5xx (but the 501 of NOT_YET), and every answer the spec describes fits its schema."""
    failures = await asyncio.to_thread(fuzz, api.url, api.key)
    assert not failures, "\n\n".join(failures)


def relaxed() -> dict[str, Any]:
    """The spec, but for the one thing Waypoint answers otherwise on purpose: its run ids are Temporal
    workflow ids (`run-<hex>`) and its checkpoint ids `<run_id>:<step>`, not uuids."""
    spec = json.loads(SPEC_PATH.read_text())
    schemas = spec["components"]["schemas"]
    del schemas["Run"]["allOf"][1]["properties"]["run_id"]["format"]
    del schemas["ThreadCheckpoint"]["properties"]["checkpoint_id"]["format"]
    return spec


def fits(path: str, method: str, response: Any) -> Any:
    """The answer's JSON, after checking it against the spec's schema for the operation and status."""
    schemathesis.openapi.from_dict(relaxed())[path][method.upper()].validate_response(response)
    return response.json() if response.content else None


async def test_a_conversation_through_the_spec_names(api: ApiServer, worker):
    http = api.http
    agents = fits("/agents/search", "post", await http.post("/agents/search", json={"name": "calc"}))
    assert [a["agent_id"] for a in agents] == ["calculator"] and agents[0]["capabilities"]["ap.io.streaming"]
    assert fits("/agents/{agent_id}", "get", await http.get("/agents/calculator"))["name"] == "calculator"
    shapes = fits("/agents/{agent_id}/schemas", "get", await http.get("/agents/calculator/schemas"))
    assert shapes["input_schema"]["required"] == ["messages"]

    thread = fits("/threads", "post", await http.post("/threads", json={"metadata": {"user": "ada"}}))
    tid = thread["thread_id"]
    command = {"id": 1, "method": "run.start", "params": {"agent_id": "calculator", "input": human("add 2 and 3")}}
    started = fits("/threads/{thread_id}/commands", "post", await http.post(f"/threads/{tid}/commands", json=command))
    assert started["type"] == "success" and started["id"] == 1
    run_id = started["result"]["run_id"]

    done = fits("/runs/{run_id}/wait", "get", await http.get(f"/runs/{run_id}/wait"))
    assert (done["run"]["run_id"], done["run"]["thread_id"], done["run"]["status"]) == (run_id, tid, "success")
    assert done["messages"][0] == {**done["messages"][0], "role": "user", "content": "add 2 and 3"}
    assert done["messages"][-1]["role"] == "assistant" and done["messages"][-1]["content"] == "The answer is 15."

    on_thread = fits("/runs/search", "post", await http.post("/runs/search", json={"thread_id": tid}))
    assert [r["run_id"] for r in on_thread] == [run_id]
    found = await http.post("/runs/search", json={"agent_id": "calculator", "status": "success", "limit": 1})
    assert [r["run_id"] for r in fits("/runs/search", "post", found)] == [run_id]
    assert fits("/runs/search", "post", await http.post("/runs/search", json={"status": "error"})) == []

    history = await http.get(f"/threads/{tid}/history", params={"limit": 2})
    assert len(fits("/threads/{thread_id}/history", "get", history)) == 2
    state = (await http.post(f"/threads/{tid}/commands", json={"id": 2, "method": "state.get"})).json()
    assert state["result"]["values"] == done["values"]
    listed = {"id": 3, "method": "state.listCheckpoints", "params": {"limit": 2}}
    assert (await http.post(f"/threads/{tid}/commands", json=listed)).json()["result"]["checkpoints"] == history.json()
    # the thread is not interrupted: a response to it is refused, as a command's error
    respond = {"id": 4, "method": "input.respond", "params": {"response": "yes"}}
    refused = fits("/threads/{thread_id}/commands", "post", await http.post(f"/threads/{tid}/commands", json=respond))
    assert refused["type"] == "error" and refused["id"] == 4 and refused["message"]

    ended = await http.post(f"/runs/{run_id}/cancel")
    assert ended.status_code == 409 and ended.json()["error"]["code"] == "conflict"
    assert (await http.delete(f"/runs/{run_id}")).status_code == 204
    gone = await http.get(f"/runs/{run_id}/wait")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    assert fits("/runs/search", "post", await http.post("/runs/search", json={"thread_id": tid})) == []


async def test_a_run_created_with_the_specs_body(api: ApiServer, worker):
    """The spec's run create names the agent `agent_id`, gives `messages` instead of an input, and
    puts `thread_id` in the body: the run is that thread's next run."""
    http = api.http
    tid = (await http.post("/threads", json={})).json()["thread_id"]
    body = {"agent_id": "calculator", "thread_id": tid, "messages": [{"role": "user", "content": "add 2 and 3"}]}
    created = await http.post("/runs", json=body)
    assert created.status_code == 200, created.text
    run_id = created.json()["run_id"]
    done = fits("/runs/{run_id}/wait", "get", await http.get(f"/runs/{run_id}/wait"))
    assert (done["run"]["thread_id"], done["run"]["status"]) == (tid, "success")
    assert done["messages"][0]["content"] == "add 2 and 3"
    on_thread = fits("/runs/search", "post", await http.post("/runs/search", json={"thread_id": tid}))
    assert [r["run_id"] for r in on_thread] == [run_id]
    nameless = await http.post("/runs", json={"messages": body["messages"]})
    assert nameless.status_code == 422  # neither agent_id nor assistant_id


async def test_bad_input_through_the_spec_names(api: ApiServer):
    http = api.http
    unknown = await http.get("/agents/no-such-agent/schemas")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "unknown_agent"
    nowhere = await http.post(f"/threads/{uuid.uuid4()}/commands", json={"id": 1, "method": "state.get"})
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "not_found"
    tid = (await http.post("/threads", json={})).json()["thread_id"]
    for body in ({"channels": []}, {"channels": ["nope"]}, {"channels": ["values"], "since": -1}):
        r = await http.post(f"/threads/{tid}/stream", json=body)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_body", body
    r = await http.post(f"/threads/{tid}/stream", json={"channels": ["values", "custom:progress"]})
    assert r.status_code == 501 and "GET /threads/{thread_id}/runs/{run_id}/stream" in r.json()["error"]["message"]
    for body in ({"method": "state.get"}, {"id": -1, "method": "state.get"}):
        r = await http.post(f"/threads/{tid}/commands", json=body)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_body", body
    odd = (await http.post(f"/threads/{tid}/commands", json={"id": 7, "method": "state.fork"})).json()
    assert odd == {**odd, "type": "error", "id": 7, "error": "not_supported"} and "run.start" in odd["message"]
    nameless = {"id": 8, "method": "run.start", "params": {"input": human("hi")}}
    refused = (await http.post(f"/threads/{tid}/commands", json=nameless)).json()
    assert (refused["error"], refused["id"]) == ("invalid_input", 8) and "agent_id" in refused["message"]
    r = await http.post("/runs/search", json={"status": "running"})
    assert r.status_code == 422 and "status" in r.json()["error"]["message"]
    r = await http.post(f"/runs/{uuid.uuid4()}/cancel", params={"action": "undo"})
    assert r.status_code == 422 and "action" in r.json()["error"]["message"]
    for method in ("GET", "POST", "DELETE"):
        path = {"GET": "/wait", "POST": "/cancel", "DELETE": ""}[method]
        r = await http.request(method, f"/runs/{uuid.uuid4()}{path}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", method


async def test_the_specs_run_wait_and_create_answer_in_the_specs_shapes(api: ApiServer, worker):
    """`POST /runs/wait` and `POST /runs` with the spec's body (`agent_id`) answer the spec's
    RunWaitResponse and Run; the same paths with LangGraph's body answer LangGraph's shapes."""
    http = api.http
    body = {"agent_id": "calculator", "messages": [{"role": "user", "content": "add 2 and 3"}]}
    done = fits("/runs/wait", "post", await http.post("/runs/wait", json=body))
    run = done["run"]
    assert (run["status"], run["agent_id"], run["assistant_id"]) == ("success", "calculator", "calculator")
    assert "thread_id" not in run  # a run on no thread
    assert [m["role"] for m in done["messages"]][:2] == ["user", "assistant"]
    assert done["messages"][-1] == {**done["messages"][-1], "role": "assistant", "content": "The answer is 15."}
    assert done["values"]["messages"][0]["type"] == "human"
    assert (await http.get(f"/runs/{run['run_id']}/wait")).json() == done  # what waiting by its id answers

    tid = (await http.post("/threads", json={})).json()["thread_id"]
    on_thread = fits("/runs/wait", "post", await http.post("/runs/wait", json={**body, "thread_id": tid}))
    assert on_thread["run"]["thread_id"] == tid and on_thread["messages"][0]["content"] == "add 2 and 3"

    created = fits("/runs", "post", await http.post("/runs", json=body))
    assert created["agent_id"] == "calculator" and created["status"] == "pending" and "thread_id" not in created

    langgraph = {"assistant_id": "calculator", "input": human("add 2 and 3")}
    values = await http.post("/runs/wait", json=langgraph)
    assert list(values.json()) == ["messages"] and "role" not in values.json()["messages"][0]
    stateless = (await http.post("/runs", json=langgraph)).json()
    assert stateless["thread_id"] is None and "agent_id" not in stateless


@pytest.mark.timeout(240)
async def test_store_items_are_the_specs_items(api: ApiServer, memory_worker):
    """Episodic memory read through `POST /store/items/search` fits the spec's Item: `created_at` and
    `updated_at` are the times the episode was first and last stored."""
    http = api.http
    tid = (await http.post("/threads", json={})).json()["thread_id"]
    done = await http.post(f"/threads/{tid}/runs/wait", json={"assistant_id": "scout", "input": human("launch code?")})
    assert done.status_code == 200, done.text
    run_id = (await http.get(f"/threads/{tid}/runs")).json()[0]["run_id"]

    async def remembered() -> bool:
        return bool((await http.get(f"/v1/runs/{run_id}/memories")).json()["memories"])

    await eventually(remembered, timeout=60, what="the run's episodes in memory")
    search = {"namespace_prefix": ["memories", "scout", run_id], "query": "launch code"}
    items = fits("/store/items/search", "post", await http.post("/store/items/search", json=search))["items"]
    assert items and all(item["value"]["run_id"] == run_id for item in items)
    for item in items:
        first, last = datetime.fromisoformat(item["created_at"]), datetime.fromisoformat(item["updated_at"])
        assert first.tzinfo is not None and first <= last <= datetime.now(UTC)


async def test_the_thread_websocket_is_refused_with_the_json_error(api: ApiServer):
    """A real WebSocket client opening the spec's `GET /threads/{thread_id}/stream` gets the 501 the
    README promises, with the API's JSON error; an upgrade to no route gets the JSON 404."""
    tid = (await api.http.post("/threads", json={})).json()["thread_id"]
    base = api.url.replace("http://", "ws://", 1)
    for path, status, code in (
        (f"/threads/{tid}/stream", 501, "not_supported"),
        (f"/threads/{tid}/stream/events", 501, "not_supported"),
        ("/threads/no/such/socket", 404, "route_not_found"),
    ):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(base + path, additional_headers=api.headers()):
                pass
        answer = refused.value.response
        assert answer.status_code == status, (path, answer.status_code, answer.body)
        error = json.loads(answer.body)["error"]
        assert error["code"] == code, path
        if status == 501:
            assert "GET /threads/{thread_id}/runs/{run_id}/stream" in error["message"]
