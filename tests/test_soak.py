"""`python benchmarks/soak.py --short` as CI runs it: runs under worker kills, a Postgres restart,
model 503/429 bursts and an API restart, and every check of the soak passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_short_soak_passes_every_check() -> None:
    # Run as a shell would, from the repository's root: the script finds its own modules.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "benchmarks/soak.py", "--short"],
        cwd=ROOT,
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=540,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert re.search(r"^violations: 0$", done.stdout, re.MULTILINE), out
    # Every fault happened, and the checks ran and passed (verify --all may be a SKIP before it exists).
    for fault in ("worker SIGKILL", "postgres restart", "model 503 burst", "model 429 burst", "API restart"):
        assert re.search(rf"faults: {fault}\s*│\s*[1-9]", done.stdout), (fault, out)
    for check in (
        "every run started completed",
        "0 lost steps",
        "0 duplicate tool effects",
        "stream clients got every event once",
    ):
        assert f"PASS {check}" in done.stdout, (check, out)
    assert "FAIL" not in done.stdout, out
