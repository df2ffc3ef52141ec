"""`waypoint demo --chaos` as a new user runs it: model failures, a killed worker, a resume, checks that pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.ports import reserve_port
from waypoint.config import Settings


def chaos_workers(state: Path) -> list[int]:
    """Worker processes still serving this state folder."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] and proc.info["cmdline"][-2:] == ["waypoint.cli", "worker"]:
            try:
                if proc.environ().get("WAYPOINT_STATE_DIR") == str(state):
                    found.append(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return found


@pytest.mark.postgres
def test_chaos_demo_survives_model_failures_and_a_killed_worker(tmp_path: Path):
    env = Settings(temporal_address=f"localhost:{reserve_port()}").child_environment(COLUMNS="200")
    done = subprocess.run(
        [sys.executable, "-m", "waypoint", "--state-dir", str(tmp_path), "demo", "--chaos"],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "model answered 503, retried after 0.1 s" in out
    assert "model answered 429, retried after 1 s" in out
    assert "worker killed during archive_report" in out
    assert "resumed on a new worker" in out and "archive_report attempt 2" in out
    checks = [line.strip() for line in out.splitlines() if line.strip().startswith(("PASS", "FAIL"))]
    assert len(checks) == 6 and all(line.startswith("PASS") for line in checks), checks
    assert "effect applied exactly once" in out
    archive = (tmp_path / "workspace" / "archive" / "log.txt").read_text().splitlines()
    assert len(archive) == 1 and archive[0].split()[1] == "report.md"
    assert chaos_workers(tmp_path.resolve()) == []  # the replacement worker was stopped too
