"""What a step costs on disk: bytes per step of each table a real run writes.

    python benchmarks/storage.py [--steps 50] [--output-kb 20]

Runs one agent on a fresh embedded stack (a real worker, Temporal and Postgres) whose every step
calls a tool that returns `--output-kb` KB of text (seeded random words: it compresses about as
much as prose does), then takes each table's size on disk (`pg_total_relation_size`: heap, TOAST
and indexes; the database holds this run only) and prints bytes per step beside the raw tool
output per step.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import uuid

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

from waypoint import Agent, ScriptedModel, ScriptedTurn, tool
from waypoint.agents import AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.gateway.temporal import connect
from waypoint.testing import embedded_stack, stack_settings

TABLES = ("events", "tool_effects", "checkpoints")


def agent(steps: int, output_kb: int) -> Agent:
    words = [
        f"{a}{b}" for a in ("al", "be", "co", "du", "ex", "fi", "go", "hu") for b in ("rm", "st", "nt", "lk", "sp")
    ]

    @tool
    def fetch(page: int) -> str:
        """Fetch one page of a long document."""
        rng = random.Random(page)
        text = []
        while sum(len(w) + 1 for w in text) < output_kb * 1024:
            text.append(rng.choice(words) + str(rng.randrange(1000)))
        return " ".join(text)

    turns = [ScriptedTurn(tool_calls=[("fetch", {"page": n})]) for n in range(steps)]
    return Agent(
        name="reader",
        instructions="Read every page.",
        model=ScriptedModel([*turns, ScriptedTurn(content="done")]),
        tools=(fetch,),
        max_steps=steps + 1,
        memory=False,
    )


async def measure(steps: int, output_kb: int) -> None:
    with embedded_stack() as stack:
        settings = stack_settings(stack, task_queue=f"storage-{uuid.uuid4().hex[:6]}", memory=False, tracing=False)
        assert settings.database_url is not None
        engine = await prepare_database(settings.database_url)
        client = await connect(settings)
        async with build_worker(client, engine, settings, AgentRegistry([agent(steps, output_kb)])):
            wp = Waypoint(client, engine, settings)
            run_id = await wp.start_run("read the document", agent="reader")
            result = await wp.result(run_id)
        sizes = {}
        async with engine.connect() as conn:
            await conn.execute(text("CHECKPOINT"))
            for table in TABLES:
                sizes[table] = int(await conn.scalar(text(f"SELECT pg_total_relation_size('{table}')")) or 0)
            raw = await conn.scalar(
                text("SELECT coalesce(sum(length(output)), 0) FROM tool_effects WHERE run_id = :r"), {"r": run_id}
            )
        await engine.dispose()
    n = result.steps
    table = Table(title=f"bytes per step, {n} steps, {output_kb} KB tool outputs ({result.status})")
    for col in ("what", "bytes per step"):
        table.add_column(col, justify="left" if col == "what" else "right")
    table.add_row("raw tool output", f"{int(raw or 0) / n:,.0f}")
    for name, size in sizes.items():
        table.add_row(name, f"{size / n:,.0f}")
    table.add_row("all three", f"{sum(sizes.values()) / n:,.0f}")
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--output-kb", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(measure(args.steps, args.output_kb))


if __name__ == "__main__":
    main()
