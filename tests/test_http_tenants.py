"""Over HTTP, tenant B reaches nothing of tenant A: every endpoint answers 404 for A's run and
thread, exactly as for one that does not exist. The tenant comes from the key, never the body."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import ApiServer
from tests.helpers import eventually

pytestmark = pytest.mark.postgres

RUN_ENDPOINTS = [
    ("GET", "/v1/runs/{run}", None),
    ("GET", "/v1/runs/{run}/steps", None),
    ("GET", "/v1/runs/{run}/lineage", None),
    ("GET", "/v1/runs/{run}/steps/1/state", None),
    ("GET", "/v1/runs/{run}/diff?a=1&b=2", None),
    ("GET", "/v1/runs/{run}/compare/{run}", None),
    ("GET", "/v1/runs/{run}/events", None),
    ("GET", "/v1/runs/{run}/export", None),
    ("GET", "/v1/runs/{run}/stream", None),
    ("GET", "/v1/runs/{run}/stream?format=agui", None),
    ("GET", "/v1/runs/{run}/stream?children=true", None),
    ("GET", "/v1/runs/{run}/tree", None),
    ("GET", "/v1/runs/{run}/replay", None),
    ("GET", "/v1/runs/{run}/verify", None),
    ("GET", "/v1/runs/{run}/trace", None),
    ("GET", "/v1/runs/{run}/compactions", None),
    ("GET", "/v1/runs/{run}/memories", None),
    ("POST", "/v1/runs/{run}/fork", {"step": 1}),
    ("POST", "/v1/runs/{run}/rerun", {}),
    ("POST", "/v1/runs/{run}/compact", None),
    ("POST", "/v1/runs/{run}/pause", None),
    ("POST", "/v1/runs/{run}/resume", None),
    ("POST", "/v1/runs/{run}/cancel", {"reason": "mine now"}),
    ("POST", "/v1/runs/{run}/send", {"text": "hi"}),
    ("POST", "/v1/runs/{run}/approve", {}),
    ("POST", "/v1/runs/{run}/deny", {}),
    ("DELETE", "/v1/runs/{run}/memories", None),
    ("DELETE", "/v1/runs/{run}", None),
]

THREAD_ENDPOINTS = [
    ("GET", "/threads/{thread}", None),
    ("PATCH", "/threads/{thread}", {"metadata": {"x": 1}}),
    ("GET", "/threads/{thread}/state", None),
    ("GET", "/threads/{thread}/state/{run}:1", None),
    ("POST", "/threads/{thread}/history", {}),
    ("POST", "/threads/{thread}/copy", None),
    ("GET", "/threads/{thread}/runs", None),
    (
        "POST",
        "/threads/{thread}/runs",
        {"assistant_id": "scout", "input": {"messages": [{"role": "user", "content": "x"}]}},
    ),
    (
        "POST",
        "/threads/{thread}/runs/wait",
        {"assistant_id": "scout", "input": {"messages": [{"role": "user", "content": "x"}]}},
    ),
    ("GET", "/threads/{thread}/runs/{run}", None),
    ("GET", "/threads/{thread}/runs/{run}/join", None),
    ("GET", "/threads/{thread}/runs/{run}/stream", None),
    ("GET", "/threads/{thread}/stream", None),
    ("POST", "/threads/{thread}/runs/{run}/cancel", None),
    ("DELETE", "/threads/{thread}/runs/{run}", None),
    ("DELETE", "/threads/{thread}", None),
]


@pytest.mark.timeout(240)
async def test_tenant_b_gets_404_for_every_run_and_thread_of_tenant_a(api: ApiServer, memory_worker, settings):
    wp, _ = memory_worker
    a = api.http
    created = await a.post("/threads", json={"metadata": {"owner": "a"}})
    thread_id = created.json()["thread_id"]
    done = await a.post(
        f"/threads/{thread_id}/runs/wait",
        json={
            "assistant_id": "scout",
            "input": {"messages": [{"role": "user", "content": "What is the launch code?"}]},
        },
    )
    assert done.status_code == 200, done.text
    run_id = (await a.get(f"/threads/{thread_id}/runs")).json()[0]["run_id"]
    assert (await a.get(f"/v1/runs/{run_id}")).json()["status"] == "completed"

    async def remembered() -> bool:
        return bool((await a.get(f"/v1/runs/{run_id}/memories")).json()["memories"])

    await eventually(remembered)

    key_b, _ = await wp.keys.create("tenant-b", "b")
    async with httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer {key_b}"}, timeout=60) as b:
        for method, path, body in RUN_ENDPOINTS + THREAD_ENDPOINTS:
            url = path.format(run=run_id, thread=thread_id)
            r = await b.request(method, url, json=body) if body is not None else await b.request(method, url)
            assert r.status_code == 404, (method, url, r.status_code, r.text)
            assert r.json()["error"]["code"] == "not_found", (method, url, r.text)
        # listings and searches simply do not show A's things; a body naming A's tenant changes nothing
        assert run_id not in {r["run_id"] for r in (await b.get("/v1/runs")).json()["runs"]}
        assert (await b.post("/threads/search", json={})).json() == []
        assert (await b.get("/v1/memory/search", params={"q": "launch code ZEBRA-7"})).json()["memories"] == []
        assert (await b.post("/store/items/search", json={"query": "launch code"})).json()["items"] == []
        smuggled = await b.post("/v1/runs", json={"task": "x", "agent": "scout", "tenant_id": settings.tenant})
        assert smuggled.status_code == 422  # no such field: the tenant is the key's
        copy = await b.post("/threads", json={"thread_id": thread_id})
        assert copy.status_code == 409  # A's thread id is taken, but B learns nothing else about it

    # nothing of A changed, and A finds its memories through both faces of the API
    assert (await a.get(f"/v1/runs/{run_id}/verify")).json()["ok"] is True
    assert (await a.get(f"/threads/{thread_id}")).json()["metadata"] == {"owner": "a"}
    hits = (await a.get("/v1/memory/search", params={"q": "launch code", "k": 3})).json()["memories"]
    assert hits and hits[0]["run_id"] == run_id
    items = await a.post(
        "/store/items/search", json={"namespace_prefix": ["memories", "scout"], "query": "launch code"}
    )
    assert items.json()["items"][0]["value"]["run_id"] == run_id
    assert items.json()["items"][0]["namespace"] == ["memories", "scout", run_id]
    forgotten = (await a.delete(f"/v1/runs/{run_id}/memories")).json()["deleted"]
    assert forgotten >= 1 and (await a.get(f"/v1/runs/{run_id}/memories")).json()["memories"] == []
