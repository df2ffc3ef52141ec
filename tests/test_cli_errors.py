"""Every way a user gets the CLI wrong, or finds a service away, ends in one `error:` line that names
the fix, exit code 1, and no traceback.

Each kind of mistake is shown once by a spawned `waypoint` (the process's exit code and stderr);
its variants run `run_command`, the function that process runs, in this process (`waypoint_here`):
the validation is the point there, and a spawn costs seconds of interpreter start and imports."""

from __future__ import annotations

import asyncio
import base64
import os

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from tests.helpers import cli_env, eventually, one_line_error, waypoint, waypoint_here
from waypoint.agents import AgentRegistry
from waypoint.app.worker import build_worker
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import NotFound
from waypoint.gateway.temporal import connect
from waypoint.names import RunStatus

pytestmark = pytest.mark.postgres


UNREACHABLE = [
    ("postgresql://waypoint@127.0.0.1:1/waypoint", "Connect call failed"),
    ("postgresql://waypoint@/waypoint?host=/no/such/socket/dir", "No such file or directory"),
]


async def test_an_unreachable_postgres_is_one_line(settings: Settings):
    """Refused and no socket, for commands that read, list and verify: one spawned process for the
    first; the rest in process (the same connection attempt, the same translation)."""
    refused = cli_env(settings) | {"WAYPOINT_DATABASE_URL": UNREACHABLE[0][0]}
    line = one_line_error(await waypoint(settings, "runs", env=refused))
    assert "cannot reach Postgres" in line and "Connect call failed" in line and "WAYPOINT_DATABASE_URL" in line
    for url, why in UNREACHABLE:
        for args in [("runs",), ("status", "run-x"), ("events", "run-x"), ("verify", "run-x")]:
            env = cli_env(settings) | {"WAYPOINT_DATABASE_URL": url}
            line = one_line_error(await waypoint_here(settings, *args, env=env))
            assert "cannot reach Postgres" in line and why in line and "WAYPOINT_DATABASE_URL" in line, (url, args)


async def test_values_that_cannot_work_say_so(settings: Settings, worker, client: Client, engine):
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add", agent="calculator")
    await wp.result(run_id)
    cases = {
        ("runs", "--limit", "-5"): "the limit must be a whole number from 1",
        ("history", run_id, "--limit", "0"): "the limit must be a whole number from 1",
        ("export", run_id, "--output", "/no/such/dir/f.jsonl"): "no folder '/no/such/dir' for --output",
        ("runs", "--status", "bogus"): "unknown status 'bogus': use one of scheduled, queued, running, paused",
        ("runs", "--batch", "batch-nope"): f"no batch 'batch-nope' for tenant {settings.tenant!r}",
        ("events", run_id, "--kind", "bogus"): "unknown event kind 'bogus': use one of run_started",
        ("rerun", run_id, "--memory", "bogus"): "unknown memory 'bogus': use one of then, now, all",
        ("memory", "search", "launch", "-k", "0"): "k must be a whole number from 1 to 100",
        ("--tenant", "", "runs"): "invalid tenant id ''",
        ("run", "hi", "--agent", "calculator", "--model", "gpt-4"): "unknown model spec 'gpt-4'",
        ("run", "hi", "--agent", "calculator", "--max-steps", "3000000000"): "max steps must be positive and at most",
    }
    (first, message), *rest = cases.items()
    assert message in one_line_error(await waypoint(settings, *first)), first
    for args, message in rest:
        assert message in one_line_error(await waypoint_here(settings, *args)), args


async def test_usage_errors_are_one_line_with_the_closest_match(settings: Settings):
    cases = {
        ("runz",): "No such command 'runz'. Did you mean 'run', 'runs', 'rerun'?",
        ("run", "hi", "--folow"): "No such option: --folow (Possible options: --follow)",
        ("status",): "Missing argument 'run_id'",
    }
    (first, message), *rest = cases.items()
    assert message in one_line_error(await waypoint(settings, *first))
    for args, message in rest:
        assert message in one_line_error(await waypoint_here(settings, *args)), args


async def test_an_empty_tenant_in_the_environment_is_refused(settings: Settings):
    line = one_line_error(await waypoint_here(settings, "runs", env=cli_env(settings) | {"WAYPOINT_TENANT": ""}))
    assert "invalid configuration: tenant" in line and "a tenant id is 1 to 64 characters" in line


async def test_a_cli_without_the_codec_keys_says_which_setting_to_set(
    client: Client, engine, settings: Settings, agents: AgentRegistry
):
    key = base64.b64encode(os.urandom(32)).decode()
    encrypted = settings.model_copy(update={"codec_keys": SecretStr(f"k1:{key}")})
    enc_client = await connect(encrypted)
    async with build_worker(enc_client, engine, encrypted, agents):
        wp = Waypoint(enc_client, engine, encrypted)
        run_id = await wp.start_run("delete two files", agent="careful")

        async def waiting() -> bool:
            try:
                return (await wp.run(run_id)).status == RunStatus.WAITING_APPROVAL
            except NotFound:  # its row is not written yet
                return False

        await eventually(waiting, what="the run to wait for approval")
        line = one_line_error(await waypoint_here(settings, "approve", run_id))  # these settings have no keys
        assert "payloads are encrypted" in line and "WAYPOINT_CODEC_KEYS" in line
        shown = await waypoint(settings, "status", run_id)  # Postgres still answers, with a warning
        assert shown.code == 0 and "waiting_approval" in shown.out
        assert "WAYPOINT_CODEC_KEYS" in shown.err and "Traceback" not in shown.err
        await wp.cancel(run_id)
        await asyncio.wait_for(wp.result(run_id), 60)


async def test_an_unreachable_collector_costs_one_warning_and_no_wait(settings: Settings, worker):
    env = cli_env(settings, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")  # nothing listens there
    loop = asyncio.get_running_loop()
    began = loop.time()
    plain = await waypoint(settings, "run", "add", "--agent", "calculator")
    baseline = loop.time() - began  # the same command on this machine now, with no collector
    assert plain.code == 0, plain.err
    began = loop.time()
    done = await waypoint(settings, "run", "add", "--agent", "calculator", env=env)
    took = loop.time() - began - baseline
    assert done.code == 0, done.err
    assert done.out.strip().startswith("run-")
    noise = [line for line in done.err.splitlines() if line.strip() and not line.startswith("trace ")]
    assert len(noise) <= 1, done.err
    # The export gives up after 2 s (EXPORT_TIMEOUT_SECONDS); the SDK's own default would wait 10 s
    # more than the same command without a collector. The margin is for a busy machine.
    assert took < 7, f"{took:.1f} s more than without a collector ({baseline:.1f} s)"


@pytest.mark.timeout(120)
async def test_a_worker_with_a_bad_limits_file_does_not_start(settings: Settings, tmp_path):
    """A limits file that does not parse, an entry out of range, a weight for a tenant nothing knows:
    one error line naming the entry, exit 1, before the worker polls anything."""
    cases = {
        "[tenants.nobody-knows]\nweight = 2\n": "[tenants.nobody-knows]: no tenant 'nobody-knows' is known",
        '[models."openai:gpt-4o"]\nin_flight = 0\n': '[models."openai:gpt-4o"] in_flight: input should be greater',
        "[models.x\n": "is not valid TOML",
        '[models."gpt-4o"]\nin_flight = 1\n': '[models."gpt-4o"]: a model key is provider:model',
    }
    paths = []
    for i, text in enumerate(cases):
        paths.append(tmp_path / f"limits{i}.toml")
        paths[-1].write_text(text)
    # A worker process, with the file that needs the database to be refused: it checks the file as
    # `waypoint limits FILE --check` does (one call, FleetLimits.check) before it polls anything.
    # The other kinds of mistake are that check's logic: they go through the command in process.
    worker = await waypoint(settings, "worker", env=cli_env(settings) | {"WAYPOINT_LIMITS_FILE": str(paths[0])})
    line = one_line_error(worker)
    assert next(iter(cases.values())) in line and str(paths[0]) in line, line
    assert one_line_error(await waypoint_here(settings, "limits", str(paths[0]), "--check")) == line
    for path, (text, message) in zip(paths, cases.items(), strict=True):
        line = one_line_error(await waypoint_here(settings, "limits", str(path), "--check"))
        assert message in line and str(path) in line, (text, line)
        # Showing a file checks it too, in the same words.
        assert one_line_error(await waypoint_here(settings, "limits", str(path))) == line
    fine = tmp_path / "fine.toml"
    fine.write_text(f'[models."openai:gpt-4o"]\nin_flight = 2\n\n[tenants.{settings.tenant}]\nweight = 2\n')
    done = await waypoint_here(settings, "limits", str(fine), "--check")
    assert (done.code, done.out.strip()) == (0, f"ok: {fine}: a worker would accept it"), done.err


async def test_a_start_time_in_the_past_is_one_line_and_starts_nothing(settings: Settings, client: Client, engine):
    wp = Waypoint(client, engine, settings)
    before = await wp.runs(limit=500)
    (first, message), *rest = {
        ("--at", "2020-01-01T09:00"): "the start time is in the past: 2020-01-01T09:00:00+00:00",
        ("--after", "soon"): "--after='soon': write a duration such as 30s, 10m, 1h or 1d",
        ("--at", "2020-01-01", "--follow"): "a delayed run is not followed",
    }.items()
    assert message in one_line_error(await waypoint(settings, "run", "hi", "--agent", "calculator", *first))
    for args, message in rest:
        assert message in one_line_error(await waypoint_here(settings, "run", "hi", "--agent", "calculator", *args))
    assert await wp.runs(limit=500) == before
