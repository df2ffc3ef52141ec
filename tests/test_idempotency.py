"""Idempotent starts: a key answers the same run on every repeat (20 racing over real HTTP among
them), the same key with another request is 409 naming its run, an expired key starts anew, a failed
start gives its key back; and a run id names one run, ever (409 for one that exists)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.conftest import ApiServer
from tests.helpers import one_line_error, waypoint
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.gateway.temporal import TemporalGateway
from waypoint.store import RunStore
from waypoint.store.schema import idempotency_keys, runs
from waypoint.types import RunInput

pytestmark = pytest.mark.postgres


def new_key() -> str:
    return f"key-{uuid.uuid4().hex}"


async def run_count(engine: AsyncEngine, tenant: str) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(runs).where(runs.c.tenant_id == tenant)) or 0)


async def workflow_ids(client: Client, settings: Settings) -> list[str]:
    """Every workflow Temporal has on this test's task queue (its own, whatever their ids)."""
    return [w.id async for w in client.list_workflows(f"TaskQueue = '{settings.task_queue}'")]


async def test_a_repeated_key_answers_the_same_run(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    key = new_key()
    first = await wp.start_run("add", agent="calculator", idempotency_key=key)
    again = await wp.start_run("add", agent="calculator", idempotency_key=key)
    assert again == first and (first.repeat, again.repeat) == (False, True)  # the repeat started nothing
    await wp.result(first)
    assert await wp.start_run("add", agent="calculator", idempotency_key=key) == first  # a finished run too
    assert await run_count(engine, settings.tenant) == 1
    assert await workflow_ids(client, settings) == [first]
    async with engine.connect() as conn:
        keyed = (await conn.execute(select(idempotency_keys).where(idempotency_keys.c.key == key))).all()
    assert [(r.tenant_id, r.run_id) for r in keyed] == [(settings.tenant, first)]

    with pytest.raises(Conflict, match=f"idempotency key '{key}' was used for run {first} with a different request"):
        await wp.start_run("add 4 and 5", agent="calculator", idempotency_key=key)
    # keys are per tenant: another tenant's same key is its own
    other = await wp.start_run("add", agent="calculator", idempotency_key=key, tenant_id=f"{settings.tenant}-b")
    assert other != first


async def test_twenty_racing_repeats_over_http_start_one_run(api: ApiServer, client: Client, engine, worker):
    key = new_key()
    body = {"task": "add", "agent": "calculator"}
    answers = await asyncio.gather(
        *(api.http.post("/v1/runs", json=body, headers={"Idempotency-Key": key}) for _ in range(20))
    )
    # the one start that started the run is 201; every repeat answers that run with 200
    assert sorted(a.status_code for a in answers) == [200] * 19 + [201], [a.text for a in answers]
    named = {a.json()["run_id"] for a in answers}
    assert len(named) == 1 and {a.headers["location"] for a in answers} == {f"/v1/runs/{a}" for a in named}
    (run_id,) = named
    await Waypoint(client, engine, api.settings).result(run_id, tenant_id=api.settings.tenant)
    assert await run_count(engine, api.settings.tenant) == 1
    assert await workflow_ids(client, api.settings) == [run_id]

    other = await api.http.post("/v1/runs", json={**body, "task": "add 4 and 5"}, headers={"Idempotency-Key": key})
    assert other.status_code == 409 and f"was used for run {run_id} with a different request" in other.text
    too_long = await api.http.post("/v1/runs", json=body, headers={"Idempotency-Key": "k" * 201})
    assert too_long.status_code == 400 and "invalid idempotency key" in too_long.text

    # a fork and a rerun too: 201 for the start, 200 for its repeat
    for path, start in ((f"/v1/runs/{run_id}/fork", {"step": 1}), (f"/v1/runs/{run_id}/rerun", {"from_step": 1})):
        headers = {"Idempotency-Key": new_key()}
        made = await api.http.post(path, json=start, headers=headers)
        repeated = await api.http.post(path, json=start, headers=headers)
        assert (made.status_code, repeated.status_code) == (201, 200), (path, made.text, repeated.text)
        assert made.json()["run_id"] == repeated.json()["run_id"]


async def test_an_agent_protocol_repeat_takes_no_second_thread_slot(api: ApiServer, worker):
    thread = (await api.http.post("/threads", json={})).json()["thread_id"]
    create = {"assistant_id": "calculator", "input": {"messages": [{"role": "user", "content": "add"}]}}
    key = {"Idempotency-Key": new_key()}
    first = await api.http.post(f"/threads/{thread}/runs", json=create, headers=key)
    # the thread is busy with the key's own run: a repeat answers it, neither 409 nor a second slot
    again = await api.http.post(f"/threads/{thread}/runs/wait", json=create, headers=key)
    assert first.status_code == again.status_code == 200, (first.text, again.text)
    run_id = first.json()["run_id"]
    assert again.headers["content-location"] == f"/threads/{thread}/runs/{run_id}"
    listed = (await api.http.get(f"/threads/{thread}/runs")).json()
    assert [r["run_id"] for r in listed] == [run_id]
    stateless = {"Idempotency-Key": new_key()}
    one = (await api.http.post("/runs", json=create, headers=stateless)).json()["run_id"]
    assert (await api.http.post("/runs", json=create, headers=stateless)).json()["run_id"] == one != run_id


async def test_after_the_retention_window_the_key_starts_a_new_run(
    client: Client, engine: AsyncEngine, settings: Settings, store: RunStore, worker
):
    wp = Waypoint(client, engine, settings.model_copy(update={"idempotency_retention_seconds": 60}))
    key, stale = new_key(), new_key()
    first = await wp.start_run("add", agent="calculator", idempotency_key=key)
    await store.idempotency.claim_key(settings.tenant, stale, "run-stale", "h", 60)
    async with engine.begin() as conn:  # both an hour old: past the window
        await conn.execute(
            update(idempotency_keys)
            .where(idempotency_keys.c.key.in_([key, stale]))
            .values(created_at=func.now() - func.make_interval(0, 0, 0, 0, 1))
        )
    later = await wp.start_run("add 4 and 5", agent="calculator", idempotency_key=key)  # another body: a new start
    assert later != first and await store.idempotency.key_run(settings.tenant, key) == later
    assert await store.idempotency.key_run(settings.tenant, stale) is None  # tidied by the winning claim
    assert await wp.start_run("add 4 and 5", agent="calculator", idempotency_key=key) == later


async def test_a_failed_start_leaves_no_claim(client: Client, engine: AsyncEngine, settings: Settings, worker):
    wp = Waypoint(client, engine, settings)
    key = new_key()
    with pytest.raises(NotFound):
        await wp.start_run("add", agent="no-such-agent", idempotency_key=key)
    existing = await wp.start_run("add", agent="calculator")
    # the key is claimed, then the start fails (the run id is taken): the claim is given back
    with pytest.raises(Conflict, match=f"run {existing} already exists"):
        await wp.start_run("add", agent="calculator", run_id=existing, idempotency_key=key)
    assert await wp._store.idempotency.key_run(settings.tenant, key) is None
    fresh = await wp.start_run("add", agent="calculator", idempotency_key=key)  # the retry starts it
    assert fresh != existing and await wp._store.idempotency.key_run(settings.tenant, key) == fresh
    with pytest.raises(InvalidInput, match="invalid idempotency key"):
        await wp.start_run("add", agent="calculator", idempotency_key="has space")


async def test_an_existing_run_id_is_a_conflict_naming_it(
    client: Client, engine: AsyncEngine, settings: Settings, worker
):
    wp = Waypoint(client, engine, settings)
    chosen = f"run-mine-{uuid.uuid4().hex[:8]}"
    assert await wp.start_run("add", agent="calculator", run_id=chosen) == chosen
    with pytest.raises(Conflict, match=f"run {chosen} already exists"):
        await wp.start_run("add", agent="calculator", run_id=chosen)
    await wp.result(chosen)
    with pytest.raises(Conflict, match=rf"run {chosen} already exists \(completed\)"):
        await wp.start_run("add", agent="calculator", run_id=chosen)
    with pytest.raises(Conflict, match=f"run {chosen} already exists"):  # from another tenant: taken all the same
        await wp.start_run("add", agent="calculator", run_id=chosen, tenant_id=f"{settings.tenant}-b")
    assert await run_count(engine, settings.tenant) == 1


async def test_temporal_refuses_a_closed_runs_id(client: Client, settings: Settings):
    # No row in Postgres (its worker never ran it): Temporal's own policy refuses the id, which its
    # default (allow a duplicate once the first closed) would not.
    gateway = TemporalGateway(client, settings)
    run_id = f"run-closed-{uuid.uuid4().hex[:8]}"
    inp = RunInput(agent="calculator", task="add", tenant_id=settings.tenant)
    await gateway.start_run(run_id, inp)
    with pytest.raises(Conflict, match=f"run {run_id} already exists"):
        await gateway.start_run(run_id, inp)
    await gateway.terminate(run_id, "closed for the test")
    with pytest.raises(Conflict, match=f"run {run_id} already exists"):
        await gateway.start_run(run_id, inp)


async def test_racing_claims_in_the_store(store: RunStore, settings: Settings):
    key = new_key()
    claims = await asyncio.gather(
        *(store.idempotency.claim_key(settings.tenant, key, f"run-{i}", "h", 60) for i in range(20))
    )
    winners = [run_id for run_id, created in claims if created]
    assert len(winners) == 1 and {run_id for run_id, _ in claims} == set(winners)
    # the same race over an expired claim: one replaces it
    async with store.engine.begin() as conn:
        await conn.execute(
            update(idempotency_keys)
            .where(idempotency_keys.c.key == key)
            .values(created_at=func.now() - func.make_interval(0, 0, 0, 0, 1))
        )
    claims = await asyncio.gather(
        *(store.idempotency.claim_key(settings.tenant, key, f"new-{i}", "h", 60) for i in range(20))
    )
    winners = [run_id for run_id, created in claims if created]
    assert len(winners) == 1 and winners[0].startswith("new-") and {r for r, _ in claims} == set(winners)
    await store.idempotency.release_key(settings.tenant, key, "not-its-run")  # names another run: kept
    assert await store.idempotency.key_run(settings.tenant, key) == winners[0]


async def test_the_cli_key(settings: Settings, worker):
    key = new_key()
    args = ("run", "add", "--agent", "calculator", "--idempotency-key", key)
    first, again = await waypoint(settings, *args), await waypoint(settings, *args)
    assert first.code == again.code == 0, (first.err, again.err)
    assert first.out.strip() == again.out.strip() and first.out.strip().startswith("run-")
    line = one_line_error(await waypoint(settings, "run", "add", "--idempotency-key", "k" * 201))
    assert "invalid idempotency key" in line and "1 to 200 printable ASCII" in line
