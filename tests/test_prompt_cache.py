"""Prompt caching: the fakes' cache rules (each provider's documented ones), a run's requests that
stay in the cache with the defaults (memory on, compaction on: 300 steps, no servers), consecutive
requests of a run that share their prefix (the window drops old turns in blocks), and the cache
tokens a provider reports in the event log, the run's totals, its cost, `waypoint status --json`,
the HTTP API and the model span."""

from __future__ import annotations

import json
import re
import urllib.request

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import select
from temporalio.client import Client

from tests.cache_steps import cache_share, simulate
from tests.helpers import waypoint
from waypoint import telemetry
from waypoint.client import Waypoint
from waypoint.models.anthropic import anthropic_request
from waypoint.pricing import cost_usd, prices_of
from waypoint.store.schema import events
from waypoint.telemetry import chat_span
from waypoint.telemetry.spanfile import span_dict
from waypoint.testing.fake_anthropic import PromptCache, refusal
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.testing.prompt_cache import ImplicitCache, PrefixTracker, openai_cached
from waypoint.types import ModelTurn, Usage

STEPS = 24


def test_the_tracker_counts_the_prefix_a_request_repeats():
    tracker = PrefixTracker()
    head = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "task"}]
    first = tracker.observe("run", [[], *head])
    second = tracker.observe("run", [[], *head, {"role": "assistant", "content": "a" * 40}])
    third = tracker.observe("run", [[], head[0], {"role": "user", "content": "other task"}])
    assert first.prefix_tokens == 0 and second.prefix_tokens == first.tokens
    assert 0 < third.prefix_tokens < first.tokens  # the system message only
    other = tracker.observe("other run", [[], *head])
    assert other.prefix_tokens == 0  # runs never share a record of the previous request
    assert other.seen_prefix_tokens == first.tokens  # but a cache holds what any request sent before
    assert third.seen_prefix_tokens == third.prefix_tokens and second.seen_prefix_tokens == first.tokens
    tracker.report(second, 2_000, 1_500, 100)
    stats = tracker.stats()
    assert stats["prefix_share"] == pytest.approx(stats["prefix_tokens"] / stats["input_tokens"])
    assert (stats["prompt_tokens"], stats["cache_read_tokens"], stats["cache_share"]) == (2_000, 1_500, 0.75)
    assert stats["requests"][1]["cache_write_tokens"] == 100
    assert openai_cached(1_000) == 0 and openai_cached(1_300) == 1_280  # 1,024 at least, then steps of 128


def _claude(turns: int, *, size: int = 2_000) -> dict:
    """An Anthropic request of `turns` tool steps, with the adapter's breakpoints."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "task " + "t" * size}]
    for i in range(turns):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " + "o" * size},
        ]
    return anthropic_request("claude-sonnet-4-5", messages, [])


def test_the_anthropic_fake_caches_by_the_documented_rules():
    """Reads only at breakpoints or at most 20 blocks before one, at least 1,024 tokens (Sonnet), more
    than 4 breakpoints refused; what a request adds after the previous one is written, the rest read."""
    cache = PromptCache()
    first = cache.use(_claude(1))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1_024
    second = cache.use(_claude(2))  # the previous request's end is this one's breakpoint before the newest turn
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["input_tokens"] == 0 and 0 < second["cache_creation_input_tokens"] < 1_100  # the newest turn
    # the breakpoint before the newest turn gone: found by the lookback, 2 blocks back
    body = _claude(3)
    del body["messages"][-3]["content"][-1]["cache_control"]
    assert cache.use(body)["cache_read_input_tokens"] > second["cache_read_input_tokens"]
    # more than 20 blocks after the last write, and no breakpoint nearer: nothing read
    far = PromptCache()
    far.use(_claude(1))
    body = _claude(12)
    for message in body["messages"][:-1]:
        for block in message["content"]:
            block.pop("cache_control", None)
    assert far.use(body)["cache_read_input_tokens"] == 0
    # under the minimum nothing is written, so nothing is read back
    small = PromptCache()
    assert small.use(_claude(1, size=100))["cache_creation_input_tokens"] == 0
    assert small.use(_claude(1, size=100))["cache_read_input_tokens"] == 0
    assert PromptCache(min_tokens=0).use(_claude(1, size=100))["cache_creation_input_tokens"] > 0
    # the API's limit on breakpoints
    body = _claude(3)
    for message in body["messages"]:
        message["content"][-1]["cache_control"] = {"type": "ephemeral"}
    assert "maximum of 4 blocks with cache_control" in (refusal(body) or "")
    assert refusal(_claude(3)) is None


def test_the_gemini_fake_caches_a_prefix_seen_before_from_1024_tokens():
    cache = ImplicitCache()
    start = "x" * 8_000
    assert cache.use("m", start) == (2_000, 0)
    assert cache.use("m", start + "y" * 400) == (2_100, 2_000)
    assert cache.use("other model", start) == (2_000, 0)  # a cache per model
    assert cache.use("m", "x" * 4_000 + "z" * 400)[1] == 0  # 1,000 tokens in common: under the minimum
    assert cache.use("m", "x" * 6_000 + "z")[1] == 1_500


@pytest.mark.parametrize("provider", ["anthropic", "gemini", "openai"])
def test_a_default_run_reads_most_of_its_input_from_the_cache(provider: str):
    """300 steps of 2 KB tool outputs in a 16k window, memory on (a recall of compaction summaries and
    old steps that differs at every recall) and compaction at 80%: over the last 100 requests, the
    provider reports at least 85% of the input read from its cache. Recalling at every step and
    placing the episodes after the newest turn gave 69% (Anthropic) and 74% (Gemini) here."""
    requests = simulate(provider)
    assert len(requests) == 300
    compactions = sum(1 for a, b in zip(requests, requests[1:], strict=False) if b.prompt_tokens < a.prompt_tokens)
    assert compactions >= 10  # the window did move, compactions and all
    assert cache_share(requests[-100:]) >= 0.85, cache_share(requests[-100:])
    assert cache_share(requests) >= 0.85


def test_cached_tokens_are_priced_at_the_cache_price():
    usage = Usage(input_tokens=10_000, output_tokens=100, cache_read_tokens=8_000)
    per_input, per_output, per_read, _ = prices_of("gpt-4o-mini-2024-07-18")
    assert per_read == 0.075  # OpenAI's documented cached-input price, half the input price
    expected = (2_000 * per_input + 8_000 * per_read + 100 * per_output) / 1_000_000
    assert cost_usd("gpt-4o-mini-2024-07-18", usage) == pytest.approx(expected)
    assert cost_usd("gpt-4o-mini", usage) < cost_usd("gpt-4o-mini", Usage(10_000, 100))
    # Anthropic's shares without a table entry: reads at a tenth of the input, writes at 1.25 times
    claude = {"claude-test": (3.0, 15.0)}
    written = Usage(input_tokens=1_000, output_tokens=0, cache_read_tokens=600, cache_write_tokens=400)
    assert cost_usd("claude-test", written, claude) == pytest.approx((600 * 0.3 + 400 * 3.75) / 1_000_000)
    # an override with four numbers sets the cache prices too
    assert prices_of("mine", {"mine": (1.0, 2.0, 0.1, 1.5)}) == (1.0, 2.0, 0.1, 1.5)


def test_the_model_span_carries_the_cache_tokens(settings):
    spans = InMemorySpanExporter()
    telemetry.setup(settings, exporter=spans)
    turn = ModelTurn(model="gpt-4o-mini", content="hi", usage=Usage(3_000, 5, 2_048, 512))
    with chat_span("openai:gpt-4o-mini", [], run_id="r", step=1, tenant="t", attempt=1) as chat:
        chat.record(turn)
    telemetry.current().force_flush()
    (span,) = [span_dict(s) for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert span["attributes"]["gen_ai.usage.cache_read_input_tokens"] == 2_048
    assert span["attributes"]["gen_ai.usage.cache_creation_input_tokens"] == 512


@pytest.mark.postgres
async def test_consecutive_requests_share_their_prefix_and_cache_tokens_are_everywhere(
    client: Client, engine, settings, worker, fake_openai: FakeOpenAI, api
):
    fake_openai.count_tokens = True  # usage measured from the requests, cached tokens by OpenAI's rule
    fake_openai.answer(
        *(Turn(tool_calls=[("big_output", {"size": 600})]) for _ in range(STEPS)),
        Turn(content="done"),
    )
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("Read outputs.", agent="cacher")
    result = await wp.result(run_id)
    assert result.status == "completed", result.error

    # The window (2,000 tokens) fills up within a few steps; after that, each request still repeats
    # the whole previous one except when a block of old turns leaves.
    with urllib.request.urlopen(fake_openai.base_url + "/stats") as answer:
        stats = json.load(answer)
    assert stats == fake_openai.prefix_stats()
    requests = stats["requests"]
    assert len(requests) == STEPS + 1
    kept = [b["prefix_tokens"] == a["tokens"] for a, b in zip(requests, requests[1:], strict=False)]
    drops = kept.count(False)
    assert 2 <= drops <= STEPS // 4, kept  # the window did move, in a few blocks, not once a step
    assert stats["prefix_share"] > 0.6

    # The model_response events carry the cache tokens the server reported, and the cost prices them.
    async with engine.connect() as conn:
        payloads = (
            await conn.execute(
                select(events.c.payload)
                .where(events.c.run_id == run_id, events.c.kind == "model_response")
                .order_by(events.c.seq)
            )
        ).scalars()
        responses = list(payloads)
    reads = [p["usage"]["cache_read_tokens"] for p in responses]
    assert reads == [r["cache_read_tokens"] for r in requests]  # the usage the fake answered, recorded
    assert reads == [openai_cached(r["seen_prefix_tokens"]) for r in requests]  # by OpenAI's rule
    assert sum(1 for r in reads if r) >= STEPS // 2
    cached_step = next(p for p in responses if p["usage"]["cache_read_tokens"])
    assert cached_step["cost_usd"] == pytest.approx(cost_usd(cached_step["model"], Usage(**cached_step["usage"])))
    plain = Usage(cached_step["usage"]["input_tokens"], cached_step["usage"]["output_tokens"])
    assert cached_step["cost_usd"] < cost_usd(cached_step["model"], plain)

    # The run's totals, its status as JSON, and the HTTP API.
    row = await wp.run(run_id)
    assert row.cache_read_tokens == sum(reads) and row.cache_write_tokens == 0
    assert row.cost_usd == pytest.approx(sum(p["cost_usd"] for p in responses), abs=1e-6)
    done = await waypoint(settings, "status", run_id, "--json")
    assert done.code == 0, done.err
    shown = json.loads(done.out)
    assert shown["cache_read_tokens"] == sum(reads)
    assert [line["cache_read_tokens"] for line in shown["timeline"]] == reads
    found = (await api.http.get(f"/v1/runs/{run_id}")).json()
    assert (found["cache_read_tokens"], found["cache_write_tokens"]) == (sum(reads), 0)
    steps = (await api.http.get(f"/v1/runs/{run_id}/steps")).json()["steps"]
    assert [s["cache_read_tokens"] for s in steps] == reads
    # and the table `waypoint status` prints has a column for them
    table = await waypoint(settings, "status", run_id)
    assert "cached" in table.out and str(max(reads)) in table.out
    # the viewer's run page: the run's cached share and each step's
    async with httpx.AsyncClient(base_url=api.url, timeout=60) as browser:
        form = (await browser.get("/ui/login")).text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form)
        fields = {"key": api.key, "next": f"/ui/runs/{run_id}", **({"csrf": csrf.group(1)} if csrf else {})}
        page = await browser.post("/ui/login", data=fields, follow_redirects=True)
    assert page.status_code == 200, page.text[:300]
    assert f"{sum(reads):,} of the input from the prompt cache" in page.text
    assert f"{max(reads)} cached" in page.text
