"""Typed answers on the real stack: `Agent(output_type=...)` runs end with validated JSON, through
the `final_answer` tool (a scripted model, and the openai adapter against the fake server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langgraph_sdk import get_client
from pydantic import BaseModel, Field
from rich.console import Console
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.conftest import ApiServer
from tests.helpers import _fresh, eventually, waypoint
from waypoint import Agent, ScriptedModel, ScriptedTurn
from waypoint.agents import AgentRegistry
from waypoint.app.console import run_table
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import ConfigError, Conflict
from waypoint.names import EventKind, RunStatus
from waypoint.store.schema import runs
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.types import Message
from waypoint.workflows.agent_run import AgentRunWorkflow

pytestmark = pytest.mark.postgres


class Trip(BaseModel):
    city: str
    days: int = Field(ge=1)
    sights: list[str] = []


def saw(text: str, role: str, turn: ScriptedTurn) -> Any:
    """A turn played only when the model's last message (of `role`) says `text`: else it answers
    with what it read, so a test sees the feedback never arrived."""

    def play(messages: list[Message]) -> ScriptedTurn:
        last = messages[-1]
        if last["role"] == role and text in (last.get("content") or ""):
            return turn
        return ScriptedTurn(content=f"unexpected last message: {last}")

    return play


LISBON = {"city": "Lisbon", "days": 3, "sights": ["Belem"]}
planner = Agent(
    name="planner",
    instructions="Plan a trip.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("final_answer", LISBON)])]),
    output_type=Trip,
)
# Its first answer does not validate (days is not a number); it reads why and answers again.
repairer = Agent(
    name="repairer",
    instructions="Plan a trip.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("final_answer", {"city": "Porto", "days": "many"})]),
            saw("days", "tool", ScriptedTurn(tool_calls=[("final_answer", {"city": "Porto", "days": 2})])),
        ]
    ),
    output_type=Trip,
)
# A text answer that is the JSON, fenced, is the answer too.
texter = Agent(
    name="texter",
    instructions="Plan a trip.",
    model=ScriptedModel([ScriptedTurn(content='```json\n{"city": "Rome", "days": 1}\n```')]),
    output_type=Trip,
)
# Prose, then a bad call: with max_repairs=1 the second bad answer fails the run.
stubborn = Agent(
    name="stubborn",
    instructions="Plan a trip.",
    model=ScriptedModel(
        [
            ScriptedTurn(content="Lisbon is lovely in spring."),
            saw("final_answer", "user", ScriptedTurn(tool_calls=[("final_answer", {"city": "Lisbon", "days": 0})])),
        ]
    ),
    output_type=Trip,
    max_repairs=1,
)
# A sub-agent with an output_type: its caller's model reads the JSON text as the tool's result.
trip_lead = Agent(
    name="trip_lead",
    instructions="Have the planner plan, then say where we go.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("planner", {"task": "a short trip"})]),
            lambda messages: ScriptedTurn(content=f"we go to {json.loads(messages[-1]['content'])['city']}"),
        ]
    ),
    agents=(planner,),
)
VERDICT = {
    "type": "object",
    "properties": {"verdict": {"enum": ["yes", "no"]}, "confidence": {"type": "number"}},
    "required": ["verdict"],
}
judge = Agent(name="judge", instructions="Judge.", model="openai:gpt-4o-mini", output_type=VERDICT)


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([planner, repairer, texter, stubborn, trip_lead, judge])


async def test_a_typed_run_ends_with_the_model_instance(
    worker, client: Client, engine: AsyncEngine, settings: Settings
):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("plan a trip", agent="planner")
    trip = await wp.result(run_id, Trip)
    assert trip == Trip(city="Lisbon", days=3, sights=["Belem"])
    result = await wp.result(run_id)
    assert result.status == RunStatus.COMPLETED and result.output_json == trip.model_dump()
    assert json.loads(result.output or "") == trip.model_dump()  # the text is the JSON too
    async with engine.connect() as conn:
        stored = (await conn.execute(select(runs.c.output_json).where(runs.c.run_id == run_id))).scalar_one()
    assert stored == {"city": "Lisbon", "days": 3, "sights": ["Belem"]}
    # the final_answer call has its result in the transcript, as any tool call
    results = await wp.events(run_id, kinds=[EventKind.TOOL_RESULT])
    assert [(e.payload["name"], e.payload["outcome"]) for e in results] == [("final_answer", "ok")]
    # the catalog describes the answer
    info = next(a for a in await wp.agents() if a.name == "planner")
    assert info.settings["output_schema"]["properties"]["days"]["minimum"] == 1

    texted = await wp.start_run("plan a trip", agent="texter")
    assert await wp.result(texted, Trip) == Trip(city="Rome", days=1)

    # `waypoint run --follow` ends with the run's table: the answer is in it, as indented JSON
    shown = Console(record=True, width=200)
    shown.print(run_table(await wp.run(run_id)))
    table = [line.strip() for line in shown.export_text().splitlines()]
    assert any(line.split() == ["output_json", "{"] for line in table)
    assert '"sights": [' in table and '"Belem"' in table

    done = await waypoint(settings, "status", run_id, "--json")
    assert done.code == 0, done.err
    assert json.loads(done.out)["output_json"] == trip.model_dump()


async def test_an_answer_that_does_not_validate_goes_back_to_the_model(
    worker, client: Client, engine: AsyncEngine, settings: Settings
):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("plan a trip", agent="repairer")
    assert await wp.result(run_id, Trip) == Trip(city="Porto", days=2)
    results = [e.payload for e in await wp.events(run_id, kinds=[EventKind.TOOL_RESULT])]
    assert [(r["outcome"], r["is_error"]) for r in results] == [("bad_call", True), ("ok", False)]
    assert "days" in results[0]["output"] and "valid integer" in results[0]["output"]
    assert (await wp.run(run_id)).steps == 2

    failed = await wp.start_run("plan a trip", agent="stubborn")
    result = await wp.result(failed)
    assert result.status == RunStatus.FAILED and result.output_json is None
    assert result.error is not None and "did not validate 2 steps in a row" in result.error
    assert "days: Input should be greater than or equal to 1" in result.error
    with pytest.raises(Conflict, match="without a typed answer"):
        await wp.result(failed, Trip)


async def test_a_typed_sub_agent_answers_its_caller_with_json(
    worker, client: Client, engine: AsyncEngine, settings: Settings
):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("go somewhere", agent="trip_lead")
    result = await wp.result(run_id)
    assert (result.status, result.output) == (RunStatus.COMPLETED, "we go to Lisbon")
    child = (await wp.children(run_id))[0]
    assert (await wp.run(child.run_id)).output_json == {"city": "Lisbon", "days": 3, "sights": ["Belem"]}


async def test_a_json_schema_answer_over_http_and_the_agent_protocol(worker, api: ApiServer, fake_openai: FakeOpenAI):
    fake_openai.answer(
        Turn(tool_calls=[("final_answer", {"verdict": "maybe"})]),
        Turn(tool_calls=[("final_answer", {"verdict": "yes", "confidence": 0.9})]),
    )
    started = await api.http.post("/v1/runs", json={"task": "is it?", "agent": "judge"})
    assert started.status_code in (200, 201), started.text
    run_id = started.json()["run_id"]
    body = await _finished(api, run_id)
    assert body["status"] == "completed" and body["output_json"] == {"verdict": "yes", "confidence": 0.9}
    # the model was offered final_answer with the schema, and read why "maybe" is not an answer
    first, second = (s.body for s in fake_openai.seen[:2])
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
    assert offered["final_answer"] == VERDICT
    assert second["messages"][-1]["role"] == "tool" and "'maybe' is not one of" in second["messages"][-1]["content"]

    lg = get_client(url=api.url, api_key=api.key)
    fake_openai.answer(Turn(tool_calls=[("final_answer", {"verdict": "no"})]))
    waited = await lg.runs.wait(None, "judge", input={"messages": [{"role": "user", "content": "is it?"}]})
    assert waited["structured_response"] == {"verdict": "no"}
    assert waited["messages"][-2]["tool_calls"][0]["name"] == "final_answer"

    thread = await lg.threads.create()
    fake_openai.answer(Turn(tool_calls=[("final_answer", {"verdict": "yes"})]))
    parts = [
        p
        async for p in lg.runs.stream(
            thread["thread_id"], "judge", input={"messages": [{"role": "user", "content": "and now?"}]}
        )
    ]
    assert [p.data for p in parts if p.event == "values"][-1]["structured_response"] == {"verdict": "yes"}
    state = await lg.threads.get_state(thread["thread_id"])
    assert state["values"]["structured_response"] == {"verdict": "yes"}
    schemas = await lg.assistants.get_schemas("judge")
    assert schemas["output_schema"]["properties"]["structured_response"] == VERDICT


async def _finished(api: ApiServer, run_id: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.http.get(f"/v1/runs/{run_id}")).json()
        return body if body["status"] in ("completed", "failed") else None

    return await eventually(probe, what=f"run {run_id} ended")


@pytest.mark.parametrize(
    ("output_type", "says"),
    [
        (int, "must be a pydantic model class or a JSON schema dict, not type"),
        ({"type": "objekt"}, "output_type is not a valid JSON schema: $.type:"),
        ({"type": "array", "items": {"type": "string"}}, 'must describe a JSON object ("type": "object")'),
    ],
)
def test_a_bad_output_type_is_refused_at_definition_in_one_line(output_type: Any, says: str):
    with pytest.raises(ConfigError) as refused:
        Agent(name="bad", instructions="x", output_type=output_type)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_an_agent_with_output_type_may_not_have_its_own_final_answer_tool():
    from waypoint import tool

    @tool
    def final_answer(text: str) -> str:
        """Answer."""
        return text

    with pytest.raises(ConfigError, match="'final_answer' is its answer tool: rename its own"):
        Agent(name="bad", instructions="x", tools=(final_answer,), output_type=Trip)
    Agent(name="fine", instructions="x", tools=(final_answer,))  # without output_type it is just a tool


async def test_a_typed_run_history_replays(worker, client: Client, engine: AsyncEngine, settings: Settings):
    """A typed run (a bad answer, then a good one) replays; checked in as agent_run_typed.json, which
    test_replay replays with every recorded history (WAYPOINT_RECORD_HISTORIES=1 records it again)."""
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("replay me", agent="repairer")
    assert (await wp.result(run_id)).status == RunStatus.COMPLETED
    await _fresh(client, run_id, [AgentRunWorkflow], "agent_run_typed.json")
