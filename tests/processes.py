"""Real processes the tests start and kill: worker processes (SIGKILLed mid-run) and `waypoint dev`
stacks (started on ports of their own, stopped with SIGTERM and checked to leave no process; the
`dev_processes` fixture in tests/conftest.py stops those a failed test left running)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tests.ports import reserve_port
from waypoint.app.devstack import DEV_READY_LINE
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


_dev_output: dict[int, tuple[list[str], threading.Thread]] = {}


def start_dev(env: dict[str, str], state: Path) -> subprocess.Popen[str]:
    """`waypoint dev`, returned once it says it is ready: the line it prints after its worker has
    registered its agents and polls, so a run typed next is known. Its output is kept for `stop_dev`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "waypoint", "dev"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if DEV_READY_LINE in line:
                ready.set()
        ready.set()  # ended: the check below says how

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _dev_output[proc.pid] = (lines, reader)
    if ready.wait(90) and proc.poll() is None and (state / "stack.json").exists():
        return proc
    proc.kill()
    raise AssertionError(f"waypoint dev did not come up within 90 s:\n{''.join(lines)}")


def stack_pids(proc: subprocess.Popen[str], state: Path) -> list[int]:
    children = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    postmaster = int((state / "postgres" / "postmaster.pid").read_text().split()[0])
    return [*children, postmaster]


def stop_dev(proc: subprocess.Popen[str], pids: list[int]) -> str:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    lines, reader = _dev_output.pop(proc.pid)
    reader.join(10)
    out = "".join(lines)
    assert proc.returncode == 0, out
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in pids if psutil.pid_exists(p)] == [], "orphan processes after SIGTERM"
    return out
