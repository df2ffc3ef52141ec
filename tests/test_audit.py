"""The audit log (issue 44): every audited action through the client, as the actor it acted as, in a
per-tenant hash chain that `verify` recomputes; concurrent appends; isolation between tenants; the
OpenTelemetry event; no key or token anywhere; the decision event naming its actor; and the CLI,
/v1, viewer and MCP reading it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests import a11y
from tests.browser import logged_in, needs_browser, sign_in
from tests.conftest import ApiServer
from tests.helpers import eventually, one_line_error, run_events, waypoint
from tests.mcp_client import call, error_of, over_stdio
from tests.workflow_doubles import Doubles, answer_at, bench, spec
from tests.workflow_helpers import plan, until_status
from waypoint import telemetry
from waypoint.access import Action, Actor, AuditEntry, Outcome, Role, Surface, Target, TargetKind, acting_as
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import Forbidden, InvalidInput, NotFound
from waypoint.names import DecisionKind, EventKind, RunStatus, Update
from waypoint.types import Decision, RunProgress, RunResult, StepDecision

pytestmark = pytest.mark.postgres

KEY = "wp_" + "S3cr3tK3yMaterial" * 3  # looks like an API key: must never be stored


def actor(settings: Settings, id: str, role: Role, surface: Surface = Surface.HTTP) -> Actor:
    return Actor(id, role, settings.tenant, surface, "10.0.0.7")


def entry(settings: Settings, who: str, outcome: Outcome = Outcome.OK, detail: str | None = None) -> AuditEntry:
    return AuditEntry(
        actor(settings, who, Role.OPERATOR),
        Action.CANCEL,
        settings.tenant,
        Target(TargetKind.RUN, "r1"),
        outcome,
        detail,
    )


async def audit_rows(engine: AsyncEngine, tenant: str) -> list[Any]:
    async with engine.connect() as conn:
        query = text("SELECT * FROM audit_log WHERE tenant_id = :t ORDER BY seq")
        return list((await conn.execute(query, {"t": tenant})).mappings())


@pytest.fixture
def spans(settings: Settings) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.setup(settings, exporter=exporter)
    yield exporter
    telemetry.reset()


async def test_actions_as_actors_are_refused_failed_and_chained(
    client: Client, engine: AsyncEngine, settings: Settings
):
    wp = Waypoint(client, engine, settings)
    with acting_as(actor(settings, "key:41", Role.VIEWER)), pytest.raises(Forbidden, match="needs the role operator"):
        await wp.cancel("run-of-nobody")
    with acting_as(actor(settings, "user:ops@example.com", Role.OPERATOR)), pytest.raises(NotFound):
        await wp.cancel("run-of-nobody", "Bearer abc.def.ghi " + KEY)
    with acting_as(actor(settings, "key:41", Role.VIEWER)), pytest.raises(Forbidden, match="audit.read needs"):
        await wp.audit.entries()  # a refused read is recorded; an allowed one is not

    page = await wp.audit.entries()
    assert [(e.seq, e.actor, e.action, e.outcome) for e in page.entries] == [
        (3, "key:41", "audit.read", "refused"),
        (2, "user:ops@example.com", "run.cancel", "failed"),
        (1, "key:41", "run.cancel", "refused"),
    ]
    refused, failed = page.entries[2], page.entries[1]
    assert (refused.role, refused.surface, refused.address) == ("viewer", "http", "10.0.0.7")
    assert (refused.target_kind, refused.target_id) == ("run", "run-of-nobody")
    assert "operator" in (refused.message or "") and "no run" in (failed.message or "")
    assert [e.seq for e in (await wp.audit.entries(actor="key:41", action="run.cancel")).entries] == [1]
    assert (await wp.audit.entries(limit=2)).next_cursor == 2
    for bad in ("key:", "alice", "user:"):
        with pytest.raises(InvalidInput, match="key:<id>, user:<subject> or local"):
            await wp.audit.entries(actor=bad)
    assert [e.seq for e in (await wp.audit.entries(limit=2, cursor=2)).entries] == [1]
    assert (await wp.audit.verify()).ok
    with pytest.raises(InvalidInput):  # an id Postgres cannot hold is refused, and its entry still written
        await wp.cancel("bad\x00id" + "x" * 2000)
    (bad,) = (await wp.audit.entries(limit=1)).entries
    assert (bad.seq, bad.outcome, bad.target_id) == (4, "failed", "bad\ufffdid" + "x" * 294)

    # a row changed behind the log's back: verify names it
    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE audit_log SET outcome = 'ok' WHERE tenant_id = :t AND seq = 2"), {"t": settings.tenant}
        )
    verdict = await wp.audit.verify()
    assert (verdict.ok, verdict.broken_seq) == (False, 2) and "changed" in (verdict.problem or "")
    async with engine.begin() as conn:  # put back, then remove one: the gap is found
        await conn.execute(
            text("UPDATE audit_log SET outcome = 'failed' WHERE tenant_id = :t AND seq = 2"), {"t": settings.tenant}
        )
    assert (await wp.audit.verify()).ok
    async with engine.begin() as conn:
        await conn.execute(text("DELETE FROM audit_log WHERE tenant_id = :t AND seq = 2"), {"t": settings.tenant})
    assert (await wp.audit.verify()).broken_seq == 2


async def test_concurrent_appends_are_contiguous_and_tenants_apart(engine: AsyncEngine, settings: Settings):
    wp = Waypoint(None, engine, settings)
    await asyncio.gather(*(wp.audit.record(entry(settings, f"key:{n}")) for n in range(50)))
    rows = await audit_rows(engine, settings.tenant)
    assert [r["seq"] for r in rows] == list(range(1, 51))
    assert sorted(r["actor"] for r in rows) == sorted(f"key:{n}" for n in range(50))
    verdict = await wp.audit.verify()
    assert verdict.ok and verdict.entries == 50

    other = settings.tenant + "-b"
    assert (await wp.audit.entries(tenant_id=other)).entries == []
    assert (await wp.audit.verify(tenant_id=other)).entries == 0
    await wp.audit.record(AuditEntry(actor(settings, "key:9", Role.ADMIN), Action.KEY_CREATE, other, None, Outcome.OK))
    assert [e.seq for e in (await wp.audit.entries(tenant_id=other)).entries] == [1]  # its own chain
    assert len((await wp.audit.entries(limit=1000)).entries) == 50


async def test_each_entry_is_a_span_event_and_no_secret_is_kept(
    engine: AsyncEngine, settings: Settings, spans: InMemorySpanExporter
):
    wp = Waypoint(None, engine, settings)
    await wp.audit.record(
        entry(settings, "key:5", Outcome.FAILED, f"refused Bearer {KEY} and token eyJhbGciOi.eyJzdWIi.c2ln")
    )
    with telemetry.span("a request"):
        await wp.audit.record(entry(settings, "key:6"))
    with pytest.raises(RuntimeError):  # a failure that is no WaypointError: recorded by its type only
        async with wp._scope.act(Action.START, None, Target(TargetKind.RUN, "r9")):
            raise RuntimeError(f"the driver said {KEY}")
    telemetry.current().force_flush()
    finished = {s.name: s for s in spans.get_finished_spans()}
    outside = [s for s in spans.get_finished_spans() if s.name == "waypoint.audit"]
    assert len(outside) == 2  # outside a trace: each a short span of its own
    own = min(outside, key=lambda s: s.start_time or 0)
    (event,) = own.events
    assert event.name == "waypoint.audit"
    assert (
        dict(event.attributes or {}).items()
        >= {
            "waypoint.audit.actor": "key:5",
            "waypoint.audit.action": "run.cancel",
            "waypoint.audit.target": "run:r1",
            "waypoint.audit.outcome": "failed",
            "waypoint.audit.surface": "http",
        }.items()
    )
    (on_request,) = finished["a request"].events  # inside one: an event of the current span
    assert on_request.attributes and on_request.attributes["waypoint.audit.actor"] == "key:6"

    rows = await audit_rows(engine, settings.tenant)
    stored = json.dumps([dict(r) for r in rows], default=str)
    shown = json.dumps([s.to_json() for s in spans.get_finished_spans()])
    for where in (stored, shown):
        assert KEY not in where and "S3cr3tK3y" not in where and "Bearer" not in where and "eyJhbGciOi" not in where
    assert rows[0]["detail"]["message"].startswith("refused [REDACTED]")
    assert (rows[2]["action"], rows[2]["outcome"], rows[2]["detail"]) == (
        "run.start",
        "failed",
        {"message": "RuntimeError (internal)"},
    )


async def test_a_decision_names_its_actor(ts: WorkflowEnvironment) -> None:
    doubles = Doubles(plan=plan(tools=[spec("pay", requires_approval=True)]), turns=answer_at(2, name="pay"))
    async with bench(ts.client, doubles) as b:
        handle = await b.start()
        await until_status(handle, RunStatus.WAITING_APPROVAL)
        await handle.execute_update(Update.APPROVE, Decision(reason="fine", actor="key:7"), result_type=RunProgress)
        result: RunResult = await handle.result()
    assert result.status == RunStatus.COMPLETED
    assert doubles.records[0].decisions == [StepDecision("c1", DecisionKind.APPROVED, "fine", actor="key:7")]


async def test_surfaces_show_the_log_and_the_run_names_who_decided(
    api: ApiServer, worker, client: Client, engine: AsyncEngine, settings: Settings, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    async with contextlib.AsyncExitStack() as stack:
        await surfaces(stack, api, client, engine, settings)
    assert api.key not in caplog.text  # nor in what the API and the worker logged


async def surfaces(
    stack: contextlib.AsyncExitStack, api: ApiServer, client: Client, engine: AsyncEngine, settings: Settings
) -> None:
    http = api.http
    run_id = (await http.post("/v1/runs", json={"task": "delete two files", "agent": "careful"})).json()["run_id"]
    wp = Waypoint(client, engine, settings)

    async def waiting() -> bool:
        return (await http.get(f"/v1/runs/{run_id}")).json().get("status") == RunStatus.WAITING_APPROVAL

    await eventually(waiting, what="the run to wait for approval")
    with acting_as(actor(settings, "key:12", Role.OPERATOR, Surface.HTTP)):
        await wp.approve(run_id, reason="fine")
    await eventually(waiting, what="the second call to wait")
    with acting_as(actor(settings, "user:alice", Role.OPERATOR, Surface.VIEWER)):
        await wp.deny(run_id, reason="keep b")
    await asyncio.wait_for(wp.result(run_id), 60)

    decisions = await run_events(engine, run_id, EventKind.DECISION)
    assert [(d["decision"], d["actor"]) for d in decisions] == [("approved", "key:12"), ("denied", "user:alice")]
    ui = await stack.enter_async_context(httpx.AsyncClient(base_url=api.url, timeout=30))
    await sign_in(ui, api.key)
    step = (await ui.get(f"/ui/runs/{run_id}/steps/2")).text  # the viewer's step shows who decided
    assert "user:alice" in step
    timeline = (await http.get(f"/v1/runs/{run_id}/timeline")).text  # and its waterfall's approval bars
    assert "approved by key:12" in timeline and "denied by user:alice" in timeline

    page = (await http.get("/v1/audit", params={"action": "run.deny"})).json()
    assert [(e["actor"], e["outcome"], e["target_id"]) for e in page["entries"]] == [("user:alice", "ok", run_id)]
    assert page["next_cursor"] is None
    listed = (await http.get("/v1/audit", params={"since": "1h"})).json()["entries"]
    # the run's start and the API key the test made are audited too
    assert [e["action"] for e in listed] == ["run.deny", "run.approve", "run.start", "key.create"]
    assert (await http.get("/v1/audit/verify")).json().items() >= {"ok": True, "entries": 4, "broken_seq": None}.items()
    bad = await http.get("/v1/audit", params={"since": "yesterday"})
    assert bad.status_code == 400 and "24h" not in bad.text and "an age such as" in bad.text
    schema = (await http.get("/openapi.json")).json()
    assert "AuditPageOut" in schema["components"]["schemas"]

    viewer = await ui.get("/ui/audit", params={"verify": "true"})
    assert viewer.status_code == 200 and "Chain verified: 4 entries" in viewer.text
    assert "user:alice" in viewer.text and f'href="/ui/runs/{run_id}"' in viewer.text
    assert 'href="/ui/audit"' in viewer.text  # in the nav
    filtered = (await ui.get("/ui/audit", params={"actor": "user:alice"})).text
    assert "key:12" not in filtered and "data-verdict" not in filtered and "Verify the chain" in filtered

    table = await waypoint(settings, "audit", "--actor", "key:12")
    assert table.code == 0 and "run.approve" in table.out and "user:alice" not in table.out
    as_json = json.loads((await waypoint(settings, "audit", "--json")).out)
    # newest first: the two decisions, the run's start with the API's key, the key the fixture made
    actors = [e["actor"] for e in as_json["entries"]]
    assert actors[:2] == ["user:alice", "key:12"] and actors[2].startswith("key:") and actors[3] == "local"
    line = one_line_error(await waypoint(settings, "audit", "--since", "yesterday"))
    assert "an age such as 1h or 7d" in line

    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE audit_log SET actor = 'key:999' WHERE tenant_id = :t AND seq = 1"), {"t": settings.tenant}
        )
    broken = await waypoint(settings, "audit", "--verify")
    assert broken.code == 1 and "broken at entry 1" in one_line_error(broken)
    assert 'data-verdict="broken"' in (await ui.get("/ui/audit?verify=true")).text
    assert api.key not in json.dumps([dict(r) for r in await audit_rows(engine, settings.tenant)], default=str)


async def test_mcp_reads_the_audit_log(engine: AsyncEngine, settings: Settings):
    wp = Waypoint(None, engine, settings)
    await wp.audit.record(entry(settings, "key:8", Outcome.REFUSED, "run.cancel needs the role operator"))
    await wp.audit.record(
        AuditEntry(actor(settings, "key:9", Role.ADMIN), Action.KEY_CREATE, "someone-else", None, Outcome.OK)
    )
    async with over_stdio(settings) as client:
        page = await call(client, "audit_log")
        assert [(e["seq"], e["actor"], e["outcome"]) for e in page["entries"]] == [(1, "key:8", "refused")]
        assert (await call(client, "audit_log", verify=True)).items() >= {"ok": True, "entries": 1}.items()
        assert "an age such as 1h" in await error_of(client, "audit_log", since="yesterday")


@needs_browser
@pytest.mark.timeout(120)
async def test_the_audit_page_passes_the_basic_accessibility_check(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    engine: AsyncEngine,
    settings: Settings,
):
    wp = Waypoint(None, engine, settings)
    await wp.audit.record(entry(settings, "key:8", Outcome.REFUSED, "run.cancel needs the role operator"))
    await wp.audit.record(entry(settings, "user:alice"))
    _, page = await logged_in(browser, contexts, api)
    await page.click("nav[aria-label=main] a:has-text('Audit')")
    await page.wait_for_url("**/ui/audit")
    assert await page.locator("tr[data-seq]").count() == 3  # and the key the fixture made
    assert await a11y.problems(page) == []
    await page.click("a:has-text('Verify the chain')")
    await page.wait_for_url("**/ui/audit?verify=true")
    assert "Chain verified: 3 entries" in await page.locator("[data-verdict=ok]").inner_text()
    await page.fill("input[name=actor]", "key:8")
    await page.click("button:has-text('Filter')")
    await page.wait_for_url("**/ui/audit?actor=key*")
    assert await page.locator("tr[data-seq] [data-col=actor]").all_inner_texts() == ["key:8"]
