"""Configuration: one typed class, secrets masked."""

from __future__ import annotations

import pytest

from waypoint.config import Settings
from waypoint.errors import ConfigError
from waypoint.store.db import async_url


def test_environment_is_read_and_the_api_key_is_masked(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WAYPOINT_TASK_QUEUE", "agents")
    monkeypatch.setenv("WAYPOINT_AGENTS", "myapp.agents, other.agents")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    s = Settings()
    assert s.task_queue == "agents"
    assert s.agent_modules == ["myapp.agents", "other.agents"]
    assert s.openai_api_key is not None and s.openai_api_key.get_secret_value() == "sk-very-secret"
    assert "sk-very-secret" not in repr(s) and "sk-very-secret" not in str(s.model_dump())


def test_database_urls_get_the_asyncpg_driver():
    assert async_url("postgresql://u:p@h:5432/db").drivername == "postgresql+asyncpg"
    assert async_url("postgresql://postgres:@/waypoint?host=/tmp/pg").query["host"] == "/tmp/pg"
    with pytest.raises(ConfigError, match="needs PostgreSQL"):
        async_url("mysql://u@h/db")
    with pytest.raises(ConfigError, match="not a database URL"):
        async_url("::nonsense::")


def test_child_environment_reproduces_the_settings(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WAYPOINT_TENANT", "from-the-shell")  # the caller's own: must not win
    monkeypatch.setenv("OPENAI_ORG_ID", "org-from-the-shell")  # nor leak into the child
    original = Settings(
        task_queue="q1",
        tenant="acme",
        database_url="postgresql://u@h/db",
        openai_api_key="sk-child",
        prices={"m": (1.0, 2.0)},
    )
    env = original.child_environment(EXTRA="1")
    assert env["EXTRA"] == "1" and env["WAYPOINT_TENANT"] == "acme" and "OPENAI_ORG_ID" not in env
    monkeypatch.setattr("os.environ", env)
    assert Settings() == original
