"""What subagents.py's frameworks share: the agents' names, the lead's task, and the fake model's answers.

The model is `waypoint.testing.fake_openai` over real HTTP, as in peers.py, and keeps no state per
run either: what to answer is read from the request.

- A lead's task (its first user message, `lead_task`) names the tool to call, how many calls to
  make at once, and what each call asks for. Its first request gets all of those calls in one
  answer (one step); once the conversation holds tool results, it answers 'done'.
- A sub-agent's task is peers.py's task (`_peers_common.task`: call `tick` N times, then answer),
  so a sub-agent's run is a peers.py run: N tick steps and the answer step. Each gets its own tag
  (`<lead tag>-c<index>`), so the ledger times every run of the tree apart.

The sub-agent tool's argument is read from the tool's schema in the request: Waypoint's
sub-agents take `task`, an OpenAI Agents `as_tool` takes `input`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import _peers_common as common

WORKER = "fanout_worker"  # the sub-agent, and the tool the lead calls to start one
WORKER_DOC = "Does one part of the work: calls tick as many times as its task says, then answers."
LEAD_INSTRUCTIONS = f"Hand the work to {WORKER} runs, all at once, as the task says; then answer 'done'."
_LEAD = re.compile(r"Call (\w+) (\d+) times at once, each for (\d+) ticks holding ([\d.]+) s; tag ([\w-]+)\.")


def lead_task(tool: str, calls: int, ticks: int, tag: str, hold: float = 0.0) -> str:
    """A lead's task: `calls` calls of `tool` in one step; a sub-agent call asks for `ticks` ticks,
    each holding `hold` s (a `tick` call is one tick)."""
    return f"Call {tool} {calls} times at once, each for {ticks} ticks holding {hold:g} s; tag {tag}."


def child_tag(tag: str, index: int) -> str:
    return f"{tag}-c{index}"


def _argument(body: dict[str, Any], tool: str) -> str:
    """The argument the framework's sub-agent tool takes its task in."""
    for spec in body.get("tools") or []:
        function = spec.get("function") or spec
        if function.get("name") == tool:
            schema = function.get("parameters") or {}
            required = schema.get("required") or list(schema.get("properties") or {})
            if required:
                return str(required[0])
    raise ValueError(f"the request offers no tool {tool!r} with an argument")


def responder(ledger: common.Ledger) -> Callable[[dict[str, Any], int], Any]:
    """peers.py's fake model, plus the lead's fan-out."""
    from waypoint.testing.fake_openai import Turn

    runs = common.responder(ledger)

    def answer(body: dict[str, Any], index: int) -> Any:
        messages = body.get("messages") or []
        first_user = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        found = _LEAD.search(first_user if isinstance(first_user, str) else json.dumps(first_user))
        if found is None:
            return runs(body, index)
        tool, calls, ticks, hold, tag = found.groups()
        prompt_tokens = max(1, len(json.dumps(messages)) // 4)
        if any(m.get("role") == "tool" for m in messages):
            ledger.record(tag, 2)
            return Turn(content="done", prompt_tokens=prompt_tokens)
        ledger.record(tag, 1)
        if tool == common.TOOL_NAME:
            args = [{"n": 1, "of": 1, "pad": 0, "hold": float(hold), "tag": f"{tag}-t{i}"} for i in range(int(calls))]
        else:
            name = _argument(body, tool)
            args = [{name: common.task(int(ticks), 0, child_tag(tag, i), float(hold))} for i in range(int(calls))]
        return Turn(tool_calls=[(tool, a) for a in args], prompt_tokens=prompt_tokens)

    return answer
