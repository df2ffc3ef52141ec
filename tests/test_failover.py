"""Model failover on the real stack: a provider that stays down (HTTP 503 for one model name on the fake
OpenAI server, whatever the retries), a run that completes on the agent's next model, the move in
Postgres, in `waypoint show` and the viewer's step page; a model the worker cannot call passed over;
`rerun --model` pinned to one model; the catalog check on the first model only."""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from mcp import Client as McpClient
from mcp import StdioServerParameters
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client
from temporalio.worker import Replayer

from tests.agents import add
from tests.conftest import ApiServer
from tests.helpers import HISTORIES, RECORD, cli_env, eventually, start, waypoint
from waypoint import Agent, telemetry
from waypoint.agents import AgentRegistry
from waypoint.app.http.ui import session
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.store import RunStore
from waypoint.store.schema import events, model_key_health
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn
from waypoint.types import FailoverRecord, RetrySpec
from waypoint.workflows.agent_run import AgentRunWorkflow

pytestmark = pytest.mark.postgres

FAST = RetrySpec(max_attempts=3, initial_interval_seconds=0.05, max_interval_seconds=1)

# Two models on the same fake server: `down-model` answers 503 forever, `fake-model` works.
two_models = Agent(
    name="failover-two",
    instructions="You add numbers.",
    model=("openai:down-model", "openai:fake-model"),
    failover_after=2,
    model_retry=FAST,
    tools=(add,),
)
# Down, then a provider this worker has no key for, then the working one.
three_models = Agent(
    name="failover-three",
    instructions="You add numbers.",
    model=("openai:down-model", "anthropic:claude-nowhere", "openai:fake-model"),
    failover_after=1,
    model_retry=FAST,
    tools=(add,),
)
# A provider that fails once, then recovers: its breaker opens at once, and runs come back to it.
back_again = Agent(
    name="failover-back",
    instructions="You add numbers.",
    model=("openai:flaky-model", "openai:fake-model"),
    failover_after=1,
    model_retry=FAST,
    tools=(add,),
    memory=False,
)
anthropic_first = Agent(
    name="failover-anthropic-first",
    instructions="You add numbers.",
    model=("anthropic:claude-nowhere", "openai:fake-model"),
)


@pytest.fixture(autouse=True)
def no_anthropic_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The worker registers what it can call when it starts: anthropic, never, here."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    yield


@pytest.fixture(autouse=True)
async def healthy_models(engine: AsyncEngine) -> None:
    """Every test starts with the models' health forgotten: a breaker is fleet-wide, so the failures
    of one test's runs would open it for the next test's."""
    async with engine.begin() as conn:
        await conn.execute(delete(model_key_health).where(model_key_health.c.key.like("openai:%-model")))


@pytest.fixture
def spans(settings: Settings) -> Iterator[InMemorySpanExporter]:
    """Spans in memory (requested before `worker`, which takes its tracer when it is built)."""
    exporter = InMemorySpanExporter()
    telemetry.setup(settings, exporter=exporter)
    yield exporter
    telemetry.reset()


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([two_models, three_models, anthropic_first, back_again])


def provider_down_for(model: str, fake: FakeOpenAI) -> None:
    """The fake answers 503 to every request for `model`; the other model calls `add`, then answers."""
    answered: list[int] = []

    def respond(body: dict[str, Any], n: int) -> Turn | Reply:
        if body.get("model") == model:
            return Reply(503, {"error": {"message": "overloaded", "type": "server_error"}}, {"retry-after-ms": "20"})
        answered.append(n)
        return Turn(tool_calls=[("add", {"a": 2, "b": 3})]) if len(answered) == 1 else Turn(content="5")

    fake.responder = respond


async def logged(engine: AsyncEngine, run_id: str, kind: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        query = select(events.c.step, events.c.payload).where(events.c.run_id == run_id, events.c.kind == kind)
        return [{"step": r.step, **r.payload} for r in await conn.execute(query.order_by(events.c.seq))]


async def test_a_provider_that_stays_down_fails_over_and_the_run_completes_on_the_next_model(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    spans: InMemorySpanExporter,
    worker,
    fake_openai: FakeOpenAI,
    api: ApiServer,
) -> None:
    provider_down_for("down-model", fake_openai)
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add 2 and 3", agent="failover-two")
    result = await wp.result(run_id)
    assert (result.status, result.output, result.steps) == ("completed", "5", 2)
    # Two attempts on the model that is down, then the step and the run's next step on the other one.
    assert [s.body["model"] for s in fake_openai.seen] == ["down-model", "down-model", "fake-model", "fake-model"]

    (moved,) = await logged(engine, run_id, "model_failover")
    assert (moved["step"], moved["from"], moved["to"], moved["after_attempts"], moved["error_type"]) == (
        1,
        "openai:down-model",
        "openai:fake-model",
        2,
        "ModelUnavailable",
    )
    assert "HTTP 503" in moved["last_error"] and "overloaded" in moved["last_error"]
    failed = await logged(engine, run_id, "model_attempt_failed")
    assert [(f["step"], f["attempt"], f["model"], f["status"]) for f in failed] == [
        (1, 1, "openai:down-model", 503),
        (1, 2, "openai:down-model", 503),
    ]
    assert [r["model"] for r in await logged(engine, run_id, "model_response")] == ["fake-model", "fake-model"]
    (started,) = await logged(engine, run_id, "run_started")
    assert started["plan"]["fallback_models"] == ["openai:fake-model"] and started["plan"]["failover_after"] == 2

    # Deterministic: its history (the patched failover branch) replays; recorded for tests/test_replay.py.
    history = await client.get_workflow_handle(run_id).fetch_history()
    await Replayer(workflows=[AgentRunWorkflow]).replay_workflow(history)
    if RECORD:
        (HISTORIES / "agent_run_failover.json").write_text(history.to_json())

    # The trace: the model span of the call the step failed over to names the model it left.
    telemetry.current().force_flush()
    chats = [(s.name, s.attributes or {}, [e.name for e in s.events]) for s in spans.get_finished_spans()]
    chats = [c for c in chats if c[0].startswith("chat ") and c[1].get("waypoint.run_id") == run_id]
    assert [(name, attrs.get("waypoint.failed_over_from"), names) for name, attrs, names in chats] == [
        ("chat down-model", None, ["exception"]),
        ("chat down-model", None, ["exception"]),
        ("chat fake-model", ("openai:down-model",), ["model_failover"]),
        ("chat fake-model", None, []),
    ]

    # The HTTP API's events and the viewer's step page.
    body = (await api.http.get(f"/v1/runs/{run_id}/events", params={"kind": "model_failover"})).json()
    assert [(e["step"], e["payload"]["to"]) for e in body["events"]] == [(1, "openai:fake-model")]
    key = await wp.keys.valid(api.key)
    assert key is not None
    api.http.cookies.set(session.COOKIE, session.issue(session.secret_of(settings.ui_secret), key.id))
    page = await api.http.get(f"/ui/runs/{run_id}/steps/1")
    assert page.status_code == 200
    html = page.text
    assert "Model failover (1)" in html and "after 2 failed attempt(s) (ModelUnavailable)" in html
    assert "<b>openai:down-model</b> → <b>openai:fake-model</b>" in html

    shown = await waypoint(settings, "show", run_id, "--step", "1")
    assert shown.code == 0, shown.err
    assert (
        "model_failover: openai:down-model -> openai:fake-model after 2 failed attempt(s): model endpoint" in shown.out
    )

    # A rerun without --model keeps the agent's failover list; `rerun --model` pins one model: no failover
    # list, the model's own retries, then the run fails.
    unpinned = await wp.rerun(run_id)
    assert (await wp.result(unpinned)).status == "completed"
    assert [m["to"] for m in await logged(engine, unpinned, "model_failover")] == ["openai:fake-model"]
    fake_openai.seen.clear()
    pinned = await wp.rerun(run_id, model="openai:down-model", tools="live")
    again = await wp.result(pinned)
    assert again.status == "failed" and "HTTP 503" in (again.error or "")
    assert [s.body["model"] for s in fake_openai.seen] == ["down-model"] * FAST.max_attempts
    assert await logged(engine, pinned, "model_failover") == []
    (restarted,) = await logged(engine, pinned, "run_started")
    assert restarted["plan"]["fallback_models"] == []


async def test_a_model_the_worker_cannot_call_is_passed_over_with_the_reason(
    client: Client, engine: AsyncEngine, settings: Settings, worker, fake_openai: FakeOpenAI
) -> None:
    provider_down_for("down-model", fake_openai)
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add 2 and 3", agent="failover-three")  # the catalog checks the first model
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "5")
    moves = await logged(engine, run_id, "model_failover")
    assert [(m["from"], m["to"], m["after_attempts"], m["error_type"]) for m in moves] == [
        ("openai:down-model", "anthropic:claude-nowhere", 1, "ModelUnavailable"),
        ("anthropic:claude-nowhere", "openai:fake-model", 1, "ConfigError"),
    ]
    assert "anthropic" in moves[1]["last_error"]

    agent = await wp.agent("failover-three")
    assert agent.model == "openai:down-model"
    assert agent.settings["models"] == list(three_models.models) and agent.settings["failover_after"] == 1
    # An agent whose first model this worker cannot call is refused before anything starts.
    with pytest.raises(ConfigError, match="anthropic"):
        await wp.start_run("add 2 and 3", agent="failover-anthropic-first")


def test_a_failover_list_is_checked_when_the_agent_is_defined() -> None:
    with pytest.raises(ConfigError, match="lists a model twice"):
        Agent(name="x", instructions="i", model=("openai:a", "openai:a"))
    with pytest.raises(ConfigError, match="unknown model spec"):
        Agent(name="x", instructions="i", model=("openai:a", "nope"))
    with pytest.raises(ConfigError, match="failover_after must be at least 1"):
        Agent(name="x", instructions="i", model=("openai:a", "openai:b"), failover_after=0)
    agent = Agent(name="x", instructions="i", model=["openai:a", "google:b"])  # type: ignore[arg-type]
    assert (agent.model_spec, agent.fallback_models) == ("openai:a", ["google:b"])


async def test_an_open_breaker_fails_over_at_once_and_a_recovered_model_takes_the_runs_back(
    client: Client, engine: AsyncEngine, settings: Settings, agents: AgentRegistry, fake_openai: FakeOpenAI, tmp_path
) -> None:
    """`flaky-model` answers 503 once. Run A fails over after its one attempt, which opens the key's
    breaker (failures = 1); run B, started then, moves to `fake-model` without calling `flaky-model`
    at all; once the breaker's time is over, both runs' next calls go back to `flaky-model`.
    `fake-model` holds its answers until the breaker's time is over, so each run's steps happen in
    that order however busy the machine. The breaker is open for 10 minutes (B's start comes well
    within it on any machine), and its time is made over by moving the key's health row back by
    that much, not by waiting it out: the row is checked to say 10 minutes first, and what decides
    from then on is the same comparison with Postgres's clock."""
    open_seconds = 600
    limits = tmp_path / "limits.toml"
    limits.write_text(f"[breaker]\nfailures = 1\nopen_seconds = {open_seconds}\n")
    # A held answer outlasts the usual 10 s: the model call waits for it.
    settings = settings.model_copy(update={"limits_file": limits, "model_timeout_seconds": 120})
    failed: list[str] = []
    over = threading.Event()  # the breaker's time is over: fake-model answers

    def respond(body: dict[str, Any], n: int) -> Turn | Reply:
        if body.get("model") == "flaky-model" and not failed:
            failed.append(body["model"])
            return Reply(503, {"error": {"message": "overloaded", "type": "server_error"}})
        if body.get("model") == "fake-model":
            over.wait(90)
        done = sum(1 for m in body["messages"] if m.get("role") == "tool")
        return Turn(tool_calls=[("add", {"a": done, "b": 1})]) if done < 3 else Turn(content="done")

    async def breaker_over() -> bool:
        return await RunStore(engine).limiter.recovered(["openai:flaky-model"], settings.limits.breaker) is not None

    fake_openai.responder = respond
    wp = Waypoint(client, engine, settings)
    try:
        async with build_worker(client, engine, settings, agents):
            first = await wp.start_run("add", agent="failover-back")
            await eventually(lambda: _has_failover(engine, first), what="run A's failover")
            second = await wp.start_run("add", agent="failover-back")
            await eventually(lambda: _has_failover(engine, second), what="run B's failover")
            assert not await breaker_over()
            async with engine.begin() as conn:
                h = model_key_health.c
                flaky_row = model_key_health.select().where(h.key == "openai:flaky-model")
                row = (await conn.execute(flaky_row)).one()
                assert row.failures == 1 and row.breaker_open_until is not None and row.last_failure_at is not None
                # Open for its open_seconds from the failure (a moment of clock between the two writes).
                assert abs((row.breaker_open_until - row.last_failure_at).total_seconds() - open_seconds) < 5
                gone = timedelta(seconds=open_seconds + 1)  # its time passes
                await conn.execute(
                    model_key_health.update()
                    .where(h.key == "openai:flaky-model")
                    .values(breaker_open_until=h.breaker_open_until - gone, last_failure_at=h.last_failure_at - gone)
                )
            assert await breaker_over()
            over.set()
            results = [await wp.result(r) for r in (first, second)]
    finally:
        over.set()  # a failed test leaves no held answer behind
    assert [r.status for r in results] == ["completed", "completed"]
    moves = [
        [(m["from"], m["to"], m["after_attempts"], m["error_type"]) for m in await logged(engine, r, "model_failover")]
        for r in (first, second)
    ]
    flaky, fake = "openai:flaky-model", "openai:fake-model"
    assert moves[0] == [(flaky, fake, 1, "ModelUnavailable"), (fake, flaky, 0, "recovered")], moves
    assert moves[1] == [(flaky, fake, 0, "breaker"), (fake, flaky, 0, "recovered")], moves
    assert failed == ["flaky-model"]  # one 503 in all: run B never called the model while its breaker was open
    for run_id in (first, second):  # the run ends on the model it came back to, and its row says so
        assert (await logged(engine, run_id, "model_response"))[-1]["model"] == "flaky-model"
        row = await wp.run(run_id)
        assert (row.model, row.current_model, row.models_used) == (flaky, flaky, [flaky, fake])


async def _has_failover(engine: AsyncEngine, run_id: str) -> bool:
    return bool(await logged(engine, run_id, "model_failover"))


FAILED_OVER = "openai:fake-model (failed over from openai:down-model)"
USED = ["openai:down-model", "openai:fake-model"]


async def test_after_a_failover_every_surface_shows_the_model_the_run_is_on_and_the_models_it_used(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    spans: InMemorySpanExporter,
    worker,
    fake_openai: FakeOpenAI,
    api: ApiServer,
) -> None:
    provider_down_for("down-model", fake_openai)
    # The CLI as a user runs it: `--follow` says when the run moves, and its last table where it is.
    followed = await waypoint(settings, "run", "add 2 and 3", "--agent", "failover-two", "--follow")
    assert followed.code == 0, followed.err
    run_id = followed.out.split("started ", 1)[1].split()[0]
    assert "model openai:down-model -> openai:fake-model  models used: openai:down-model, openai:fake-model" in (
        followed.out
    ), followed.out
    assert followed.out.index("-> openai:fake-model") < followed.out.index("step   1")  # as it happened
    assert FAILED_OVER in followed.out, followed.out

    # The Python client's row: `model` is still the one it started on (a rerun starts there again).
    row = await Waypoint(client, engine, settings).run(run_id)
    assert (row.model, row.current_model, row.models_used) == ("openai:down-model", "openai:fake-model", USED)

    shown = await waypoint(settings, "status", run_id)
    assert shown.code == 0, shown.err
    assert FAILED_OVER in shown.out and re.search(r"models used +openai:down-model, openai:fake-model", shown.out)
    as_json = json.loads((await waypoint(settings, "status", run_id, "--json")).out)
    assert (as_json["model"], as_json["current_model"], as_json["models_used"]) == (USED[0], USED[1], USED)
    listed = await waypoint(settings, "runs")  # 200 columns: the model is whole, starred as failed over
    line = next(ln for ln in listed.out.splitlines() if run_id in ln)
    assert "openai:fake-model*" in line and "down-model" not in line, listed.out
    # 80 columns have no room for it beside the id, agent and status, which stay whole: it is left out.
    narrow = await waypoint(settings, "runs", env=cli_env(settings) | {"COLUMNS": "80"})
    line = next(ln for ln in narrow.out.splitlines() if run_id in ln)
    assert "failover-two" in line and "completed" in line and len(line.rstrip()) <= 80, narrow.out
    assert " model " not in narrow.out and "openai" not in narrow.out, narrow.out
    rows = json.loads((await waypoint(settings, "runs", "--json")).out)
    assert [(r["current_model"], r["models_used"]) for r in rows if r["run_id"] == run_id] == [(USED[1], USED)]

    # HTTP: the run, the list, and the Agent Protocol's run.
    got = (await api.http.get(f"/v1/runs/{run_id}")).json()
    assert (got["model"], got["current_model"], got["models_used"]) == (USED[0], USED[1], USED)
    page = (await api.http.get("/v1/runs", params={"run_id": run_id})).json()
    assert [(r["current_model"], r["models_used"]) for r in page["runs"]] == [(USED[1], USED)]
    protocol = (await api.http.get(f"/runs/{run_id}")).json()
    assert (protocol["metadata"]["model"], protocol["metadata"]["models_used"]) == (USED[1], USED)

    # The viewer's run page and runs list.
    key = await Waypoint(client, engine, settings).keys.valid(api.key)
    assert key is not None
    api.http.cookies.set(session.COOKIE, session.issue(session.secret_of(settings.ui_secret), key.id))
    html = (await api.http.get(f"/ui/runs/{run_id}")).text
    assert '<span id="run-model-now">openai:fake-model</span>' in html
    assert "(failed over from openai:down-model, the model it started on)" in html
    assert "<li>openai:down-model</li><li>openai:fake-model</li>" in html
    runs_page = (await api.http.get("/ui")).text
    cell = runs_page.split(f'data-run="{run_id}"', 1)[1].split('data-col="model"', 1)[1].split("</td>", 1)[0]
    assert "openai:fake-model" in cell and "failed over (2 models)" in cell and "down-model, openai:fake" in cell

    # MCP, over stdio as an assistant runs it.
    params = StdioServerParameters(command=sys.executable, args=["-m", "waypoint", "mcp"], env=cli_env(settings))
    async with McpClient(params) as mcp:
        status = await mcp.call_tool("run_status", {"run_id": run_id})
        run = json.loads(status.content[0].text)["run"]  # type: ignore[union-attr]
        listed_runs = json.loads((await mcp.call_tool("list_runs", {})).content[0].text)  # type: ignore[union-attr]
    assert (run["model"], run["current_model"], run["models_used"]) == (USED[0], USED[1], USED)
    assert [(r["current_model"], r["models_used"]) for r in listed_runs if r["run_id"] == run_id] == [(USED[1], USED)]

    # The trace: the failover's and the end's attempt spans say where the run is and where it has been.
    telemetry.current().force_flush()
    attempts = {
        s.name: s.attributes or {}
        for s in spans.get_finished_spans()
        if s.name.startswith("RunActivity:") and (s.attributes or {}).get("waypoint.run_id") == run_id
    }
    assert attempts["RunActivity:start_run"]["waypoint.run.model"] == USED[0]
    for name in ("RunActivity:record_failover", "RunActivity:finish_run"):
        assert attempts[name]["waypoint.run.model"] == USED[1], name
        assert list(attempts[name]["waypoint.run.models"]) == USED, name


async def test_a_failover_moves_the_run_row_once_in_the_events_transaction(store: RunStore, settings: Settings) -> None:
    """The row moves with the `model_failover` event: a retry of the same move changes neither, a
    move back to a model it was on keeps each model once, in order of first use."""
    run_id = await start(store, settings, model="openai:a")
    assert (await store.get_run(settings.tenant, run_id)).models_used == ["openai:a"]
    away = FailoverRecord(run_id, settings.tenant, 1, "openai:a", "openai:b", 2, "HTTP 503", "ModelUnavailable")
    moved = await store.log.record_failover(away)
    again = await store.log.record_failover(away)  # the activity retried after its commit
    back = await store.log.record_failover(replace(away, step=3, from_model="openai:b", to_model="openai:a"))
    assert (moved.current_model, moved.models_used) == ("openai:b", ["openai:a", "openai:b"])
    assert again == moved
    assert (back.model, back.current_model, back.models_used) == ("openai:a", "openai:a", ["openai:a", "openai:b"])
    logged = [e for e in await store.travel.events(settings.tenant, run_id) if e.kind == "model_failover"]
    assert [(e.step, e.payload["to"]) for e in logged] == [(1, "openai:b"), (3, "openai:a")]
