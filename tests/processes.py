"""Real processes the tests start and kill: worker processes (SIGKILLed mid-run) and `waypoint dev`
stacks (started on ports of their own, stopped with SIGTERM and checked to leave no process; the
`dev_processes` fixture in tests/conftest.py stops those a failed test left running)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.ports import reserve_port
from waypoint.config import Settings

# --- worker processes ------------------------------------------------------------------------------


def worker_env(settings: Settings) -> dict[str, str]:
    # Every worker opens the same Qdrant shard: a killed process releases its lock.
    return settings.child_environment(WAYPOINT_AGENTS="tests.agents")


async def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.05)


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


# --- `waypoint dev` --------------------------------------------------------------------------------


def env_for(state: Path, temporal_port: int, ui_port: int, api_port: int = 0) -> dict[str, str]:
    settings = Settings(
        state_dir=state,
        temporal_address=f"localhost:{temporal_port}",
        temporal_ui_port=ui_port,
        api_port=api_port or reserve_port(),
    )
    return settings.child_environment(COLUMNS="200")


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "waypoint", *args], env=env, capture_output=True, text=True, timeout=120
    )


def start_dev(env: dict[str, str], state: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "waypoint", "dev"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        # stack.json appears once both servers are up; the worker follows right after
        if (state / "stack.json").exists() and cli(env, "runs", "--json").returncode == 0:
            return proc
        time.sleep(0.2)  # a poll with a deadline: stack.json and the CLI say when it is up
    proc.kill()
    raise AssertionError("waypoint dev did not come up within 90 s")


def stack_pids(proc: subprocess.Popen[str], state: Path) -> list[int]:
    children = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    postmaster = int((state / "postgres" / "postmaster.pid").read_text().split()[0])
    return [*children, postmaster]


def stop_dev(proc: subprocess.Popen[str], pids: list[int]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in pids if psutil.pid_exists(p)] == [], "orphan processes after SIGTERM"
    return out
