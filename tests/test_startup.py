"""Starting and stopping as a user types it: a port that cannot be used is one `error:` line naming
the setting; `waypoint dev` stops within its grace period, whatever its runs are doing."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import one_line_error, waypoint_in_process
from tests.ports import reserve_port
from tests.processes import cli, env_for, stack_pids, start_dev, stop_dev
from waypoint.app.devstack import api_socket


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def waypoint(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "waypoint", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--port", "99999"), "port 99999 is out of range: use a port from 1 to 65535 (pass --port or set"),
        (("--port", "0"), "port 0 is out of range"),
        (("--port", "-1"), "port -1 is out of range"),
        (("--host", "nowhere.invalid", "--port", "1"), "cannot listen on 'nowhere.invalid'"),
    ],
    ids=["too-high", "zero", "negative", "unknown-host"],
)
def test_serve_on_an_impossible_address_is_one_line(tmp_path: Path, args: tuple[str, ...], message: str):
    # In-process, through the CLI's own parsing and error handling: what is checked here is which
    # address is refused and how the line reads. That a refusal is one line and exit 1 as a user
    # types it, with no traceback, is shown by the real `waypoint serve` of the next test.
    line = one_line_error(waypoint_in_process({"WAYPOINT_STATE_DIR": str(tmp_path)}, "serve", *args))
    assert message in line


def test_serve_on_a_taken_port_names_the_setting(tmp_path: Path, taken_port: int):
    """The one `waypoint serve` that is refused as a user types it (its other refusals: above, in-process)."""
    line = one_error_line(waypoint("--state-dir", str(tmp_path), "serve", "--port", str(taken_port)))
    assert f"port {taken_port} is in use on 127.0.0.1: pass --port or set WAYPOINT_API_PORT" in line


def test_dev_on_a_taken_api_port_says_which_setting_else_takes_a_free_one(tmp_path: Path, taken_port: int):
    env = env_for(tmp_path / "state", reserve_port(), reserve_port(), taken_port)
    line = one_error_line(waypoint("dev", env=env))  # set, and taken: before anything starts
    assert f"port {taken_port} is in use on 127.0.0.1: set WAYPOINT_API_PORT to a free port" in line
    assert not (tmp_path / "state" / "stack.json").exists()
    # Unset (the default port), a second stack takes a free port instead.
    with api_socket(taken_port, explicit=False) as sock:
        assert sock.getsockname()[1] != taken_port


def test_sigterm_stops_dev_within_its_grace_period_whatever_its_runs_do(
    tmp_path: Path, dev_processes: list[subprocess.Popen[str]]
):
    state = tmp_path / "state"
    env = env_for(state, reserve_port(), reserve_port()) | {
        "WAYPOINT_AGENTS": "tests.agents",
        "WAYPOINT_WORKER_STOP_GRACE_SECONDS": "1",
    }
    proc = start_dev(env, state)
    dev_processes.append(proc)
    pids = stack_pids(proc, state)
    with ThreadPoolExecutor(1) as pool:
        # A tool failing with a bug on each of its 4 attempts: one traceback, then a line per attempt.
        # Its retries' backoff (the product's, seconds) is spent waiting: `serve` and the wedged run
        # are done meanwhile, not after it.
        followed = pool.submit(cli, env, "run", "go", "--agent", "fumbler", "--follow")
        serve_answers(env)
        assert cli(env, "run", "go", "--agent", "wedged").returncode == 0
        while not (state / "workspace" / "wedged").exists():  # its tool runs, and ignores cancellation
            assert proc.poll() is None
            time.sleep(0.2)
        done = followed.result(timeout=120)
        assert done.returncode == 0, (done.stdout, done.stderr)
    out = stop_dev(proc, pids)  # exits 0, leaving no process
    assert "did not stop within 6 s" in out and "stack stopped" in out
    assert "panicked" not in out and "local_activities" not in out, out
    assert out.count("\nRuntimeError: a bug in this tool") == 1, out
    assert out.count("(again: RuntimeError: a bug in this tool)") == 3, out


def serve_answers(env: dict[str, str]) -> None:
    """`waypoint serve` on the stack: it listens, answers, and stops on SIGTERM."""
    port = reserve_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "waypoint", "serve", "--port", str(port)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert serve.stdout is not None and f"on http://127.0.0.1:{port}" in serve.stdout.readline()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as page:
            assert page.status == 200
    finally:
        serve.terminate()
        assert serve.wait(30) == 0
