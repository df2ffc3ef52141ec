"""A worker process for one peer framework, for peers.py's kill test (which SIGKILLs it) and subagents.py:

    python benchmarks/_peers_worker.py FRAMEWORK TEMPORAL_ADDRESS TASK_QUEUE

FRAMEWORK: pydantic-ai, openai-agents, langgraph or openai-agents-subagents.

It prints `worker ready` once it polls, then serves until it is killed. Model requests go to
OPENAI_BASE_URL; the tool writes its side effects to PEERS_EFFECTS_FILE.
"""

from __future__ import annotations

import asyncio
import importlib
import sys

from _peers_common import READY_LINE

MODULES = {
    "pydantic-ai": "_peers_pydantic",
    "openai-agents": "_peers_openai",
    "langgraph": "_peers_langgraph",
    "openai-agents-subagents": "_subagents_openai",  # subagents.py
}


async def serve(framework: str, address: str, task_queue: str) -> None:
    module = importlib.import_module(MODULES[framework])
    client = await module.connect(address)
    async with module.build_worker(client, task_queue):
        print(f"{READY_LINE}: {framework} on {task_queue}", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in MODULES:
        print(f"usage: _peers_worker.py {{{'|'.join(MODULES)}}} TEMPORAL_ADDRESS TASK_QUEUE", file=sys.stderr)
        raise SystemExit(2)
    asyncio.run(serve(*sys.argv[1:4]))


if __name__ == "__main__":
    main()
