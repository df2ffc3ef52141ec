"""Every table command at 80 columns with long real ids: ids, agents, statuses, keys, headers and
numbers stay whole (a table that cannot fit whole is printed one record per block), no line is wider
than the terminal, and nothing is cut with an ellipsis."""

from __future__ import annotations

import asyncio
import io
import re

import pytest
from rich import box
from rich.table import Table

from tests.helpers import cli_env, waypoint
from waypoint.app import console as out
from waypoint.client import Waypoint
from waypoint.config import Settings

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]

# As long as the ids Waypoint makes get: a run a cron fired on a thread, a model key with a dated name.
LONG_RUN = "sched-27b08f8b65fa-2026-12-04T03:00:00Z-0123456789"
LONG_KEY = "openai:gpt-4o-mini-2024-07-18-long-deployment-name"


def whole(output: str, *texts: str) -> None:
    lines = output.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in output, output
    for text in texts:
        assert any(text in line for line in lines), (text, output)


def test_a_table_too_wide_for_the_terminal_is_printed_as_records() -> None:
    table = Table(title="Compare", box=box.SIMPLE_HEAD)
    for name in ("scorer", "mean A", "mean B", "difference", "95% interval", "wins", "losses", "p value"):
        table.add_column(name, no_wrap=True, justify="right")
    table.add_row("trajectory_in_order", "0.8125", "0.9375", "+0.1250", "[+0.0000, +0.2500]", "2", "0", "0.5")
    buffer = io.StringIO()
    out.FittingConsole(file=buffer, width=80).print(table)
    whole(buffer.getvalue(), "trajectory_in_order", "[+0.0000, +0.2500]")
    assert re.search(r"p value +0\.5", buffer.getvalue()) and re.search(r"difference +\+0\.1250", buffer.getvalue())
    buffer = io.StringIO()
    out.FittingConsole(file=buffer, width=200).print(table)  # a wide terminal keeps the table
    assert "scorer" in buffer.getvalue().splitlines()[2] and "p value" in buffer.getvalue().splitlines()[2]


async def test_every_table_command_fits_80_columns(client, engine, settings: Settings, worker, tmp_path) -> None:
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add 2 and 3", agent="calculator", run_id=LONG_RUN + settings.tenant[-8:])
    await wp.result(run_id)
    limits = tmp_path / "limits.toml"
    limits.write_text(f'[models."{LONG_KEY}"]\nin_flight = 2\nrequests_per_minute = 600\ntokens_per_minute = 90000\n')
    sid = (await wp.schedules.create(agent="calculator", task="add 1 and 2", every=3600, paused=True)).schedule_id
    env = cli_env(settings) | {"COLUMNS": "80", "WAYPOINT_LIMITS_FILE": str(limits)}
    commands = {
        "runs": ("runs",),
        "tree": ("tree", run_id),
        "limits": ("limits",),
        "cron": ("cron", "list"),
        "fleet": ("fleet",),
        "history": ("history", run_id),
        "keys": ("keys", "list"),
    }
    done = await asyncio.gather(*(waypoint(settings, *args, env=env) for args in commands.values()))
    shown = dict(zip(commands, done, strict=True))
    for name, result in shown.items():
        assert result.code == 0, (name, result.err)
    whole(shown["runs"].out, run_id, "calculator", "completed")
    whole(shown["tree"].out, run_id, "calculator", "completed", "tokens")
    whole(shown["limits"].out, LONG_KEY, "requests/min", "tokens/min")
    whole(shown["cron"].out, sid, "calculator", "every 1h")
    whole(shown["fleet"].out, "calculator")
    whole(shown["history"].out, run_id)
    whole(shown["keys"].out)
