"""An API key is read from configuration by the activity that needs it, and goes nowhere else: not into
Temporal history, not into any Postgres table, not into logs or spans, not into the settings' repr."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import every_table_as_text, payloads_in
from waypoint import telemetry
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.testing.fake_openai import FakeOpenAI, Turn

pytestmark = pytest.mark.postgres


def span_file_text(settings: Settings) -> str | None:
    """Every span the worker wrote to its local span file, or None when tracing is off in this process."""
    current = telemetry.current()
    if not current.enabled:
        return None
    current.force_flush()
    path = telemetry.span_file(Path(settings.state_dir)).resolve()
    assert path.exists(), "tracing is on, yet no span was written: the search below would prove nothing"
    return path.read_text()


def test_settings_never_show_the_key():
    key = f"sk-planted-{uuid.uuid4().hex}"
    codec = f"k1:{uuid.uuid4().hex}"
    s = Settings(openai_api_key=key, codec_keys=codec, database_url="postgresql://wp:db-password-7@db:5432/wp")
    for shown in (repr(s), str(s), s.model_dump_json(), str(s.model_dump())):
        assert key not in shown and codec not in shown
    assert s.openai_api_key is not None and s.openai_api_key.get_secret_value() == key
    # The database URL is data (model_dump keeps it usable), but its password stays out of repr/str.
    assert "db-password-7" not in repr(s) and "db-password-7" not in str(s)
    assert "postgresql://wp:***@db:5432/wp" in repr(s)


async def test_a_planted_key_is_nowhere_but_in_the_request(
    client: Client,
    engine: AsyncEngine,
    settings: Settings,
    agents: AgentRegistry,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
):
    key = f"sk-planted-{uuid.uuid4().hex}"
    settings = settings.model_copy(update={"openai_api_key": SecretStr(key), "trace_content": True})
    telemetry.setup(settings)  # spans (with prompts and completions) to the test's own span file
    fake_openai.answer(
        Turn(tool_calls=[("add", {"a": 20, "b": 22})]),
        Turn(content="It is 42."),
    )
    caplog.set_level(logging.DEBUG)
    async with build_worker(client, engine, settings, agents):
        wp = Waypoint(client, engine, settings)
        run_id = await wp.start_run("What is 20 + 22?", agent="remote")
        result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "It is 42.")

    # The key really went out, to the model endpoint and only there...
    assert len(fake_openai.seen) == 2
    assert all(seen.headers.get("authorization") == f"Bearer {key}" for seen in fake_openai.seen)
    assert all(key not in str(seen.body) for seen in fake_openai.seen)

    # ...and is nowhere in Temporal's history (inputs, results, headers, failures)...
    history = ""
    async for execution in client.list_workflows(f"WorkflowId = '{run_id}'"):
        fetched = await client.get_workflow_handle(run_id, run_id=execution.run_id).fetch_history()
        # The JSON shows payload data as base64: search the decoded bytes of every payload as well.
        data = b"\n".join(p.data for event in fetched.events for p in payloads_in(event))
        history += fetched.to_json() + data.decode(errors="replace")
    assert run_id in history and "What is 20 + 22?" in history  # it is the run's history
    assert key not in history

    # ...nor in any Postgres table (runs, events, checkpoints, the ledger and whatever comes next)...
    tables = await every_table_as_text(engine)
    assert run_id in tables and "It is 42." in tables
    assert key not in tables

    # ...nor in what the worker logged, nor in its spans.
    assert caplog.records, "nothing was logged: the log search would prove nothing"
    assert key not in caplog.text
    assert all(key not in str(record.__dict__) for record in caplog.records)
    spans = span_file_text(settings)
    if spans is not None:
        assert run_id in spans or "What is 20 + 22?" in spans or "It is 42." in spans
        assert key not in spans
