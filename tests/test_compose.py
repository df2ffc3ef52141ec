"""docker-compose.yml and the Dockerfile, checked without Docker (there is no engine on CI): the compose
spec's own schema, healthchecks and ordered startup, and that what the workers are told means something
to Waypoint and points at services that exist."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import opentelemetry.environment_variables as otel_api_env
import opentelemetry.sdk.environment_variables as otel_sdk_env
import pytest
from ruamel.yaml import YAML
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import cli_env
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.config import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
WAYPOINT_IMAGES = ("migrate", "worker", "api")  # the services built from the Dockerfile


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return YAML(typ="safe").load(COMPOSE.read_text())


def settings_variables() -> set[str]:
    names = set()
    for name, field in Settings.model_fields.items():
        names.add(f"WAYPOINT_{name.upper()}")
        names.update(getattr(field.validation_alias, "choices", None) or [])
    return names


def otel_variables() -> set[str]:
    return {n for module in (otel_api_env, otel_sdk_env) for n in dir(module) if n.startswith("OTEL_")}


def test_the_compose_spec_schema_accepts_it():
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_catches_a_broken_file(tmp_path: Path):
    # The check above can fail: a misspelt key is refused.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    healthcheck:\n", "    healthchek:\n", 1))
    proc = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0


def test_the_stack_has_every_part(compose: dict[str, Any]):
    services = compose["services"]
    images = {name: svc.get("image", "") for name, svc in services.items()}
    assert images["postgres"].startswith("postgres:")
    assert images["temporal"].startswith("temporalio/auto-setup:")
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgres"  # on our Postgres
    assert images["temporal-ui"].startswith("temporalio/ui:")
    assert images["qdrant"].startswith("qdrant/qdrant:")
    assert images["jaeger"].startswith("jaegertracing/")
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    for name in WAYPOINT_IMAGES:
        assert services[name]["build"] == "."
    assert services["migrate"]["command"] == ["waypoint", "migrate"]
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["api"]["command"][:2] == ["waypoint", "serve"] and "8000:8000" in services["api"]["ports"]
    volumes = {v.split(":", 1)[0] for svc in services.values() for v in svc.get("volumes", [])}
    assert {"postgres-data", "qdrant-data"} <= volumes <= set(compose["volumes"])


def test_every_service_has_a_healthcheck_and_waits_on_conditions(compose: dict[str, Any]):
    services = compose["services"]
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert check and not check.get("disable") and check.get("test"), f"{name} has no healthcheck"
        depends = svc.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on must name a condition for each service"
        for target, rule in depends.items():
            assert target in services, f"{name} depends on {target}, which is not a service"
            assert rule.get("condition") in (
                "service_healthy",
                "service_completed_successfully",
            ), f"{name} -> {target}: wait for health (or completion), not just the start"
    worker = services["worker"]["depends_on"]
    assert worker["migrate"]["condition"] == "service_completed_successfully"
    assert worker["temporal"]["condition"] == "service_healthy"


def hosts_in(value: str) -> list[str]:
    """Host names in a URL (`scheme://user:pw@host:port/...`) or a `host:port` address."""
    if "://" in value:
        host = urlsplit(value).hostname
        return [host] if host else []
    if re.fullmatch(r"[A-Za-z0-9.-]+:\d+", value):
        return [value.split(":", 1)[0]]
    return []


@pytest.mark.parametrize("service", WAYPOINT_IMAGES)
def test_what_the_workers_are_told_is_understood_and_points_at_the_stack(compose: dict[str, Any], service: str):
    services = compose["services"]
    env: dict[str, str] = services[service]["environment"]
    known_settings, known_otel = settings_variables(), otel_variables()
    assert "WAYPOINT_DATABASE_URL" in env and "WAYPOINT_TEMPORAL_ADDRESS" in env
    checked_hosts = 0
    for name, value in env.items():
        if name.startswith("WAYPOINT_"):
            assert name in known_settings, f"{service}: {name} is no Waypoint setting (see waypoint/config.py)"
        elif name.startswith("OTEL_"):
            assert name in known_otel, f"{service}: {name} is not an OpenTelemetry SDK variable"
        elif name != "OPENAI_API_KEY":
            pytest.fail(f"{service}: {name} is neither a Waypoint setting nor an OTel variable")
        for host in hosts_in(str(value)):
            assert host in services, f"{service}: {name} points at {host!r}, which is no service of this file"
            checked_hosts += 1
    assert checked_hosts >= 4  # Postgres, Temporal, Qdrant, the OTLP collector
    # The values parse as Settings (compose's `${VAR:-}` becomes an empty string).
    plain = {k: ("" if "${" in str(v) else str(v)) for k, v in env.items()}
    parsed = Settings(**{k.removeprefix("WAYPOINT_").lower(): v for k, v in plain.items() if k.startswith("WAYPOINT_")})
    assert parsed.qdrant_url == "http://qdrant:6333"


def test_the_host_check_catches_a_wrong_host():
    assert hosts_in("postgresql://u:p@localhost:5432/db") == ["localhost"]
    assert hosts_in("temporal:7233") == ["temporal"]
    assert hosts_in("5") == [] and hosts_in("http/protobuf") == []


def test_the_dockerfile_builds_a_slim_non_root_image_with_the_package():
    lines = [
        line.strip()
        for line in DOCKERFILE.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    instructions = [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]
    bases = [arg for op, arg in instructions if op == "FROM"]
    assert bases and re.match(r"python:3\.1[1-9][\w.-]*-slim", bases[-1]), bases
    assert any(op == "RUN" and re.search(r"pip install[^&]* \.(\s|$)", arg) for op, arg in instructions)
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "the image must not run as root"
    user_at = max(i for i, (op, _) in enumerate(instructions) if op == "USER")
    install_at = max(i for i, (op, arg) in enumerate(instructions) if op == "RUN" and "pip install" in arg)
    assert install_at < user_at  # installed as root, run as the user
    copied = " ".join(arg for op, arg in instructions if op == "COPY")
    for part in ("pyproject.toml", "waypoint", "workflows", "activities", "worker.py"):
        assert part in copied, f"the image misses {part}"


async def test_the_worker_healthcheck_says_whether_a_worker_polls(
    compose: dict[str, Any], settings: Settings, client: Client, engine: AsyncEngine, agents: AgentRegistry
):
    """The worker's healthcheck command, run as the container would (with the worker's settings):
    unhealthy while nothing polls the queue, healthy once a worker does."""
    command = compose["services"]["worker"]["healthcheck"]["test"]
    assert command[0] == "CMD" and command[1] == "python"

    async def check() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *command[2:], env=cli_env(settings), stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode or 0, err.decode()

    code, err = await check()
    assert code == 1 and err.strip() == f"unhealthy: no worker polls task queue {settings.task_queue}"
    async with build_worker(client, engine, settings, agents):
        assert await check() == (0, "")
