"""What every framework in peers.py shares: the task, the trivial tool's behaviour, and the fake model.

The model is `waypoint.testing.fake_openai` over real HTTP, answering every framework
the same way: it calls `tick` once per step, then answers. It keeps no state per run:
what to do next is read from the request itself, so it works whatever part of the
conversation a framework sends (Waypoint sends a token-budgeted window, the peers the
whole transcript):

- the task (the first user message) says how many ticks, how big each tool output is,
  how long the tool holds after its side effect, and a tag naming the run;
- each tool output starts with `tick N of M ...`, so the newest tool message says how
  far the run got.

Only the responder keeps a record, per tag: when each model request arrived (the
framework-neutral step clock peers.py measures with).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODEL_NAME = "fake-instant"
TOOL_NAME = "tick"
TOOL_DOC = "Advance the count by one and return the tick."
INSTRUCTIONS = "Call the tick tool as many times as the task says, one call per step, then answer 'done'."
# A tool that holds after its side effect writes the effect here (set in the worker's environment).
EFFECTS_ENV = "PEERS_EFFECTS_FILE"
READY_LINE = "worker ready"  # what a worker entry script prints once it polls

_TASK = re.compile(r"Call tick (\d+) times; outputs of (\d+) bytes; hold ([\d.]+) s; tag ([\w-]+)\.")
_TICK = re.compile(r"tick (\d+) of (\d+); pad (\d+); hold ([\d.]+); tag ([\w-]+)")


def task(ticks: int, pad: int, tag: str, hold: float = 0.0) -> str:
    return f"Call tick {ticks} times; outputs of {pad} bytes; hold {hold:g} s; tag {tag}."


def tick_output(n: int, of: int, pad: int, hold: float, tag: str) -> str:
    """What the tool returns: its own arguments (so the next model request knows where the run is),
    padded to `pad` bytes."""
    head = f"tick {n} of {of}; pad {pad}; hold {hold:g}; tag {tag}"
    return head + "\n" + "x" * max(0, pad - len(head) - 1)


def log_call(tag: str, n: int, what: str, key: str = "-") -> None:
    path = os.environ.get(EFFECTS_ENV)
    if path:
        # One write of a short line in append mode: atomic, and in the kernel before the tool goes on,
        # so a SIGKILL right after it cannot drop it.
        with open(path, "a") as fh:
            fh.write(f"{tag} {n} {what} {time.time():.3f} {key}\n")


def effect_applied(key: str) -> bool:
    """Whether an effect keyed `key` is in the effects file already."""
    path = os.environ.get(EFFECTS_ENV)
    if not path or not os.path.exists(path):
        return False
    with open(path) as fh:
        return any(line.split()[2:3] == ["effect"] and line.split()[4:5] == [key] for line in fh)


def effect_then_hold(n: int, hold: float, tag: str, *, key: str | None = None) -> None:
    """The side effect of a tick that holds: log the call, append the effect, then sleep `hold`.
    `key`: the framework's idempotency key for this call (Waypoint's `ctx.idempotency_key`): the
    effect is skipped when that key has one already. Without a key it is applied on every attempt."""
    if hold <= 0:
        return
    log_call(tag, n, "call")
    if key is None or not effect_applied(key):
        log_call(tag, n, "effect", key or "-")


async def async_effect_then_hold(n: int, hold: float, tag: str, **kwargs: Any) -> None:
    effect_then_hold(n, hold, tag, **kwargs)
    if hold > 0:
        await asyncio.sleep(hold)


@dataclass
class Ledger:
    """What the fake model saw, per tag: arrival times of the model requests (time.monotonic())."""

    requests: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # per tag, the step each request was for: a step asked twice is a model call the framework retried
    steps: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, tag: str, step: int) -> None:
        with self.lock:
            self.requests[tag].append(time.monotonic())
            self.steps[tag].append(step)

    def repeated(self, tag: str) -> int:
        """Model requests for a step that had been asked for already (a retried model call)."""
        with self.lock:
            seen = self.steps.get(tag, [])
            return len(seen) - len(set(seen))

    def times(self, tag: str) -> list[float]:
        with self.lock:
            return list(self.requests.get(tag, ()))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def next_call(body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """(tag, the tick to call next, or None to answer) for a chat-completions request."""
    messages = body.get("messages") or []
    last_tool = next((m for m in reversed(messages) if m.get("role") == "tool"), None)
    if last_tool is not None and (done := _TICK.match(_text(last_tool.get("content")))):
        n, of, pad, hold, tag = done.groups()
        if int(n) >= int(of):
            return tag, None
        return tag, {"n": int(n) + 1, "of": int(of), "pad": int(pad), "hold": float(hold), "tag": tag}
    first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), "")
    found = _TASK.search(first_user)
    if found is None:
        return "", None
    ticks, pad, hold, tag = found.groups()
    if int(ticks) < 1:
        return tag, None
    return tag, {"n": 1, "of": int(ticks), "pad": int(pad), "hold": float(hold), "tag": tag}


def responder(ledger: Ledger, delay: float = 0.0) -> Callable[[dict[str, Any], int], Any]:
    """The fake model's answer to any framework. Usage reports the request's size in tokens (about
    4 bytes a token), as a real provider would, so token-driven behaviour (Waypoint's inline
    compaction) sees what it would see in production."""
    from waypoint.testing.fake_openai import Reply, Turn, completion

    def answer(body: dict[str, Any], index: int) -> Any:
        prompt_tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
        if body.get("response_format"):  # a structured request: Waypoint's compaction summary
            summary = {"summary": "The run called tick once per step.", "decisions": [], "open_threads": []}
            turn = Turn(content=json.dumps({**summary, "key_facts": []}), prompt_tokens=prompt_tokens)
        else:
            tag, call = next_call(body)
            if tag:
                ledger.record(tag, call["n"] if call else 0)
            tool_calls = [(TOOL_NAME, call)] if call is not None else []
            turn = Turn(content=None if call else "done", tool_calls=tool_calls, prompt_tokens=prompt_tokens)
        if not delay:
            return turn
        return Reply(200, completion(turn, body.get("model", MODEL_NAME), index), delay=delay)

    return answer


def read_calls(path: Path, tag: str, n: int) -> tuple[list[float], int]:
    """(times the tool's call `n` of run `tag` started, how many times its effect was applied)."""
    calls: list[float] = []
    effects = 0
    if not path.exists():
        return calls, effects
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == tag and parts[1] == str(n):
            if parts[2] == "call":
                calls.append(float(parts[3]))
            elif parts[2] == "effect":
                effects += 1
    return calls, effects


def spawn(cmd: list[str], env: dict[str, str], timeout: float = 120.0) -> subprocess.Popen[str]:
    """A worker process: started with `cmd` and `env`, returned once it prints the ready line."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline, lines = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(READY_LINE):
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # never block on a full pipe
            return proc
    proc.kill()
    raise RuntimeError(f"worker did not start: {''.join(lines[-5:]).strip() or 'no output'}")
