"""The README stays true: its agent example runs, and every setting and command is documented."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import typer.main

from waypoint.agents import AgentRegistry
from waypoint.app.cli import app
from waypoint.app.client import Waypoint
from waypoint.app.worker import build_worker
from waypoint.config import Settings
from waypoint.testing.fake_openai import FakeOpenAI, Turn

README = (Path(__file__).parent.parent / "README.md").read_text()


def test_every_setting_is_documented():
    for name, field in Settings.model_fields.items():
        aliases = getattr(field.validation_alias, "choices", None) or [f"WAYPOINT_{name.upper()}"]
        assert any(f"`{alias}`" in README for alias in aliases), f"{aliases[0]} is missing from the README"


def test_every_command_is_documented():
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name in commands:
        assert f"`waypoint {name}" in README, f"`waypoint {name}` is missing from the README"


def test_quick_start_is_two_commands():
    block = README.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.strip().splitlines() == ['pip install -e ".[test]" && waypoint demo', "pytest"]


@pytest.mark.postgres
async def test_the_agent_example_runs(
    tmp_path: Path, client, engine, settings: Settings, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    example = re.search(r"```python\n(from waypoint import Agent.*?)```", README, re.S).group(1)
    (tmp_path / "readme_agents.py").write_text(example)
    monkeypatch.syspath_prepend(str(tmp_path))
    agents = AgentRegistry.from_modules(["readme_agents"])
    fake_openai.answer(
        Turn(tool_calls=[("convert", {"amount": 120, "rate": 0})]),
        Turn(tool_calls=[("convert", {"amount": 120, "rate": 1.08})]),
        Turn(content="120 EUR is 129.6 USD."),
    )
    async with build_worker(client, engine, settings, agents):
        wp = Waypoint(client, engine, settings)
        result = await wp.result(await wp.start_run("Convert 120 EUR to USD at 1.08", agent="treasurer"))
    assert (result.status, result.output) == ("completed", "120 EUR is 129.6 USD.")
    tool_messages = [m["content"] for m in fake_openai.seen[2].body["messages"] if m["role"] == "tool"]
    assert tool_messages == ["error: rate must be positive", "129.6"]
    sys.modules.pop("readme_agents", None)


@pytest.mark.postgres
async def test_the_sql_examples_run(client, engine, settings: Settings, worker):
    from sqlalchemy import text

    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add", agent="calculator")
    await wp.result(run_id)
    sql = "\n".join(re.findall(r"```sql\n(.*?)```", README, re.S))
    statements = [s.strip() for s in sql.replace("run-…", run_id).split(";") if s.strip()]
    assert len(statements) >= 6
    async with engine.connect() as conn:
        for statement in statements:
            rows = (await conn.execute(text(statement))).all()
            if "WHERE run_id" in statement:
                assert rows, statement  # the run's own rows are found
