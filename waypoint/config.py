"""Waypoint's configuration: one typed class, read once from `WAYPOINT_*` variables.

Workflows and activities never read the environment themselves; the worker and
the CLI build a `Settings` and hand the pieces down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every setting, with its `WAYPOINT_` variable name in the README."""

    model_config = SettingsConfigDict(env_prefix="WAYPOINT_", extra="ignore")

    state_dir: Path = Field(
        Path(".waypoint"),
        description="Folder of the embedded stack: Temporal's SQLite file, Postgres data, Qdrant shard, logs.",
    )
    temporal_address: str = Field(
        "localhost:7233",
        description="Temporal frontend host:port. The embedded dev server listens on this port.",
    )
    temporal_namespace: str = Field("default", description="Temporal namespace.")
    temporal_ui_port: int = Field(8233, description="Port of the embedded Temporal Web UI.")
    task_queue: str = Field("waypoint", description="Task queue the workers poll and runs are started on.")
    database_url: str | None = Field(
        None,
        description="Postgres URL (postgresql://user:pass@host/db). Unset: the embedded Postgres in the state folder.",
    )
    qdrant_url: str | None = Field(
        None, description="Qdrant server URL. Unset: the embedded engine (qdrant-edge) in `qdrant_path`."
    )
    qdrant_path: Path | None = Field(
        None, description="Folder of the embedded Qdrant shard. Default: <state_dir>/qdrant."
    )
    agents: str = Field(
        "",
        description="Comma-separated module paths the worker imports agent definitions from "
        "(the built-in demo agent is always loaded).",
    )
    tenant: str = Field("default", description="Tenant id used by the CLI for new runs and listings.")
    workspace: Path | None = Field(
        None, description="Folder the file tools may read and write. Default: <state_dir>/workspace."
    )
    model: str | None = Field(
        None, description="Model spec overriding every agent's own, e.g. `openai:gpt-4o-mini` or `scripted`."
    )
    model_timeout_seconds: float = Field(120.0, description="Timeout of one model call.")
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description='Model prices in USD per million input/output tokens, JSON: {"my-model": [0.5, 1.5]}.',
    )
    openai_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("WAYPOINT_OPENAI_API_KEY", "OPENAI_API_KEY"),
        description="API key for `openai:` models; read by the worker only.",
    )
    openai_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("WAYPOINT_OPENAI_BASE_URL", "OPENAI_BASE_URL"),
        description="Base URL of an OpenAI-compatible endpoint. Unset: the SDK's default.",
    )

    def child_environment(self, **extra: str) -> dict[str, str]:
        """The environment of a Waypoint subprocess (a worker, the CLI) that sees exactly these
        settings: this process's environment minus every WAYPOINT_/OPENAI_ variable, then each
        setting that has a value, then `extra`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, dict):
                value = json.dumps(value)
            env[f"WAYPOINT_{name.upper()}"] = str(value)
        return env | extra

    @property
    def resolved_qdrant_path(self) -> Path:
        return (self.qdrant_path or self.state_dir / "qdrant").resolve()

    @property
    def resolved_workspace(self) -> Path:
        return (self.workspace or self.state_dir / "workspace").resolve()

    @property
    def agent_modules(self) -> list[str]:
        return [m.strip() for m in self.agents.split(",") if m.strip()]

    @property
    def temporal_port(self) -> int:
        _, _, port = self.temporal_address.rpartition(":")
        return int(port)
