"""The agent recovery.py runs: every step writes one external effect, then a final answer.

Imported by the worker processes (`WAYPOINT_AGENTS=_recovery_agents`, with this
folder on PYTHONPATH). The number of tool steps is read from the task, so the
benchmark's `--steps` reaches the worker without any extra setting.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import re
import time

from waypoint.agents import Agent
from waypoint.models.scripted import ScriptedModel, ScriptedTurn
from waypoint.tools import ToolContext, tool
from waypoint.types import Message

AGENT = "recovery-bench"
EFFECTS_FILE = "effects.log"  # one line per effect: the call's idempotency key
MAX_STEPS = 10_000  # the longest script a run can ask for


def task_for(steps: int, run: int) -> str:
    # The run number only makes the tasks differ, so the runs' delays (below) differ too
    # and a kill finds them in different phases rather than in lockstep.
    return f"Write {steps} effects, one per step, then say you are done (run {run})."


def _task(messages: list[Message]) -> str:
    return next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")


def _steps_in(messages: list[Message]) -> int:
    found = re.search(r"Write (\d+) effects", _task(messages))
    return int(found.group(1)) if found else 0


def _spread(text: str, low: float, high: float) -> float:
    # A delay that looks random but is the same on every attempt of the same call, so a retried
    # call behaves like the original and the runs are comparable across seeds and machines.
    fraction = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return low + (high - low) * fraction


@tool(name="write_effect")
def write_effect(ctx: ToolContext, step: int) -> str:
    """Record that this step happened, once, in the workspace's effects file."""
    key = ctx.idempotency_key
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    # Half the work before the effect and half after: a kill before it must not lose the effect,
    # a kill after it (before the ledger row is written) must not repeat it.
    pause = _spread(key, 0.2, 0.5)
    time.sleep(pause / 2)
    with open(ctx.workspace / EFFECTS_FILE, "a+") as effects:
        # Every run's calls share this file: the lock makes check-then-append one step.
        fcntl.flock(effects, fcntl.LOCK_EX)
        effects.seek(0)
        done = key in effects.read().splitlines()
        if not done:
            effects.write(key + "\n")
            effects.flush()  # in the kernel before the sleep, so a SIGKILL cannot drop it
        fcntl.flock(effects, fcntl.LOCK_UN)
    time.sleep(pause / 2)
    return f"step {step}: effect {'already there' if done else 'written'}"


async def _turn(step: int, messages: list[Message]) -> ScriptedTurn:
    # About one step in four the model thinks for 0.5-0.8 s, else for 20-60 ms. An asyncio sleep,
    # not time.sleep: a turn source runs on the worker's event loop, where a blocking sleep would
    # stall every other activity's heartbeats.
    seed = f"{_task(messages)}:{step}"
    slow = _spread(seed + ":slow", 0.0, 1.0) < 0.25
    await asyncio.sleep(_spread(seed, 0.5, 0.8) if slow else _spread(seed, 0.02, 0.06))
    if step > _steps_in(messages):
        return ScriptedTurn(content="done: every effect is written")
    return ScriptedTurn(tool_calls=[("write_effect", {"step": step})])


recovery_agent = Agent(
    name=AGENT,
    instructions="Call write_effect once per step, in order, until the task's count is reached; then answer.",
    # Turn N plays at step N; the script itself decides, from the task, when to answer.
    model=ScriptedModel([functools.partial(_turn, step) for step in range(1, MAX_STEPS + 1)]),
    tools=(write_effect,),
    max_steps=MAX_STEPS,
)
