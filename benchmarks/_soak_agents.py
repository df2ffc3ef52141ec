"""The agent soak.py runs: the fake OpenAI server (soak.py's responder) asks for `record_effect` once
per step, N times, then answers; the tool's effect lands in a folder outside Waypoint, so soak.py can
count every effect and every execution.

Imported by the worker processes (`WAYPOINT_AGENTS=_soak_agents`, with this folder on PYTHONPATH).
The model is the `openai:` spec: soak.py points the workers' OPENAI_BASE_URL at its fake server.
"""

from __future__ import annotations

import hashlib
import os
import time

from waypoint.agents import Agent
from waypoint.tools import ToolContext, tool

AGENT = "soak"
MODEL = "openai:soak-model"
EFFECTS_DIR = "effects"  # one file per applied effect, named by the call's idempotency key, holding n
EXECUTIONS_FILE = "executions.log"  # one line per execution of the tool: "<idempotency key> <attempt> <pid>"


def _pause(key: str) -> float:
    # 50-250 ms, the same on every attempt of the same call: long enough for a SIGKILL to land
    # inside a call now and then, short enough for thousands of steps.
    return 0.05 + 0.2 * int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def _append(path: os.PathLike[str] | str, line: str) -> None:
    # One write() of a short line to an O_APPEND file: a SIGKILL leaves it whole or absent.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@tool(name="record_effect")
def record_effect(ctx: ToolContext, n: int) -> str:
    """Record effect number n of this run in the external effects folder, once per call."""
    key = ctx.idempotency_key
    (ctx.workspace / EFFECTS_DIR).mkdir(parents=True, exist_ok=True)
    _append(ctx.workspace / EXECUTIONS_FILE, f"{key} {ctx.attempt} {os.getpid()}\n")
    pause = _pause(key)
    time.sleep(pause / 2)
    # An external service that honours the idempotency key (as a payment API does): a call the
    # worker died in after the effect, before the ledger row, must not apply it a second time.
    # The effect is a file named by the key, created only if absent (atomic, across processes).
    try:
        fd = os.open(ctx.workspace / EFFECTS_DIR / key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        done = True
    else:
        done = False
        try:
            os.write(fd, f"{n}\n".encode())
        finally:
            os.close(fd)
    time.sleep(pause / 2)
    return f"effect {n} {'was already recorded' if done else 'recorded'}"


soak_agent = Agent(
    name=AGENT,
    instructions="Call record_effect with n = 1, 2, ... one call per step, as many as the task says; then answer.",
    model=MODEL,
    tools=(record_effect,),
    max_steps=1_000,
)
