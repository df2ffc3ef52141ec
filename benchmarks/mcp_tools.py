"""Per-call cost of an MCP tool (stdio and streamable HTTP) against the same tool as a Python function.

    python benchmarks/mcp_tools.py [--steps 30] [--runs 3]

Three agents run the same script on one embedded stack, one worker: `--steps` steps that each call
`echo` once, then an answer. Only where `echo` lives differs: a Python function, an MCP server the
worker runs as a child process (stdio), or an MCP server in a process of its own over HTTP
(`_mcp_echo.py`, written with the SDK's server API).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from itertools import pairwise
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import select
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from waypoint.agents import Agent, AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack, free_port
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.mcp import MCPServer
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.names import Activity
from waypoint.store.schema import tool_effects
from waypoint.testing import embedded_stack
from waypoint.tools import tool

HERE = Path(__file__).resolve().parent
ECHO_SERVER = str(HERE / "_mcp_echo.py")
console = Console(width=150)
DIRECT_CALLS = 300
KINDS = ("step", "run_tool", "tool", "start_run", "cold", "direct")


@tool(name="echo")
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def agent(name: str, steps: int, **where: object) -> Agent:
    turns = [ScriptedTurn(tool_calls=[("echo", {"text": f"step {i}"})]) for i in range(1, steps + 1)]
    return Agent(
        name=name,
        instructions="Call echo until the script says you are done.",
        model=ScriptedModel([*turns, ScriptedTurn(content="done")]),
        max_steps=steps + 1,
        memory=False,
        **where,  # type: ignore[arg-type]
    )


def activity_ms(history: WorkflowHistory, name: str) -> list[float]:
    """Scheduled-to-completed time of every `name` activity in the history."""
    scheduled: dict[int, float] = {}
    found = []
    for event in history.events:
        at = event.event_time.ToNanoseconds() / 1e6
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == name:
                scheduled[event.event_id] = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            began = scheduled.get(event.activity_task_completed_event_attributes.scheduled_event_id)
            if began is not None:
                found.append(at - began)
    return found


def step_ms(history: WorkflowHistory) -> list[float]:
    """Each step's duration, cut at each call_model schedule (the first step starts with the run)."""
    marks = []
    for event in history.events:
        at = event.event_time.ToNanoseconds() / 1e6
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            marks.append(at)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == Activity.CALL_MODEL:
                marks.append(at)
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            marks.append(at)
    marks = [marks[0], *marks[2:]]  # the first step runs from the start to the second model call
    return [b - a for a, b in pairwise(marks)]


def serve_http() -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    # -P: not this folder on the path, or `mcp` would be this file.
    proc = subprocess.Popen([sys.executable, "-P", ECHO_SERVER, "--http", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return f"http://127.0.0.1:{port}/mcp", proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the HTTP echo server did not start") from None
            time.sleep(0.05)


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path, url: str) -> None:
    assert stack.info is not None
    engine = await prepare_database(stack.info.database_url)
    try:
        client = await Client.connect(stack.info.temporal_address)
        settings = Settings(
            state_dir=workdir,
            temporal_address=stack.info.temporal_address,
            task_queue=f"bench-mcp-{uuid.uuid4().hex[:6]}",
            memory=False,
        )
        stdio = MCPServer.stdio(sys.executable, ["-P", ECHO_SERVER], name="echo_stdio")
        agents = {
            "python function": agent("bench-python", args.steps, tools=(echo,)),
            "MCP over stdio": agent("bench-stdio", args.steps, mcp=[stdio]),
            "MCP over HTTP": agent("bench-http", args.steps, mcp=[MCPServer.http(url, name="echo_http")]),
        }
        results: dict[str, dict[str, list[float]]] = {v: {k: [] for k in KINDS} for v in agents}
        async with build_worker(client, engine, settings, AgentRegistry(agents.values())):
            wp = Waypoint(client, engine, settings)
            for variant, definition in agents.items():
                # One uncounted run first: it starts the stdio server and warms every pool. Its
                # start_run is the cold start (a stdio server is spawned there).
                warm = await wp.start_run("warm up", agent=definition.name)
                await wp.result(warm)
                history = await client.get_workflow_handle(warm).fetch_history()
                results[variant]["cold"] = activity_ms(history, Activity.START_RUN)
            # Round robin, so the load of a shared machine falls on every variant alike.
            for _ in range(args.runs):
                for variant, definition in agents.items():
                    found = results[variant]
                    run_id = await wp.start_run("echo benchmark", agent=definition.name)
                    result = await wp.result(run_id)
                    if result.status != "completed":
                        raise RuntimeError(f"{variant} run {run_id} ended {result.status}: {result.error}")
                    history = await client.get_workflow_handle(run_id).fetch_history()
                    found["step"] += step_ms(history)
                    found["run_tool"] += activity_ms(history, Activity.RUN_TOOL)
                    found["start_run"] += activity_ms(history, Activity.START_RUN)
                    async with engine.connect() as conn:
                        query = select(tool_effects.c.duration_ms).where(tool_effects.c.run_id == run_id)
                        found["tool"] += [float(ms) for ms in (await conn.execute(query)).scalars()]
            console.print(f"{args.runs} runs of {args.steps + 1} steps per variant")
        await direct_calls(agents, results)
        report(results)
    finally:
        await engine.dispose()


async def direct_calls(agents: dict[str, Agent], results: dict[str, dict[str, list[float]]]) -> None:
    """Microseconds of sequential calls through the layer run_tool uses (`Tool.call`, or `MCPHub.call`
    on an open session), without Temporal or Postgres: DIRECT_CALLS per variant, in rounds."""
    from waypoint.mcp import MCPHub
    from waypoint.tools import ToolContext

    ctx = ToolContext(run_id="r", tenant_id="t", step=1, call_index=0, workspace=Path("."))
    hub = MCPHub()
    try:
        calls = {}
        for variant, definition in agents.items():
            if not definition.mcp:
                calls[variant] = lambda i: echo.call({"text": f"call {i}"}, ctx)
                continue
            [server] = definition.mcp
            [remote] = await hub.discover(definition.name, [server], [])
            calls[variant] = lambda i, s=server, r=remote: hub.call(
                s, r, {"text": f"call {i}"}, key=f"r:{i}:0", timeout=30
            )
        for round_ in range(3):
            for variant, call in calls.items():
                for i in range(DIRECT_CALLS // 3):
                    began = time.perf_counter()
                    await call(round_ * DIRECT_CALLS + i)
                    results[variant]["direct"].append((time.perf_counter() - began) * 1e6)
    finally:
        await hub.close()


def report(results: dict[str, dict[str, list[float]]]) -> None:
    table = Table(title="MCP tool call overhead (medians)", title_justify="left")
    columns = (
        "tool",
        "ms/step (p90)",
        "run_tool ms",
        "tool ms in run_tool",
        "direct call µs",
        "+µs/call vs Python",
        "start_run ms, first / later",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "tool" else "right")
    base = statistics.median(results["python function"]["direct"])
    for variant, found in results.items():
        steps = found["step"]
        p90 = statistics.quantiles(steps, n=10, method="inclusive")[-1]
        direct = statistics.median(found["direct"])
        table.add_row(
            variant,
            f"{statistics.median(steps):.1f} ({p90:.1f})",
            f"{statistics.median(found['run_tool']):.1f}",
            f"{statistics.median(found['tool']):.1f}",
            f"{direct:,.0f}",
            "-" if variant == "python function" else f"{direct - base:+,.0f}",
            f"{statistics.median(found['cold']):.0f} / {statistics.median(found['start_run']):.0f}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="tool-calling steps per run (plus one answer step)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per variant")
    args = parser.parse_args()
    if min(args.steps, args.runs) < 1:
        parser.error("--steps and --runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            url, http = serve_http()
            try:
                asyncio.run(bench(args, stack, Path(tmp), url))
            finally:
                http.terminate()
                http.wait(10)


if __name__ == "__main__":
    main()
