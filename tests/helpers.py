"""What many tests share: waiting for a condition, the CLI as a user runs it, runs built with the
real store, replaying histories, rows of a run."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from waypoint.config import Settings
from waypoint.names import Workflow
from waypoint.store import RunStore
from waypoint.store.steps import NewRun
from waypoint.types import ModelTurn, RunPlan, StepRecord, ToolCall, ToolResult

T = TypeVar("T")
HISTORIES = Path(__file__).parent / "histories"


async def eventually(
    probe: Callable[[], Awaitable[T]], *, timeout: float = 30.0, interval: float = 0.05, what: str = "the condition"
) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds, naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s (last: {value!r})")
        await asyncio.sleep(interval)


# --- the CLI -------------------------------------------------------------------------------------


@dataclass
class Done:
    code: int
    out: str
    err: str


def cli_env(settings: Settings, **extra: str) -> dict[str, str]:
    return settings.child_environment(COLUMNS="200", **extra)


async def waypoint(settings: Settings, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Done:
    """`waypoint ARGS` in a real process. Async: a test's worker runs on this event loop and must
    keep polling meanwhile."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "waypoint",
        *args,
        env=env or cli_env(settings),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return Done(proc.returncode or 0, out.decode(), err.decode())


def one_line_error(done: Done) -> str:
    """The CLI's error line; asserts there is exactly one and no traceback."""
    assert done.code == 1, (done.code, done.out, done.err)
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.err, done.err
    return lines[0]


# --- runs built with the real store ------------------------------------------------------------


Step = tuple[ModelTurn, list[ToolResult], list[dict[str, str]]]


def step(n: int, calls: list[tuple[str, dict[str, Any], str]], *, content: str | None = None, decisions=None) -> Step:
    """One step: the model calls `calls` (name, arguments, output)."""
    tool_calls = [
        ToolCall(id=f"c{n}_{i}", name=name, arguments=json.dumps(args)) for i, (name, args, _) in enumerate(calls)
    ]
    results = [ToolResult(call_id=f"c{n}_{i}", name=name, output=out) for i, (name, _, out) in enumerate(calls)]
    return ModelTurn(model="m", content=content, tool_calls=tool_calls), results, decisions or []


async def start(
    store: RunStore, settings: Settings, *, task: str = "Find the vault code", model: str = "scripted", **plan: Any
) -> str:
    """A new run's row, `run_started` event and checkpoint 0, as `start_run` writes them."""
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await store.create_run(
        NewRun(run_id, settings.tenant, "calculator", task, "Add numbers.", RunPlan(model=model, max_steps=50, **plan))
    )
    return run_id


async def make_run(store: RunStore, settings: Settings, steps: list[Step], *, model: str = "scripted") -> str:
    run_id = await start(store, settings, model=model)
    for n, (turn, results, decisions) in enumerate(steps, start=1):
        await store.record_step(StepRecord(run_id, settings.tenant, n, turn, results, decisions=decisions))
    return run_id


async def rows(engine: AsyncEngine, table: Any, run_id: str, order: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(table).where(table.c.run_id == run_id).order_by(order))).mappings())


# --- replay ----------------------------------------------------------------------------------------


def recorded_histories(folder: str = "") -> list[Path]:
    return sorted((HISTORIES / folder).glob("*.json"))


def recorded_id(path: Path) -> str:
    """The workflow id to replay a recorded history under: its file's name, but for a run that
    started sub-agent runs, whose ids derive from its own (`child_run_id`: "<id>.<step>.<index>")
    and are compared on replay: then the id it ran under."""
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    for event in history.events:
        started = event.start_child_workflow_execution_initiated_event_attributes
        if event.HasField("start_child_workflow_execution_initiated_event_attributes") and (
            started.workflow_type.name == Workflow.AGENT_RUN  # not a webhook delivery, whose id is its own
        ):
            return started.workflow_id.rsplit(".", 2)[0]
    return path.stem


async def replays(path: Path, workflows: list[type]) -> None:
    """The recorded history at `path` replays against the current code of `workflows`."""
    history = WorkflowHistory.from_json(recorded_id(path), path.read_text())
    result = await Replayer(workflows=workflows).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


# --- server-sent events --------------------------------------------------------------------------


@dataclass
class Sse:
    event: str
    data: Any
    id: str | None = None


async def sse_events(response: Any) -> Any:
    """The events of an SSE response (httpx, streaming), parsed: comments are skipped."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if "data" in fields or "event" in fields:
                data = fields.get("data", "")
                try:
                    parsed: Any = json.loads(data) if data else None
                except json.JSONDecodeError:
                    parsed = data
                yield Sse(fields.get("event", "message"), parsed, fields.get("id"))
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value


async def research_run(client: Any, engine: AsyncEngine, settings: Settings) -> tuple[Any, str]:
    """The research demo (a lead run and its four sub-agent runs) to completion, on a worker of its
    own: the client, and the lead's run id."""
    from waypoint.agents import AgentRegistry
    from waypoint.app.client import Waypoint
    from waypoint.app.worker import build_worker
    from waypoint.demo import seed_workspace
    from waypoint.demo_research import RESEARCH_TASK, research

    seed_workspace(settings.resolved_workspace)
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, AgentRegistry([research])):
        run_id = await wp.start_run(RESEARCH_TASK, agent="research")
        result = await wp.result(run_id)
    assert result.status == "completed", result
    return wp, run_id
