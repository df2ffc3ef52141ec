"""Agents used by the tests, defined the way a user defines theirs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from pathlib import Path

from waypoint import Agent, ScriptedModel, ScriptedTurn, ToolContext, retry, tool
from waypoint.evals.scorers import Score, scorer
from waypoint.memory_tools import MEMORY_TOOLS
from waypoint.types import Message
from waypoint.working_memory import without_recalled

EFFECTS: list[str] = []  # every call of `note` appends here, to count real side effects


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def note(ctx: ToolContext, text: str) -> str:
    """Remember a line of text."""
    EFFECTS.append(f"{ctx.idempotency_key}={text}")
    return f"noted {text!r}"


calculator = Agent(
    name="calculator",
    instructions="Add numbers with the add tool, then answer.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 3}), ("note", {"text": "adding"})]),
            lambda messages: ScriptedTurn(
                tool_calls=[("add", {"a": int(without_recalled(messages)[-2]["content"]), "b": 10})]
            ),
            lambda messages: ScriptedTurn(content=f"The answer is {without_recalled(messages)[-1]['content']}."),
        ]
    ),
    tools=(add, note),
)

looper = Agent(
    name="looper",
    instructions="Never stops on its own.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("add", {"a": i, "b": i})]) for i in range(100)]),
    tools=(add,),
    max_steps=50,
)

clumsy = Agent(
    name="clumsy",
    instructions="Makes every mistake once, then answers.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("no_such_tool", {}), ("add", {"a": "two", "b": 1})]),
            ScriptedTurn(tool_calls=[("add", {"a": 2, "b": 1})]),
            ScriptedTurn(content="done"),
        ]
    ),
    tools=(add,),
)

remote = Agent(
    name="remote",
    instructions="You add numbers.",
    model="openai:fake-model",
    tools=(add,),
)

# Fleet flow control: a remote model with no memory, so a worker needs no store of its own.
metered = Agent(
    name="metered",
    instructions="You add numbers.",
    model="openai:fake-model",
    tools=(add,),
    memory=False,
)

TEST_AGENTS = [calculator, looper, clumsy, remote, metered]


def _crash(messages: list) -> ScriptedTurn:
    raise KeyError("missing")


broken = Agent(name="broken", instructions="Its script has a bug.", model=ScriptedModel([_crash]))

TEST_AGENTS.append(broken)


class _Unplannable(Agent):
    def tool_specs(self) -> list:  # a bug in an agent's definition: every start_run fails on it
        raise RuntimeError("the tool table is corrupt")


unplannable = _Unplannable(name="unplannable", instructions="Can never start.", model=ScriptedModel([]))

TEST_AGENTS.append(unplannable)


# --- scorers (waypoint.evals): module-level, so a worker of this module registers them ------------------


@scorer
def mentions_report(output) -> bool:
    """The answer names the report it wrote."""
    return "report" in (output or "").lower()


@scorer(name="answer_length", threshold=0.5)
async def short_answer(output, steps, case) -> Score:
    """1 for an answer under 200 characters; it reads the steps and the case too."""
    assert isinstance(steps, list) and case.task
    return Score(1.0 if len(output or "") < 200 else 0.0, reason=f"{len(output or '')} characters")


@scorer
def exploding(output) -> bool:
    """A scorer with a bug: it raises on every case."""
    raise ValueError("the scorer broke on purpose")


TEST_SCORERS = [mentions_report, short_answer, exploding]


# --- durability -------------------------------------------------------------------------------------


def _marker(ctx_workspace: Path, name: str) -> None:
    ctx_workspace.mkdir(parents=True, exist_ok=True)
    (ctx_workspace / name).touch()


@tool(timeout=30)
async def slow_effect(ctx: ToolContext, text: str) -> str:
    """Append a line to effects.log, keyed by the call, then work for a while: 3 s for the first
    attempt of step 1's call (the one tests interrupt), a moment for the others."""
    log = ctx.workspace / "effects.log"
    _marker(ctx.workspace, f"tool-started-{ctx.step}-attempt-{ctx.attempt}")
    lines = log.read_text().splitlines() if log.exists() else []
    if not any(line.startswith(ctx.idempotency_key + " ") for line in lines):  # the effect, once per call
        with log.open("a") as fh:
            fh.write(f"{ctx.idempotency_key} {text}\n")
    held = ctx.workspace / f"hold-tool-{ctx.step}-attempt-{ctx.attempt}"  # a test holds the call until it is done
    if held.exists():
        while held.exists():
            await asyncio.sleep(0.05)
        return f"appended {text!r}"
    await asyncio.sleep(3 if (ctx.step, ctx.attempt) == (1, 1) else 0.1)
    return f"appended {text!r}"


def _slow_model_turn(step: int, turn: ScriptedTurn):
    async def source(messages: list) -> ScriptedTurn:
        workspace = Path(os.environ.get("WAYPOINT_WORKSPACE", "."))
        again = (workspace / f"model-started-{step}").exists()
        _marker(workspace, f"model-started-{step}")
        held = workspace / f"hold-model-{step}"  # a test that must act during the call holds it until it is done
        if held.exists():
            while held.exists():
                await asyncio.sleep(0.05)
            return turn
        await asyncio.sleep(0.1 if again else 3)  # 3 s the first time (tests interrupt it), a moment after
        return turn

    return source


crashy = Agent(
    name="crashy",
    instructions="Appends lines, slowly.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("slow_effect", {"text": "one"})]),
            ScriptedTurn(tool_calls=[("add", {"a": 1, "b": 1}), ("slow_effect", {"text": "two"})]),
            _slow_model_turn(3, ScriptedTurn(tool_calls=[("slow_effect", {"text": "three"})])),
            ScriptedTurn(content="three lines appended"),
        ]
    ),
    tools=(slow_effect, add),
)


@tool(timeout=1, max_attempts=2)
async def hang(seconds: float) -> str:
    """Wait for a long time."""
    await asyncio.sleep(seconds)
    return "woke up"


hanger = Agent(
    name="hanger",
    instructions="Calls a tool that hangs.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("hang", {"seconds": 30})]),
            lambda messages: ScriptedTurn(content=f"the tool said: {without_recalled(messages)[-1]['content']}"),
        ]
    ),
    tools=(hang,),
)

stubborn = Agent(
    name="stubborn",
    instructions="Keeps calling a tool that does not exist.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("teleport", {})]) for _ in range(10)]),
    tools=(add,),
    max_repairs=2,
)


@tool(requires_approval=True)
def delete_file(ctx: ToolContext, path: str) -> str:
    """Delete a file of the workspace (a human must approve)."""
    EFFECTS.append(f"deleted {path}")
    return f"deleted {path}"


careful = Agent(
    name="careful",
    instructions="Deletes files, with permission.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("delete_file", {"path": "a.txt"})]),
            ScriptedTurn(tool_calls=[("delete_file", {"path": "b.txt"})]),
            lambda messages: ScriptedTurn(content=f"last tool answer: {without_recalled(messages)[-1]['content']}"),
        ]
    ),
    tools=(delete_file,),
)


async def _wait_then_add(messages: list) -> ScriptedTurn:
    await asyncio.sleep(0.3)
    users = [m["content"] for m in messages if m["role"] == "user"]
    if len(users) > 1 and users[-1] == "stop now":
        return ScriptedTurn(content=f"heard: {users[-1]}")
    return ScriptedTurn(tool_calls=[("add", {"a": 1, "b": 2})])


listener = Agent(
    name="listener",
    instructions="Adds slowly until told to stop.",
    model=ScriptedModel([_wait_then_add] * 200),
    tools=(add,),
    max_steps=200,
)


@tool(local=True)
def count(a: int, b: int) -> int:
    """Add two integers, in the worker that runs the workflow."""
    return a + b


# Long enough to continue as new four times; its tool is local, so a step costs one round trip.
MARATHON_STEPS = 200
marathon = Agent(
    name="marathon",
    instructions="Runs for a very long time.",
    model=ScriptedModel(
        [
            *(ScriptedTurn(tool_calls=[("count", {"a": i, "b": 1})]) for i in range(MARATHON_STEPS - 1)),
            ScriptedTurn(content="done"),
        ]
    ),
    tools=(count,),
    max_steps=MARATHON_STEPS,
    continue_as_new_every=40,
    context_tokens=2_000,
)


@tool
def big_output(size: int) -> str:
    """Return `size` characters of text."""
    return ("0123456789abcdef" * (size // 16 + 1))[:size]


hoarder = Agent(
    name="hoarder",
    instructions="Reads huge outputs.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("big_output", {"size": 100_000})]) for _ in range(10)]),
    tools=(big_output,),
    max_steps=10,
    context_tokens=60_000,
)

# Prompt caching on the fake chat server: a small window, so old turns leave it in blocks within a
# few steps; no compaction and no memory, so only the window's rule moves the prompt's prefix.
cacher = Agent(
    name="cacher",
    instructions="Reads outputs until told to stop.",
    model="openai:gpt-4o-mini",
    tools=(big_output,),
    max_steps=40,
    context_tokens=2_000,
    compact_at=1.0,
    memory=False,
)

TEST_AGENTS += [crashy, hanger, stubborn, careful, listener, marathon, hoarder, cacher]


def _tell(messages: list) -> ScriptedTurn:
    users = [m["content"] for m in messages if m["role"] == "user"]
    return ScriptedTurn(content=f"last user message: {users[-1]}")


teller = Agent(
    name="teller",
    instructions="Adds five times, then repeats the last user message.",
    model=ScriptedModel([*(ScriptedTurn(tool_calls=[("add", {"a": i, "b": i})]) for i in range(5)), _tell]),
    tools=(add,),
)

TEST_AGENTS.append(teller)

# --- tracing (tests/test_telemetry.py) --------------------------------------------------------------

traced = Agent(
    name="traced",
    instructions="Add numbers, note the result, then answer.",
    model="openai:fake-model",
    tools=(add, note),
)

TEST_AGENTS.append(traced)

# --- episodic memory (tests/test_memory_runs.py) --------------------------------------------------------

PIN = "Deploy to the blue cluster only."


def system_text(messages: list[Message]) -> str:
    return "\n".join(m["content"] or "" for m in messages if m["role"] == "system")


def _check_memories(messages: list[Message]) -> ScriptedTurn:
    tool_outputs = [m["content"] for m in messages if m["role"] == "tool"]
    return ScriptedTurn(content=json.dumps({"pinned": PIN in system_text(messages), "found": tool_outputs[-1]}))


rememberer = Agent(
    name="rememberer",
    instructions="Keep what matters.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("memory_save", {"text": "The vault code is 4412.", "importance": 0.9})]),
            ScriptedTurn(tool_calls=[("pin_decision", {"text": PIN})]),
            ScriptedTurn(tool_calls=[("memory_search", {"query": "what is the vault code", "k": 3})]),
            _check_memories,
        ]
    ),
    tools=MEMORY_TOOLS,
)


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"The {topic} code is ZEBRA-7."


def _scout_first(messages: list[Message]) -> ScriptedTurn:
    if "ZEBRA-7" in system_text(messages):
        return ScriptedTurn(content="I remember: ZEBRA-7")
    return ScriptedTurn(tool_calls=[("lookup", {"topic": "launch"})])


scout = Agent(
    name="scout",
    instructions="Find the launch code.",
    model=ScriptedModel([_scout_first, ScriptedTurn(content="looked it up")]),
    tools=[lookup],
)


TEST_AGENTS += [rememberer, scout]

# --- memory over a tree of sub-agent runs (tests/test_memory_runs.py) ---------------------------------

SECRET_WORD = "The secret word of the lead is PELICAN-42."
RIVER_CODE = "The river code is OTTER-9."

tree_child = Agent(
    name="tree_child",
    description="Finds the river code.",
    instructions="Find the river code and save it.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("memory_save", {"text": RIVER_CODE, "importance": 0.9})]),
            lambda messages: ScriptedTurn(
                content="the lead's word is PELICAN-42" if "PELICAN-42" in system_text(messages) else "no word"
            ),
        ]
    ),
    tools=MEMORY_TOOLS,
)

tree_lead = Agent(
    name="tree_lead",
    instructions="Keep the secret word, then have tree_child find the river code.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("memory_save", {"text": SECRET_WORD, "importance": 0.9})]),
            ScriptedTurn(tool_calls=[("tree_child", {"task": "Find the river code; what is the lead's secret word?"})]),
            lambda messages: ScriptedTurn(
                content="the river code is OTTER-9" if "OTTER-9" in system_text(messages) else "no code"
            ),
        ]
    ),
    tools=MEMORY_TOOLS,
    agents=(tree_child,),
)

TEST_AGENTS += [tree_child, tree_lead]

# --- inline compaction (tests/test_compaction_inline.py) ---------------------------------------------


@tool
def read_page(n: int) -> str:
    """Read page n of the report."""
    return f"Page {n} says the reading for sensor {n} was {n * 7} units. " + "Background detail. " * 80


def _report_context(messages: list[Message]) -> ScriptedTurn:
    return ScriptedTurn(content=json.dumps([m["content"] for m in messages if m["role"] == "system"]))


compactor = Agent(
    name="compactor",
    instructions="Read the report page by page.",
    model=ScriptedModel([*(ScriptedTurn(tool_calls=[("read_page", {"n": i})]) for i in range(1, 12)), _report_context]),
    tools=(read_page,),
    context_tokens=2_500,
    compact_at=0.5,
)

TEST_AGENTS.append(compactor)

# --- empty answers (tests/test_agent_run.py, tests/test_replay.py) -------------------------------------

mute_once = Agent(
    name="mute-once",
    instructions="Says nothing, once.",
    model=ScriptedModel(
        [ScriptedTurn(), lambda messages: ScriptedTurn(content=f"ok: {without_recalled(messages)[-1]['content']}")]
    ),
)
mute = Agent(name="mute", instructions="Says nothing.", model=ScriptedModel([ScriptedTurn()] * 10), max_repairs=2)
TEST_AGENTS += [mute_once, mute]

# --- a local tool (tests/test_tools.py, tests/test_replay.py) ------------------------------------------


@tool(local=True)
def double(n: int) -> int:
    """Double a number (fast and in-process: a local activity)."""
    return 2 * n


quick = Agent(
    name="quick",
    instructions="Doubles, with a local tool.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("double", {"n": 21})]),
            lambda messages: ScriptedTurn(content=f"twice 21 is {without_recalled(messages)[-1]['content']}"),
        ]
    ),
    tools=(double,),
)
TEST_AGENTS.append(quick)

remote_scout = Agent(
    name="remote-scout",
    instructions="Find the launch code.",
    model="openai:fake-model",
    tools=[lookup],
)
TEST_AGENTS.append(remote_scout)
# --- the HTTP API's streams (tests/test_http_stream.py) -----------------------------------------

hopper = Agent(
    name="hopper",
    instructions="Adds six times, continuing as new every two steps.",
    model=ScriptedModel(
        [*(ScriptedTurn(tool_calls=[("add", {"a": i, "b": 1})]) for i in range(6)), ScriptedTurn(content="hopped")]
    ),
    tools=(add,),
    continue_as_new_every=2,
)

TEST_AGENTS.append(hopper)

# --- stopping a worker whatever its runs do (tests/test_startup.py) -------------------------------


@tool(timeout=600)
async def wedge(ctx: ToolContext) -> str:
    """Never return, not even when cancelled (a tool stuck in a call it cannot leave)."""
    _marker(ctx.workspace, "wedged")
    while True:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(600)


@tool(max_attempts=4)
def fumble() -> str:
    """Fail with a bug, every attempt."""
    raise RuntimeError("a bug in this tool")


fumbler = Agent(
    name="fumbler",
    instructions="Calls a tool with a bug.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("fumble", {})]), ScriptedTurn(content="it failed")]),
    tools=(fumble,),
)

wedged = Agent(
    name="wedged",
    instructions="Calls a tool that never returns.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("wedge", {})]), ScriptedTurn(content="unreachable")]),
    tools=(wedge,),
)

TEST_AGENTS += [fumbler, wedged]

# --- sub-agents under a crash (tests/test_crash_recovery.py) ---------------------------------------

FANOUT = 8  # fan_lead's sub-agent calls, all in its first turn
FANOUT_LOG = "fanout.log"  # one line per fan_line call: its effect, keyed by the call
FANOUT_ATTEMPTS = "fanout-attempts.log"  # one line per attempt of a fan_line call


@tool(timeout=30)
async def fan_line(ctx: ToolContext, text: str) -> str:
    """Append `text` to fanout.log, once per call, then work for a while: 6 s on a first attempt
    (the crash test kills the worker meanwhile), a moment on a retry."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / FANOUT_ATTEMPTS).open("a") as fh:
        fh.write(f"{ctx.idempotency_key} attempt {ctx.attempt}\n")
    log = ctx.workspace / FANOUT_LOG
    lines = log.read_text().splitlines() if log.exists() else []
    if not any(line.split(" ", 1)[0] == ctx.idempotency_key for line in lines):  # the effect, once per call
        with log.open("a") as fh:
            fh.write(f"{ctx.idempotency_key} {text}\n")
    await asyncio.sleep(6 if ctx.attempt == 1 else 0.1)
    return f"wrote {text!r}"


def _task(messages: list[Message]) -> str:
    return next(m["content"] or "" for m in messages if m["role"] == "user")


fan_child = Agent(
    name="fan_child",
    instructions="Write your part down, add two numbers, then answer.",
    model=ScriptedModel(
        [
            lambda messages: ScriptedTurn(tool_calls=[("fan_line", {"text": _task(messages)})]),
            ScriptedTurn(tool_calls=[("add", {"a": 20, "b": 22})]),
            lambda messages: ScriptedTurn(
                content=f"{_task(messages)} is done ({without_recalled(messages)[-1]['content']})"
            ),
        ]
    ),
    tools=(fan_line, add),
)


def _fan_answers(messages: list[Message]) -> ScriptedTurn:
    return ScriptedTurn(content=" | ".join(m["content"] or "" for m in messages if m["role"] == "tool"))


fan_lead = Agent(
    name="fan_lead",
    instructions="Hand out the parts, all at once, then report.",
    model=ScriptedModel(
        [
            ScriptedTurn(tool_calls=[("fan_child", {"task": f"part {i}"}) for i in range(FANOUT)]),
            _fan_answers,
        ]
    ),
    agents=(fan_child,),
    max_parallel_agents=FANOUT,
)

TEST_AGENTS += [fan_lead, fan_child]

# --- sub-agents in a recorded history (tests/test_replay.py) ----------------------------------------

delegator = Agent(
    name="delegator",
    instructions="Hand additions to calculators, two at a time, then report.",
    model=ScriptedModel(
        [
            ScriptedTurn(
                tool_calls=[
                    ("calculator", {"task": "add for me"}),
                    ("calculator", {"task": "add again", "why": "to be sure"}),
                    ("broken", {"task": "fail"}),  # a child run that fails: a tool error
                    ("calculator", {}),  # no task: a bad call, no child run
                ]
            ),
            lambda messages: ScriptedTurn(
                content=" | ".join(m["content"] or "" for m in messages if m["role"] == "tool")
            ),
        ]
    ),
    agents=("calculator", "broken"),
    max_parallel_agents=2,
)

TEST_AGENTS.append(delegator)


@tool(requires_approval=True)
def pay(amount: int, to: str) -> str:
    """Pay someone (a human must approve)."""
    return f"paid {amount} to {to}"


def _last_tool_answer(messages: list) -> ScriptedTurn:
    return ScriptedTurn(content=f"last tool answer: {without_recalled(messages)[-1]['content']}")


# Agent Protocol interrupts: a call that waits for approval, then an answer reading its result
payer = Agent(
    name="payer",
    instructions="Pays, with permission.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("pay", {"amount": 900, "to": "ada"})]), _last_tool_answer]),
    tools=(pay,),
    memory=False,
)

# ask_human: the model asks, the human's answer is the call's result
asker = Agent(
    name="asker",
    instructions="Asks before it answers.",
    model=ScriptedModel([ScriptedTurn(tool_calls=[("ask_human", {"question": "which colour?"})]), _last_tool_answer]),
    ask_human=True,
    memory=False,
)
TEST_AGENTS += [payer, asker]

# --- evaluations (tests/test_evals.py) ----------------------------------------------------------------

PONDER_STARTED = "ponder-started"  # a folder of markers: "<run id>-<attempt>", one per attempt of ponder


@tool(timeout=30)
async def ponder(ctx: ToolContext, topic: str) -> str:
    """Think about a topic for a while: 3 s on a first attempt (the crash test kills the worker
    meanwhile), a moment on a retry."""
    _marker(ctx.workspace / PONDER_STARTED, f"{ctx.run_id}-{ctx.attempt}")
    await asyncio.sleep(3 if ctx.attempt == 1 else 0.1)
    return f"pondered {topic}"


ponderer = Agent(
    name="ponderer",
    instructions="Ponder the task, then say what you pondered.",
    model=ScriptedModel(
        [
            lambda messages: ScriptedTurn(tool_calls=[("ponder", {"topic": _task(messages)})]),
            lambda messages: ScriptedTurn(content=without_recalled(messages)[-1]["content"]),
        ]
    ),
    tools=(ponder,),
    memory=False,
)
TEST_AGENTS.append(ponderer)


STALLED: set[str] = set()  # tasks whose first model call has held the worker's event loop


def _stall_once(messages: list) -> ScriptedTurn:
    """Hold the event loop (no await: nothing else of the worker runs, heartbeats included) for
    longer than the heartbeat timeout, the first time a task is seen; answer at once after that."""
    task = _task(messages)
    if task not in STALLED:
        STALLED.add(task)
        time.sleep(retry.HEARTBEAT_TIMEOUT.total_seconds() * 2)
    return ScriptedTurn(content=f"done: {task}")


staller = Agent(
    name="staller",
    instructions="Answers, after holding the worker once.",
    model=ScriptedModel([_stall_once]),
    memory=False,
)
TEST_AGENTS.append(staller)


COLD_EFFECTS = "cold-effects.log"  # one line per run of `stamp`: the call's idempotency key


@tool
async def stamp(ctx: ToolContext, step: int) -> str:
    """Write that this step happened: one line per run of the tool, so a call made twice shows twice."""
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    with (ctx.workspace / COLD_EFFECTS).open("a") as effects:
        effects.write(ctx.idempotency_key + "\n")
    return f"step {step} stamped"


# tests/test_cold_starts.py: each step's model call is the first request of a freshly started worker,
# through the openai SDK to the test's fake provider (which says what to call), with the defaults
# (memory on).
cold_start = Agent(
    name="cold_start",
    instructions="Stamp each step with the stamp tool until told to stop.",
    model="openai:cold-start",
    tools=(stamp,),
    max_steps=40,
)
TEST_AGENTS.append(cold_start)
