"""`rerun`: a recorded run again with another model, on a real worker and the fake OpenAI server
answering per model name. With recorded tools, a call matching the original's (same step,
position, tool and canonical arguments) gets the recorded result and the tool does not run (its
side-effect file stays untouched); a diverging call gets a "not recorded" error, counted, unless
its tool is replay-safe (or read-only); `compare` finds the first divergence; another tenant can do
neither. A rerun may bring its own instructions, and an approval-gated call that matches the record
does not wait for a human."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.browser import sign_in
from tests.helpers import eventually, one_line_error, waypoint, waypoint_here
from tests.mcp_agents import stdio_server
from waypoint import Agent, ScriptedModel, ScriptedTurn, ToolContext, tool
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.demo import demo as demo_agent
from waypoint.errors import NotFound
from waypoint.store.schema import compactions, events, tool_effects
from waypoint.testing.fake_openai import Turn

pytestmark = pytest.mark.postgres

LOOKUPS: list[str] = []


@tool
def append_line(ctx: ToolContext, text: str) -> str:
    """Append a line to effects.txt in the workspace (a side effect)."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / "effects.txt").open("a") as f:
        f.write(text + "\n")
    return f"appended {text!r}"


@tool(replay_safe=True)
def lookup(key: str) -> str:
    """Read a value (no side effects)."""
    LOOKUPS.append(key)
    return f"value of {key}"


PEEKS: list[str] = []


@tool(read_only=True)
def peek(key: str) -> str:
    """Read a value (read-only: no side effects)."""
    PEEKS.append(key)
    return f"peeked {key}"


@tool(requires_approval=True)
def remove(ctx: ToolContext, name: str) -> str:
    """Remove an entry: appends to removed.txt in the workspace (a side effect a human approves)."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / "removed.txt").open("a") as f:
        f.write(name + "\n")
    return f"removed {name}"


writer = Agent(
    name="writer",
    instructions="Write lines.",
    model="openai:model-a",
    tools=(append_line, lookup, peek, remove),
    max_steps=10,
)


LONG = 14  # the long writer's tool steps


@tool
def log_line(ctx: ToolContext, n: int) -> str:
    """Append line n to long.txt in the workspace (a side effect) and return a long receipt."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / "long.txt").open("a") as f:
        f.write(f"{n}\n")
    return f"logged {n}: " + "receipt " * 40


long_writer = Agent(
    name="long_writer",
    instructions="Log lines for a long time.",
    model=ScriptedModel(
        [*(ScriptedTurn(tool_calls=[("log_line", {"n": i})]) for i in range(LONG)), ScriptedTurn(content="logged")]
    ),
    tools=(log_line,),
    max_steps=LONG + 10,
    # Small numbers, the same shape: three executions or more, and a context compacted before the
    # rerun's fork step (what the rerun must carry over); the property does not depend on the length.
    continue_as_new_every=4,
    context_tokens=1_500,
    compact_at=0.5,
    memory=False,
)

# What each model does at each step (the number of assistant turns so far + 1).
SCRIPTS: dict[str, list[Turn]] = {
    "model-a": [
        Turn(tool_calls=[("append_line", {"text": "one"})], prompt_tokens=100, completion_tokens=10),
        Turn(tool_calls=[("append_line", {"text": "two"})], prompt_tokens=120, completion_tokens=10),
        Turn(content="wrote one and two", prompt_tokens=140, completion_tokens=5),
    ],
    "model-b": [
        Turn(tool_calls=[("append_line", {"text": "one"})], prompt_tokens=100, completion_tokens=10),  # matches
        Turn(tool_calls=[("append_line", {"text": "TWO"})], prompt_tokens=120, completion_tokens=12),  # diverges
        Turn(tool_calls=[("lookup", {"key": "x"})], prompt_tokens=150, completion_tokens=8),  # replay-safe
        Turn(content="wrote one, could not write TWO", prompt_tokens=170, completion_tokens=9),
    ],
    "model-c": [
        Turn(tool_calls=[("append_line", {"text": "one"})]),  # matches
        Turn(tool_calls=[("peek", {"key": "y"})]),  # diverges, read-only: runs live
        Turn(tool_calls=[("append_line", {"text": "three"})]),  # diverges, not safe: not recorded
        Turn(content="done"),
    ],
    "gate-a": [
        Turn(tool_calls=[("remove", {"name": "a"})]),
        Turn(content="removed a"),
    ],
    "gate-b": [
        Turn(tool_calls=[("remove", {"name": "a"})]),  # matches the record: no approval
        Turn(tool_calls=[("remove", {"name": "b"})]),  # does not: waits for a human as usual
        Turn(content="removed a, not b"),
    ],
}


def by_model(body: dict[str, Any], n: int) -> Turn:
    step = sum(m["role"] == "assistant" for m in body["messages"])
    return SCRIPTS[body["model"]][step]


@pytest.fixture
def agents() -> AgentRegistry:
    return AgentRegistry([demo_agent, writer, long_writer])


async def ledger(engine, run_id: str) -> list[Any]:
    async with engine.connect() as conn:
        query = select(tool_effects).where(tool_effects.c.run_id == run_id).order_by(tool_effects.c.step)
        return list((await conn.execute(query)).mappings())


@pytest.mark.timeout(240)
async def test_rerun_with_recorded_tools(client, engine, settings, worker, fake_openai):
    fake_openai.responder = by_model
    LOOKUPS.clear()
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("Write two lines", agent="writer")
    assert (await wp.result(original)).status == "completed"
    effects = Path(settings.resolved_workspace) / "effects.txt"
    assert effects.read_text() == "one\ntwo\n"
    before = effects.stat().st_mtime_ns

    rerun = await wp.rerun(original, model="openai:model-b")
    result = await wp.result(rerun)
    assert (result.status, result.steps, result.output) == ("completed", 4, "wrote one, could not write TWO")
    assert effects.read_text() == "one\ntwo\n" and effects.stat().st_mtime_ns == before  # nothing ran again
    assert LOOKUPS == ["x"]  # the replay-safe tool ran live

    row = await wp.run(rerun)
    assert (row.lineage_kind, row.parent_run_id, row.fork_step, row.model) == ("rerun", original, 0, "openai:model-b")
    calls = await ledger(engine, rerun)
    assert [(c["step"], c["tool"], c["outcome"], c["duration_ms"]) for c in calls[:2]] == [
        (1, "append_line", "ok", 0),  # answered from the record: it did not run
        (2, "append_line", "not_recorded", 0),
    ]
    assert calls[0]["output"] == "appended 'one'"  # the original's recorded output
    assert "not recorded" in calls[1]["output"] and "append_line" in calls[1]["output"]
    assert (calls[2]["tool"], calls[2]["outcome"], calls[2]["output"]) == ("lookup", "ok", "value of x")
    # the model read the error: the third request carries it as a tool message
    third = [s.body for s in fake_openai.seen if s.body["model"] == "model-b"][2]
    assert "not recorded" in [m for m in third["messages"] if m["role"] == "tool"][-1]["content"]
    assert [c["outcome"] for c in await ledger(engine, original)] == ["ok", "ok"]  # the original is untouched

    found = await wp.compare(original, rerun)
    assert found.first_divergence == 2 and found.steps[0].same
    assert found.not_recorded_b == 1 and found.steps_delta == 1
    assert found.input_tokens_delta == 150 + 170 - 140 and found.a.output == "wrote one and two"

    # in-process: its exit code
    done = await waypoint_here(settings, "compare", original, rerun, "--fail-on-divergence")
    assert done.code == 1 and "first divergence at step 2" in done.out and "1 call(s) not recorded" in done.out

    # another tenant: neither rerun nor compare finds the run
    b = Waypoint(client, engine, settings.model_copy(update={"tenant": "tenant-b"}))
    with pytest.raises(NotFound):
        await b.rerun(original, model="openai:model-b")
    with pytest.raises(NotFound):
        await b.compare(original, rerun)
    error = one_line_error(await waypoint_here(settings, "--tenant", "tenant-b", "rerun", original))
    assert "no run" in error and "waypoint runs" in error


@pytest.mark.timeout(240)
async def test_rerun_from_a_step_with_live_tools_over_the_cli(client, engine, settings, worker, fake_openai):
    fake_openai.responder = by_model
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("Write two lines", agent="writer")
    assert (await wp.result(original)).status == "completed"
    effects = Path(settings.resolved_workspace) / "effects.txt"

    # In-process: what the command does; a rerun in a real process is the batch's (below).
    done = await waypoint_here(settings, "rerun", original, "--from-step", "1", "--tools", "live", "--follow", "--json")
    assert done.code == 0, done.err
    rerun = (await wp.runs(limit=1))[0].run_id
    assert rerun != original
    *steps, last = [json.loads(line) for line in done.out.splitlines()]  # JSON lines throughout
    assert [s["step"] for s in steps] == [2, 3] and (last["run_id"], last["status"]) == (rerun, "completed")
    assert f"rerun {rerun} from step 1" in (await waypoint_here(settings, "history", original)).out
    assert f"rerun of {original} from step 1" in (await waypoint_here(settings, "history", rerun)).out
    row = await wp.run(rerun)
    assert (row.status, row.fork_step, row.lineage_kind) == ("completed", 1, "rerun")
    assert effects.read_text() == "one\ntwo\ntwo\n"  # live: step 2 ran again for real
    found = await wp.compare(original, rerun)
    assert found.first_divergence is None and not found.diverged  # same model, same calls

    assert "recorded, live" in one_line_error(await waypoint_here(settings, "rerun", original, "--tools", "maybe"))
    assert "step" in one_line_error(await waypoint_here(settings, "rerun", original, "--from-step", "99"))


@pytest.mark.timeout(300)
async def test_a_batch_of_reruns_and_its_summary(client, engine, settings, worker, fake_openai):
    fake_openai.responder = by_model
    wp = Waypoint(client, engine, settings)
    # Three runs, two at a time: two rounds of the batch's concurrency, one of them parallel (every
    # rerun's delta is the same, so more runs would not change the p50 and p95).
    originals = [await wp.start_run(f"Write two lines ({n})", agent="writer") for n in range(3)]
    for run_id in originals:
        assert (await wp.result(run_id)).status == "completed"
    effects = Path(settings.resolved_workspace) / "effects.txt"
    written = effects.read_text()
    assert written.count("\n") == 6

    done = await waypoint(
        settings,
        "rerun",
        "--select",
        "status=completed agent=writer since=1h",
        "--limit",
        "25",
        "--concurrency",
        "2",
        "--model",
        "openai:model-b",
        "--json",
        timeout=240,
    )
    assert done.code == 0, done.err
    report = json.loads(done.out)
    assert report["runs"] == 3 and {i["source_run_id"] for i in report["items"]} == set(originals)
    assert report["diverged_pct"] == 100.0 and report["completed_pct"] == 100.0
    # model-b: 4 steps of 100+10, 120+12, 150+8, 170+9 tokens; model-a: 3 of 100+10, 120+10, 140+5
    assert report["tokens_delta_p50_p95"] == [194, 194]  # 579 - 385
    assert all(i["first_divergence"] == 2 and i["not_recorded"] == 1 for i in report["items"])
    assert effects.read_text() == written  # no recorded tool ran again

    batch = await waypoint_here(settings, "runs", "--batch", report["batch_id"], "--limit", "50", "--json")
    listed = json.loads(batch.out)
    assert sorted(r["run_id"] for r in listed) == sorted(i["run_id"] for i in report["items"])
    assert {(r["lineage_kind"], r["batch_id"]) for r in listed} == {("rerun", report["batch_id"])}

    # a second batch picks originals only, never the reruns just made
    again = await wp.rerun_batch("agent=writer", limit=50, model="openai:model-a", concurrency=2)
    assert {i.source_run_id for i in again.items} == set(originals)
    assert again.diverged_pct == 0.0 and again.tokens_delta == (0.0, 0.0)

    # what the command refuses, in-process (the batch above was a real process)
    assert "key=value" in one_line_error(await waypoint_here(settings, "rerun", "--select", "colour=red"))
    both = await waypoint_here(settings, "rerun", originals[0], "--select", "agent=writer")
    assert "not both" in one_line_error(both)
    assert "no run matches" in one_line_error(await waypoint_here(settings, "rerun", "--select", "agent=nobody"))


@pytest.mark.timeout(240)
async def test_http_rerun(api, worker, fake_openai, client, engine, settings):
    fake_openai.responder = by_model
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("Write two lines", agent="writer")
    assert (await wp.result(original)).status == "completed"
    r = await api.http.post(f"/v1/runs/{original}/rerun", json={"model": "openai:model-b"})
    assert r.status_code == 201, r.text
    rerun = r.json()["run_id"]
    by_cli = json.loads((await waypoint_here(settings, "rerun", original, "--json")).out)  # the same names as HTTP
    assert by_cli.keys() == r.json().keys() and (by_cli["parent_run_id"], by_cli["from_step"]) == (original, 0)
    await wp.result(by_cli["run_id"])
    assert r.headers["location"] == f"/v1/runs/{rerun}"
    assert (await wp.result(rerun)).output == "wrote one, could not write TWO"
    compared = (await api.http.get(f"/v1/runs/{original}/compare/{rerun}")).json()
    assert compared["first_divergence"] == 2 and compared["not_recorded_b"] == 1
    bad = await api.http.post(f"/v1/runs/{original}/rerun", json={"tools": "maybe"})
    assert bad.status_code == 400 and "recorded, live" in bad.json()["error"]["message"]
    told = await api.http.post(f"/v1/runs/{original}/rerun", json={"instructions": "Be brief."})
    assert told.status_code == 201, told.text
    await wp.result(told.json()["run_id"])
    compared = (await api.http.get(f"/v1/runs/{original}/compare/{told.json()['run_id']}")).json()
    assert compared["instructions_diff"] == ["@@ -1 +1 @@", "-Write lines.", "+Be brief."]
    empty = await api.http.post(f"/v1/runs/{original}/rerun", json={"instructions": " "})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]["message"]

    # the viewer names reruns as reruns, on both sides
    async with httpx.AsyncClient(base_url=api.url) as browser:
        assert (await sign_in(browser, api.key)).status_code == 303
        page = (await browser.get(f"/ui/runs/{original}")).text
        assert "<dt>Reruns</dt>" in page and f"/ui/runs/{rerun}" in page and "<dt>Forks</dt>" not in page
        assert "<dt>Rerun of</dt>" in (await browser.get(f"/ui/runs/{rerun}")).text


@pytest.mark.timeout(300)
async def test_rerun_of_a_run_with_continue_as_new_and_compactions(client, engine, settings, worker):
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run(f"Log {LONG} lines", agent="long_writer")
    assert (await wp.result(original)).steps == LONG + 1
    executions = [e async for e in client.list_workflows(f"WorkflowId = '{original}'")]
    assert len(executions) >= 3  # continued as new every 4 steps
    async with engine.connect() as conn:
        compacted = (
            await conn.execute(select(compactions.c.last_step).where(compactions.c.run_id == original))
        ).scalars()
        first_compacted = min(compacted, default=None)
    fork_step = 6  # in the second execution
    assert first_compacted is not None and first_compacted < fork_step  # its context was compacted inline, before
    log = Path(settings.resolved_workspace) / "long.txt"
    written = log.read_text()
    assert written.count("\n") == LONG

    rerun = await wp.rerun(original, from_step=fork_step, model="scripted")
    result = await wp.result(rerun)
    assert (result.status, result.steps, result.output) == ("completed", LONG + 1, "logged")
    assert log.read_text() == written  # every call after the fork step was answered from the record
    calls = await ledger(engine, rerun)
    assert len(calls) == LONG - fork_step and {(c["outcome"], c["duration_ms"]) for c in calls} == {("ok", 0)}
    found = await wp.compare(original, rerun)
    assert found.first_divergence is None and len(found.steps) == LONG + 1 and found.not_recorded_b == 0


def system_prompt(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")


async def run_started(engine, run_id: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        query = select(events.c.payload).where(events.c.run_id == run_id, events.c.kind == "run_started")
        return dict((await conn.execute(query)).scalar_one())


@pytest.mark.timeout(240)
async def test_rerun_with_other_instructions(client, engine, settings, worker, fake_openai, tmp_path):
    fake_openai.responder = by_model
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("Write two lines", agent="writer")
    assert (await wp.result(original)).status == "completed"
    assert [system_prompt(s.body) for s in fake_openai.seen] == ["Write lines."] * 3
    seen = len(fake_openai.seen)

    rerun = await wp.rerun(original, instructions="Write lines in capitals.")
    assert (await wp.result(rerun)).status == "completed"
    first = fake_openai.seen[seen].body  # the rerun's first request
    assert system_prompt(first) == "Write lines in capitals."
    assert [m["content"] for m in first["messages"] if m["role"] == "user"] == ["Write two lines"]
    assert all(system_prompt(s.body) == "Write lines in capitals." for s in fake_openai.seen[seen:])
    assert (await run_started(engine, rerun))["instructions"] == "Write lines in capitals."
    # the original is unchanged: its start event, and what a step of it received
    assert (await run_started(engine, original))["instructions"] == "Write lines."
    found = await wp.compare(original, rerun)
    assert found.instructions_diff == ["@@ -1 +1 @@", "-Write lines.", "+Write lines in capitals."]
    assert not found.diverged  # same calls (answered from the record), same answer

    # over the CLI (in-process: the file is what is new here), from step 1: the window keeps step 1
    # (from the original) under the new head
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Write lines slowly.\n")
    seen = len(fake_openai.seen)
    done = await waypoint_here(
        settings, "rerun", original, "--from-step", "1", "--instructions", str(prompt), "--follow", "--json"
    )
    assert done.code == 0, done.err
    first = fake_openai.seen[seen].body
    assert system_prompt(first) == "Write lines slowly.\n"
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant", "tool"]
    assert "--instructions" in one_line_error(
        await waypoint_here(settings, "rerun", original, "--instructions", str(tmp_path / "missing.txt"))
    )
    (tmp_path / "empty.txt").write_text("  \n")
    assert "empty" in one_line_error(
        await waypoint_here(settings, "rerun", original, "--instructions", str(tmp_path / "empty.txt"))
    )


@pytest.mark.timeout(240)
async def test_read_only_tools_run_live_in_a_rerun(client, engine, settings, worker, fake_openai):
    fake_openai.responder = by_model
    PEEKS.clear()
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("Write two lines", agent="writer")
    assert (await wp.result(original)).status == "completed"
    effects = Path(settings.resolved_workspace) / "effects.txt"
    written = effects.read_text()

    rerun = await wp.rerun(original, model="openai:model-c")
    assert (await wp.result(rerun)).status == "completed"
    assert PEEKS == ["y"] and effects.read_text() == written  # the read-only tool ran; the writer did not
    calls = await ledger(engine, rerun)
    assert [(c["tool"], c["outcome"]) for c in calls] == [
        ("append_line", "ok"),
        ("peek", "ok"),
        ("append_line", "not_recorded"),
    ]
    assert calls[1]["output"] == "peeked y"
    assert (await wp.compare(original, rerun)).not_recorded_b == 1


async def pending(wp: Waypoint, run_id: str) -> list[Any]:
    return list((await wp.progress(run_id)).pending_approvals)


@pytest.mark.timeout(240)
async def test_recorded_gated_calls_need_no_approval(client, engine, settings, worker, fake_openai):
    fake_openai.responder = by_model
    wp = Waypoint(client, engine, settings)
    original = await wp.start_run("Remove a", agent="writer", model="openai:gate-a")
    await eventually(lambda: pending(wp, original), what="the approval request")
    await wp.approve(original)
    assert (await wp.result(original)).output == "removed a"
    removed = Path(settings.resolved_workspace) / "removed.txt"
    assert removed.read_text() == "a\n"
    before = removed.stat().st_mtime_ns

    # the same calls: answered from the record, no approval sent, nothing removed again
    rerun = await wp.rerun(original)
    result = await wp.result(rerun)
    assert (result.status, result.output) == ("completed", "removed a")
    assert removed.read_text() == "a\n" and removed.stat().st_mtime_ns == before
    assert [(c["tool"], c["outcome"], c["duration_ms"]) for c in await ledger(engine, rerun)] == [("remove", "ok", 0)]
    assert not [e for e in await wp.events(rerun) if e.kind == "decision"]

    # a gated call that matches no recorded call still waits for a human
    other = await wp.rerun(original, model="openai:gate-b")
    (waiting,) = await eventually(lambda: pending(wp, other), what="the approval request")
    assert (waiting.tool, waiting.step, json.loads(waiting.arguments)) == ("remove", 2, {"name": "b"})
    await wp.approve(other)
    assert (await wp.result(other)).output == "removed a, not b"
    assert removed.read_text() == "a\n"  # approved, but not recorded and not replay-safe: it did not run
    assert [c["outcome"] for c in await ledger(engine, other)] == ["ok", "not_recorded"]


@pytest.mark.timeout(240)
async def test_mcp_read_only_tools_run_live_in_a_rerun(client, engine, settings, fake_openai, tmp_path):
    """readOnlyHint=true in the server's annotations (multiply) makes an MCP tool replay-safe;
    `record` has no such hint and gets the "not recorded" error."""
    folder = tmp_path / "mcp"
    scripts = {
        "mcp-a": [Turn(tool_calls=[("multiply", {"a": 6, "b": 7}), ("record", {"text": "x"})]), Turn(content="ok")],
        "mcp-b": [Turn(tool_calls=[("multiply", {"a": 2, "b": 3}), ("record", {"text": "y"})]), Turn(content="ok")],
    }
    fake_openai.responder = lambda body, n: scripts[body["model"]][
        sum(m["role"] == "assistant" for m in body["messages"])
    ]
    agent = Agent(name="mcp_rerun", instructions="Use the tools.", model="openai:mcp-a", mcp=[stdio_server(folder)])
    async with build_worker(client, engine, settings, AgentRegistry([agent])):
        wp = Waypoint(client, engine, settings)
        original = await wp.start_run("multiply and record", agent="mcp_rerun")
        assert (await wp.result(original)).status == "completed"
        recorded = {t["name"]: t["read_only"] for t in (await run_started(engine, original))["mcp_tools"]}
        assert recorded["multiply"] is True and recorded["record"] is False
        effects = (folder / "effects").read_text()
        rerun = await wp.rerun(original, model="openai:mcp-b")
        assert (await wp.result(rerun)).status == "completed"
    calls = [json.loads(line) for line in (folder / "calls").read_text().splitlines()]
    # The original's two calls of one step run at once (either may log first); the rerun ran only multiply.
    ran = [(c["tool"], c["args"]) for c in calls]
    assert sorted(ran[:2]) == [("multiply", [6, 7]), ("record", ["x"])] and ran[2:] == [("multiply", [2, 3])]
    assert (folder / "effects").read_text() == effects
    rows = sorted(await ledger(engine, rerun), key=lambda c: c["call_index"])
    assert [(c["tool"], c["outcome"], c["output"][:8]) for c in rows] == [
        ("multiply", "ok", "6"),
        ("record", "not_recorded", "error: n"),
    ]
