"""Prompt caching per provider with the defaults: how much of each model request the provider's
cache serves, what that saves, and what each adapter costs per step, on one embedded stack and the
providers' fakes.

    python benchmarks/providers.py [--steps 300] [--output-bytes 2048] [--context-tokens 16000]
                                   [--variants defaults,memory-off,window-only]

One run per provider and variant: the agent calls a tool that returns `--output-bytes` of text at
every step, for `--steps` steps, with a 16,000-token working memory. The worker is `waypoint
worker`'s (`run_worker`): episodic memory on the embedded Qdrant shard, as by default. Variants:

- `defaults`: the agent's defaults: episodic memory on (5 episodes recalled), inline compaction at
  80% of the window (its summaries fall back to the extractive one: the fakes refuse structured output);
- `memory-off`: the same without episodic memory;
- `window-only`: memory on, no inline compaction (`compact_at=1.0`): only the window's block drop.

Each fake computes the usage it answers by its provider's documented caching rules
(waypoint/testing/prompt_cache.py): Anthropic reads only at `cache_control` breakpoints, with the
20-block lookback and the 1,024-token minimum of Sonnet-class models; Gemini caches the longest
prefix a recent request had, from 1,024 tokens (implicit caching); OpenAI the longest prefix seen
before, from 1,024 tokens in steps of 128. The table reads the usage each fake answered with:

- cache share: tokens the provider reported read from its cache (OpenAI `cached_tokens`, Anthropic
  `cache_read_input_tokens`, Gemini `cachedContentTokenCount`) over all input tokens (Anthropic's
  `input_tokens` + reads + writes, the others' prompt count), over the run and over its last 100 requests;
- uncached/request: the mean of the input tokens not read from the cache;
- resets: requests that read less than half of the previous request's input from the cache;
- compactions: inline compactions the run made;
- cost, cached / no cache: the run priced with the cache prices (`waypoint.pricing`) against the
  same tokens all at the input price;
- ms/step and the ratio to the openai adapter's: wall time of the run over its steps.

The last line is `prompt cache share, lowest provider: NN%`: the lowest provider's cache share over
the last 100 requests of the `defaults` run (steady state: the window full, compactions under way).
Run it as a file, not with -m.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
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
from waypoint.app.worker import run_worker
from waypoint.config import Settings
from waypoint.names import RunStatus
from waypoint.pricing import cost_usd
from waypoint.store import RunStore
from waypoint.testing.fake_openai import FakeOpenAI, Reply
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


# What each variant changes of the agent's defaults (see the module docstring).
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "memory-off": {"memory": False},
    "window-only": {"compact_at": 1.0},
}
STEADY = 100  # the last requests the steady-state share is taken over


@dataclass
class Result:
    provider: str
    variant: str
    steps: int
    wall_s: float
    share: float
    steady: float
    uncached: float
    resets: int
    compactions: int
    cost_cached: float
    cost_plain: float


def share(records: list[dict[str, Any]]) -> float:
    prompt = sum(r["prompt_tokens"] for r in records)
    return sum(r["cache_read_tokens"] for r in records) / prompt if prompt else 0.0


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


def costs(model: str, records: list[dict[str, Any]]) -> tuple[float, float]:
    """(cost with the cache, cost without) of the recorded requests, from the usage the fake answered."""
    cached = plain = 0.0
    for r in records:
        usage = Usage(r["prompt_tokens"], 7, r["cache_read_tokens"], r["cache_write_tokens"])
        cached += cost_usd(model, usage)
        plain += cost_usd(model, Usage(r["prompt_tokens"], 7))
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
    name = f"{provider.name}-{variant}"
    try:
        settings = Settings(
            state_dir=workdir,
            temporal_address=stack.info.temporal_address,
            task_queue=f"{QUEUE}-{name}",
            qdrant_path=workdir / f"qdrant-{name}",  # each run its own memory: no recall across runs
            openai_api_key="fake",
            openai_base_url=openai_url,
        )
        agent = Agent(
            name=f"bench-{provider.name}",
            instructions="Read every page of the report with read_page, one page a step, then say done.",
            model=provider.model,
            tools=(read_page,),
            max_steps=args.steps + 1,
            context_tokens=args.context_tokens,
            **VARIANTS[variant],
        )
        stop, ready = asyncio.Event(), asyncio.Event()
        worker = asyncio.create_task(run_worker(client, engine, settings, stop, ready.set, AgentRegistry([agent])))
        try:
            await asyncio.wait_for(ready.wait(), 120)
            began = time.perf_counter()
            handle = await client.start_workflow(
                AgentRunWorkflow.run,
                RunInput(agent=agent.name, task="Read the report.", budget=Budget(max_steps=args.steps + 1)),
                id=f"bench-cache-{name}-{uuid.uuid4().hex[:8]}",
                task_queue=settings.task_queue,
                execution_timeout=RUN_TIMEOUT,
            )
            result = await handle.result()
            wall = time.perf_counter() - began
        finally:
            stop.set()
            await worker
        if result.status != RunStatus.COMPLETED:
            raise RuntimeError(f"{provider.name} run {result.run_id} ended {result.status}: {result.error}")
        compactions = await RunStore(engine).compaction.compactions(settings.tenant, run_id=result.run_id, limit=10_000)
    finally:
        compactor.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    records = fake.prefix_stats()["requests"]
    if args.records:
        with open(args.records, "a") as fh:
            fh.write(json.dumps({"provider": provider.name, "variant": variant, "requests": records}) + "\n")
    resets = sum(
        1 for prev, r in zip(records, records[1:], strict=False) if r["cache_read_tokens"] < prev["prompt_tokens"] / 2
    )
    uncached = sum(r["prompt_tokens"] - r["cache_read_tokens"] for r in records) / max(len(records), 1)
    cached, plain = costs(provider.model.partition(":")[2], records)
    return Result(
        provider.name,
        variant,
        result.steps,
        wall,
        share(records),
        share(records[-STEADY:]),
        uncached,
        resets,
        len(compactions),
        cached,
        plain,
    )


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
            for variant in args.variants:
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
    columns = (
        "provider",
        "variant",
        "steps",
        "cache share",
        f"last {STEADY}",
        "uncached/request",
        "resets",
        "compactions",
        "cached/no cache",
        "ms/step",
        "vs openai",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in ("provider", "variant") else "right")
    base = {r.variant: r.wall_s / r.steps for r in results if r.provider == "openai"}
    for r in results:
        per_step = r.wall_s / r.steps
        table.add_row(
            r.provider,
            r.variant,
            str(r.steps),
            f"{r.share:.1%}",
            f"{r.steady:.1%}",
            f"{r.uncached:,.0f}",
            str(r.resets),
            str(r.compactions),
            f"{r.cost_cached / r.cost_plain:.0%}" if r.cost_plain else "-",
            f"{per_step * 1000:.0f}",
            f"{per_step / base[r.variant]:.2f}x" if r.variant in base else "-",
        )
    console.print(table)
    for note in notes:
        console.print(f"note: {note}")
    defaults = [r.steady for r in results if r.variant == "defaults"] or [r.steady for r in results]
    print(f"prompt cache share, lowest provider: {min(defaults, default=0.0):.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="tool-calling steps per run (plus one answer step)")
    parser.add_argument("--output-bytes", type=int, default=OUTPUT_BYTES, help="bytes of each tool output")
    parser.add_argument("--context-tokens", type=int, default=16_000, help="the agent's working memory budget")
    parser.add_argument(
        "--variants",
        default="defaults,memory-off",
        help=f"comma-separated, of {', '.join(VARIANTS)} (default: defaults,memory-off)",
    )
    parser.add_argument("--records", help="append each run's per-request records to this file (JSON lines)")
    args = parser.parse_args()
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.variants or set(args.variants) - set(VARIANTS):
        parser.error(f"--variants takes a comma-separated list of {', '.join(VARIANTS)}")
    if min(args.steps, args.output_bytes, args.context_tokens) < 1:
        parser.error("--steps, --output-bytes and --context-tokens must be at least 1")
    # The fakes refuse structured output, so every compaction logs its fallback: expected here.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    on_stack(bench, args)


if __name__ == "__main__":
    main()
