"""What many tests share: waiting for a condition, the CLI as a user runs it, runs built with the
real store, rows of a run, replaying histories, the HTTP API, Temporal payloads, server-sent events."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf.message import Message
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from waypoint.config import Settings
from waypoint.names import Workflow
from waypoint.store import RunStore
from waypoint.store.outputs import EVENTS_WITH_OUTPUTS, LEDGER_OUTPUT, resolved
from waypoint.store.schema import events
from waypoint.store.steps import NewRun
from waypoint.transcript import event_messages
from waypoint.types import ModelTurn, RunPlan, StepRecord, ToolCall, ToolResult
from waypoint.working_memory import assemble

if TYPE_CHECKING:
    from tests.conftest import ApiServer

T = TypeVar("T")
HISTORIES = Path(__file__).parent / "histories"
# WAYPOINT_RECORD_HISTORIES=1: the replay tests save the histories of the runs they make (tests/histories).
# Read at import: the clean_environ fixture clears WAYPOINT_* variables before each test.
RECORD = os.environ.get("WAYPOINT_RECORD_HISTORIES") == "1"


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


def waypoint_in_process(env: dict[str, str], *args: str) -> Done:
    """`waypoint ARGS` run by the function the process runs (`run_command`), here, with the
    environment a spawned one would get and its stdout and stderr captured. For a test whose point is
    what a command says or does, not the process: no interpreter start and no imports per command
    (seconds each on a busy machine). One spawned `waypoint` per feature still shows the process's
    side (exit code, no traceback). One at a time (it swaps this process's environment and standard
    streams), and not for a command that serves until stopped."""
    from typer.testing import CliRunner

    from waypoint.app.cli import run_command
    from waypoint.app.console import console, err_console

    # A spawned process's consoles size themselves from COLUMNS when it starts; these were sized
    # when this process imported them, so for the command they take the width a spawned one has.
    widths = [each.width for each in (console, err_console)]
    try:
        for each in (console, err_console):
            each.width = int(env.get("COLUMNS", "80"))
        with CliRunner().isolation(env=env) as (out, err, _):
            code = run_command(list(args))
            sys.stdout.flush()
            sys.stderr.flush()
            return Done(code, out.getvalue().decode(), err.getvalue().decode())
    finally:
        console.width, err_console.width = widths


async def waypoint_here(
    settings: Settings, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> Done:
    """`waypoint_in_process` from a test's event loop: in a thread (the command runs its own loop),
    while a worker on this loop keeps polling."""
    return await asyncio.wait_for(asyncio.to_thread(waypoint_in_process, env or cli_env(settings), *args), timeout)


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
    await store.steps.create_run(
        NewRun(run_id, settings.tenant, "calculator", task, "Add numbers.", RunPlan(model=model, max_steps=50, **plan))
    )
    return run_id


async def make_run(store: RunStore, settings: Settings, steps: list[Step], *, model: str = "scripted") -> str:
    run_id = await start(store, settings, model=model)
    for n, (turn, results, decisions) in enumerate(steps, start=1):
        await store.steps.record_step(StepRecord(run_id, settings.tenant, n, turn, results, decisions=decisions))
    return run_id


BIG = "row " + " ".join(f"value-{i}" for i in range(3000))  # ~ 6,000 tokens


def tool_heavy(n_steps: int = 8) -> list[Step]:
    """Steps compaction has work in: a repeated output, a superseded one, an oversize one, a pinned decision."""
    steps = [
        step(1, [("search", {"q": "vault"}, "Vault 7 is in building B. The access code of vault 7 is 4821.")]),
        step(2, [("fetch", {"url": "http://x/list"}, "page one")], content="Looking at the list."),
        step(3, [("fetch", {"url": "http://x/list"}, "page one, updated")]),  # supersedes step 2's output
        step(4, [("search", {"q": "other"}, "Vault 7 is in building B. The access code of vault 7 is 4821.")]),
        step(5, [("dump", {}, BIG)]),  # oversize
        step(6, [("pin_decision", {"text": "We use vault 7, not vault 9: vault 9 is flooded."}, "pinned")]),
    ]
    for n in range(7, n_steps + 1):
        steps.append(step(n, [("search", {"q": f"q{n}"}, f"result {n}: nothing new")]))
    return steps


async def rows(engine: AsyncEngine, table: Any, run_id: str, order: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(table).where(table.c.run_id == run_id).order_by(order))).mappings())


async def range_messages(engine: AsyncEngine, run_id: str, first: int, last: int) -> list[dict]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(events.c.kind, events.c.payload, LEDGER_OUTPUT)
            .select_from(EVENTS_WITH_OUTPUTS)
            .where(events.c.run_id == run_id, events.c.seq.between(first, last))
            .order_by(events.c.seq)
        )
        return [m for r in rows for m in event_messages(r.kind, resolved(r.payload, r.ledger_output))]


async def next_call_view(store: RunStore, settings: Settings, run_id: str) -> list[dict]:
    """The working memory the run's next model call reads, built as `call_model` builds it."""
    run = await store.get_run(settings.tenant, run_id)
    return assemble(await store.working.working_parts(settings.tenant, run_id, run.steps + 1), 16_000).messages


async def run_events(engine: AsyncEngine, run_id: str, kind: str) -> list[dict]:
    async with engine.connect() as conn:
        query = select(events.c.step, events.c.payload).where(events.c.run_id == run_id, events.c.kind == kind)
        return [{"step": r.step, **r.payload} for r in await conn.execute(query.order_by(events.c.seq))]


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


async def _fresh(client: Client, workflow_id: str, workflows: list[type], record_as: str | None) -> None:
    """The history of a run just made replays against `workflows`; with RECORD, it is saved as `record_as`."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    await Replayer(workflows=workflows).replay_workflow(history)
    if RECORD and record_as:
        (HISTORIES / record_as).parent.mkdir(exist_ok=True)
        (HISTORIES / record_as).write_text(history.to_json())


# --- the HTTP API --------------------------------------------------------------------------------


async def finished(api: ApiServer, run_id: str, timeout: float = 60) -> dict:
    async def probe() -> dict | None:
        r = await api.http.get(f"/v1/runs/{run_id}")
        live = ("starting", "running", "paused", "waiting_approval")
        return r.json() if r.status_code == 200 and r.json()["status"] not in live else None

    return await eventually(probe, timeout=timeout, what=f"run {run_id} to finish")


def human(text: str) -> dict[str, Any]:
    """A run's input of one user message, as LangGraph and Agent Protocol clients send it."""
    return {"messages": [{"role": "user", "content": text}]}


# --- Temporal payloads ---------------------------------------------------------------------------


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every Payload anywhere inside a protobuf message (history events nest them in many shapes)."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = value.values()
        elif field.is_repeated:
            items = value
        else:
            items = [value]
        for item in items:
            if isinstance(item, Message):
                yield from payloads_in(item)


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


async def read_stream(
    api: ApiServer,
    run_id: str,
    *,
    last_id: str | None = None,
    until: Callable[[Sse], bool] | None = None,
    **params: Any,
) -> list[Sse]:
    """Events of the run's SSE stream until `until(event)` says stop (leaving drops the connection
    mid-run) or the stream ends."""
    headers = {"Last-Event-ID": last_id} if last_id else {}
    got: list[Sse] = []
    async with api.http.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers, params=params) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        async for event in sse_events(response):
            got.append(event)
            if until is not None and until(event):
                break
    return got


async def log_seqs(engine: AsyncEngine, run_id: str) -> list[int]:
    """The run's event log, as its sequence numbers in order."""
    async with engine.connect() as conn:
        return list(await conn.scalars(select(events.c.seq).where(events.c.run_id == run_id).order_by(events.c.seq)))


async def research_run(client: Any, engine: AsyncEngine, settings: Settings) -> tuple[Any, str]:
    """The research demo (a lead run and its four sub-agent runs) to completion, on a worker of its
    own: the client, and the lead's run id."""
    from waypoint.agents import AgentRegistry
    from waypoint.app.worker import build_worker
    from waypoint.client import Waypoint
    from waypoint.demo import seed_workspace
    from waypoint.demo_research import RESEARCH_TASK, research

    seed_workspace(settings.resolved_workspace)
    wp = Waypoint(client, engine, settings)
    async with build_worker(client, engine, settings, AgentRegistry([research])):
        run_id = await wp.start_run(RESEARCH_TASK, agent="research")
        result = await wp.result(run_id)
    assert result.status == "completed", result
    return wp, run_id


async def every_table_as_text(engine: AsyncEngine) -> str:
    """Every row of every table and view in Waypoint's schema, cast to text."""
    async with engine.connect() as conn:
        names = (
            await conn.execute(
                text(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
                    "ORDER BY table_name"
                )
            )
        ).scalars()
        chunks = []
        for name in list(names):
            rows = (await conn.execute(text(f'SELECT t::text FROM "{name}" AS t'))).scalars()
            chunks.append(f"-- {name}\n" + "\n".join(rows))
    return "\n".join(chunks)
