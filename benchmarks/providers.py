"""Prompt caching per provider: how much of each request repeats the previous one's prefix, what
that saves, and what each adapter costs per step, on one embedded stack and the providers' fakes.

    python benchmarks/providers.py [--steps 300] [--output-bytes 2048] [--context-tokens 16000]

One run per provider: the agent calls a tool that returns `--output-bytes` of text at every step,
for `--steps` steps, with the default 16,000-token working memory (inline compaction on, as by
default; its summaries fall back to the extractive one, the fakes refuse structured output). The
fakes record, per request, its size and the prefix it shares with the run's previous request
(waypoint/testing/prompt_cache.py); the table reads those records:

- prefix share: input tokens that repeat the previous request's prefix, over all input tokens;
- prefix breaks: requests that repeat less than half of the previous one (the window moved);
- cost, cached / no cache: the run priced with the cache prices (`waypoint.pricing`) against the
  same tokens all at the input price;
- working memory: with inline compaction as by default, or the window alone (`compact_at=1.0`);
- ms/step and the ratio to the openai adapter's: wall time of the run over its steps.

Each provider's fake (`waypoint.testing.fake_openai`, `fake_anthropic`, `fake_gemini`) answers with
the same responder and keeps the same per-request prefix record (`prefix_stats()`). The last line is
`prompt cache share, lowest provider: NN%`. Run it as a file, not with -m.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from step_overhead import on_stack
from temporalio.client import Client

from waypoint.agents import Agent, AgentRegistry
from waypoint.app.devstack import prepare_database
from waypoint.app.embedded import EmbeddedStack
from waypoint.app.worker import build_worker
from waypoint.config import Settings
from waypoint.names import RunStatus
from waypoint.pricing import cost_usd
from waypoint.testing.fake_openai import FakeOpenAI, Reply
from waypoint.testing.prompt_cache import openai_cached
from waypoint.tools import tool
from waypoint.types import Budget, RunInput, Usage
from waypoint.workflows.agent_run import AgentRunWorkflow

QUEUE = "bench-providers"
RUN_TIMEOUT = timedelta(minutes=20)
console = Console(width=160)
OUTPUT_BYTES = 2048
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


@tool(name="read_page")
async def read_page(page: int) -> str:
    """Read one page of the report."""
    words = " ".join(WORDS[(page + i) % len(WORDS)] for i in range(OUTPUT_BYTES // 6))
    return f"page {page}: {words}"[:OUTPUT_BYTES]


@dataclass(frozen=True)
class Provider:
    name: str
    module: str  # the fake's module
    server: str  # its server class
    model: str  # the agent's model spec
    env: Callable[[Any], dict[str, str]]  # variables pointing the adapter at the fake
    # The OpenAI fake answers scripted usage unless asked to measure it; the others always measure it.
    options: dict[str, Any] = field(default_factory=dict)


PROVIDERS = [
    Provider(
        "openai",
        "waypoint.testing.fake_openai",
        "FakeOpenAI",
        "openai:gpt-4.1-mini",
        lambda f: {},
        {"count_tokens": True},
    ),
    Provider(
        "anthropic",
        "waypoint.testing.fake_anthropic",
        "FakeAnthropic",
        "anthropic:claude-sonnet-4-5",
        lambda f: {"ANTHROPIC_BASE_URL": f.base_url, "ANTHROPIC_API_KEY": "fake"},
    ),
    Provider(
        "gemini",
        "waypoint.testing.fake_gemini",
        "FakeGemini",
        "google:gemini-2.5-flash",
        lambda f: {"GOOGLE_GEMINI_BASE_URL": f.base_url, "GEMINI_API_KEY": "fake"},
    ),
]


# Each provider runs twice: with inline compaction as by default (its summary replaces the window's
# older turns at 80% of the budget), and with the window alone (`compact_at=1.0`), where only
# working memory's dropping of old turns keeps the request within the budget.
VARIANTS = {"compaction": 0.8, "window only": 1.0}


@dataclass
class Result:
    provider: str
    variant: str
    steps: int
    wall_s: float
    share: float
    breaks: int
    cost_cached: float
    cost_plain: float


def agent_turns(module: Any, steps: int) -> Callable[[dict[str, Any], int], Any]:
    """The responder: `read_page` for `steps` steps, then an answer. Requests for a structured
    summary (compaction) get a 400, so compaction falls back to its extractive summary."""
    answered = 0

    def respond(body: dict[str, Any], n: int) -> Any:
        nonlocal answered
        if body.get("response_format"):
            return Reply(400, {"error": {"message": "no structured output here", "type": "invalid_request_error"}})
        answered += 1
        if answered > steps:
            return module.Turn(content="done")
        return module.Turn(tool_calls=[("read_page", {"page": answered})])

    return respond


def costs(model: str, provider: str, records: list[dict[str, Any]]) -> tuple[float, float]:
    """(cost with the cache, cost without) of the recorded requests."""
    cached = plain = 0.0
    for r in records:
        repeated = r["prefix_tokens"]
        read = r.get("cache_read_tokens", openai_cached(repeated) if provider == "openai" else repeated)
        write = r.get("cache_write_tokens", r["tokens"] - r["prefix_tokens"] if provider == "anthropic" else 0)
        cached += cost_usd(model, Usage(r["tokens"], 7, read, write))
        plain += cost_usd(model, Usage(r["tokens"], 7))
    return cached, plain


async def one_run(
    client: Client,
    engine: Any,
    workdir: Path,
    stack: EmbeddedStack,
    provider: Provider,
    variant: str,
    fake: Any,
    args: Any,
) -> Result:
    assert stack.info is not None
    # Compaction's summary requests always go to the OpenAI endpoint: a fake that refuses them.
    compactor = FakeOpenAI(agent_turns(importlib.import_module("waypoint.testing.fake_openai"), 0)).start()
    openai_url = fake.base_url if provider.name == "openai" else compactor.base_url
    env = provider.env(fake)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        settings = Settings(
            state_dir=workdir,
            temporal_address=stack.info.temporal_address,
            task_queue=QUEUE,
            openai_api_key="fake",
            openai_base_url=openai_url,
        )
        agent = Agent(
            name=f"bench-{provider.name}",
            instructions="Read every page of the report with read_page, one page a step, then say done.",
            model=provider.model,
            tools=(read_page,),
            max_steps=args.steps + 1,
            memory=False,
            context_tokens=args.context_tokens,
            compact_at=VARIANTS[variant],
        )
        async with build_worker(client, engine, settings, AgentRegistry([agent])):
            began = time.perf_counter()
            handle = await client.start_workflow(
                AgentRunWorkflow.run,
                RunInput(agent=agent.name, task="Read the report.", budget=Budget(max_steps=args.steps + 1)),
                id=f"bench-cache-{provider.name}-{uuid.uuid4().hex[:8]}",
                task_queue=QUEUE,
                execution_timeout=RUN_TIMEOUT,
            )
            result = await handle.result()
            wall = time.perf_counter() - began
        if result.status != RunStatus.COMPLETED:
            raise RuntimeError(f"{provider.name} run {result.run_id} ended {result.status}: {result.error}")
    finally:
        compactor.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    stats = fake.prefix_stats()
    records = stats["requests"]
    if args.records:
        with open(args.records, "a") as fh:
            fh.write(json.dumps({"provider": provider.name, "variant": variant, "requests": records}) + "\n")
    breaks = sum(1 for prev, r in zip(records, records[1:], strict=False) if r["prefix_tokens"] < prev["tokens"] / 2)
    cached, plain = costs(provider.model.partition(":")[2], provider.name, records)
    return Result(provider.name, variant, result.steps, wall, stats["prefix_share"], breaks, cached, plain)


async def bench(args: argparse.Namespace, stack: EmbeddedStack, workdir: Path) -> None:
    assert stack.info is not None
    global OUTPUT_BYTES
    OUTPUT_BYTES = args.output_bytes
    engine = await prepare_database(stack.info.database_url)
    results: list[Result] = []
    notes: list[str] = []
    try:
        client = await Client.connect(stack.info.temporal_address)
        for provider in PROVIDERS:
            module = importlib.import_module(provider.module)
            for variant in VARIANTS:
                fake = getattr(module, provider.server)(agent_turns(module, args.steps), **provider.options).start()
                try:
                    with console.status(f"{provider.name}, {variant}: {args.steps} steps..."):
                        results.append(await one_run(client, engine, workdir, stack, provider, variant, fake, args))
                except Exception as exc:  # one provider failing leaves the others' numbers
                    notes.append(f"{provider.name}, {variant}: failed, {type(exc).__name__}: {exc}")
                finally:
                    fake.stop()
    finally:
        await engine.dispose()
    report(results, notes, args)


def report(results: list[Result], notes: list[str], args: argparse.Namespace) -> None:
    table = Table(
        title=f"Prompt caching: {args.steps} steps, {args.output_bytes:,}-byte tool outputs, "
        f"{args.context_tokens:,}-token window",
        title_justify="left",
    )
    columns = ("provider", "working memory", "steps", "prefix share", "prefix breaks", "cost cached", "cost no cache")
    for col in (*columns, "cached/no cache"):
        table.add_column(col, justify="left" if col in ("provider", "working memory") else "right")
    table.add_column("ms/step", justify="right")
    table.add_column("vs openai", justify="right")
    base = {r.variant: r.wall_s / r.steps for r in results if r.provider == "openai"}
    for r in results:
        per_step = r.wall_s / r.steps
        table.add_row(
            r.provider,
            r.variant,
            str(r.steps),
            f"{r.share:.1%}",
            str(r.breaks),
            f"${r.cost_cached:.4f}",
            f"${r.cost_plain:.4f}",
            f"{r.cost_cached / r.cost_plain:.0%}" if r.cost_plain else "-",
            f"{per_step * 1000:.0f}",
            f"{per_step / base[r.variant]:.2f}x" if r.variant in base else "-",
        )
    console.print(table)
    for note in notes:
        console.print(f"note: {note}")
    lowest = min((r.share for r in results), default=0.0)
    print(f"prompt cache share, lowest provider: {lowest:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="tool-calling steps per run (plus one answer step)")
    parser.add_argument("--output-bytes", type=int, default=OUTPUT_BYTES, help="bytes of each tool output")
    parser.add_argument("--context-tokens", type=int, default=16_000, help="the agent's working memory budget")
    parser.add_argument("--records", help="append each run's per-request prefix records to this file (JSON lines)")
    args = parser.parse_args()
    if min(args.steps, args.output_bytes, args.context_tokens) < 1:
        parser.error("--steps, --output-bytes and --context-tokens must be at least 1")
    on_stack(bench, args)


if __name__ == "__main__":
    main()
