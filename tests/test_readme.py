"""The README and the documentation pages stay true: their examples run as written, every setting and
command is documented, and every command they show exists with the options it is shown with."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main

from tests.docs import README, everything, first_block, page, problems_of, reference_hook, shown_commands
from tests.ports import reserve_port
from waypoint.app.cli import app
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import seed_workspace
from waypoint.testing.fake_openai import FakeOpenAI, Turn

DOCS = everything()


def test_every_setting_is_documented():
    for name, field in Settings.model_fields.items():
        aliases = getattr(field.validation_alias, "choices", None) or [f"WAYPOINT_{name.upper()}"]
        assert any(f"`{alias}`" in DOCS for alias in aliases), f"{aliases[0]} is missing from the README and docs/"


def test_every_command_is_documented():
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name, found in commands.items():
        if found.hidden:  # an alias (`schedule`, deprecated for `compaction`)
            continue
        assert f"`waypoint {name}" in DOCS, f"`waypoint {name}` is missing from the README and docs/"
    assert "`waypoint schedule" not in DOCS, "the docs show `waypoint schedule`, deprecated: `waypoint compaction`"


def test_the_readmes_links_reach_their_pages():
    """mkdocs checks the pages' links (`mkdocs build --strict`); the README is no page of the site."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert len(links) > 20, links
    root = Path(__file__).parent.parent
    missing = [link for link in links if not link.startswith("http") and not (root / link).is_file()]
    assert not missing, missing


def test_the_reference_pages_are_generated_from_the_code():
    """What `mkdocs build` puts in the reference pages (CI builds them with --strict): every command,
    every setting's variable, every /v1 route, every public name, every error."""
    import waypoint

    hook = reference_hook()
    cli = hook.cli()
    for path, _ in hook.waypoint_commands():
        assert f"waypoint {' '.join(path)}\n" in cli, path
    configuration = hook.configuration()
    for name, field in Settings.model_fields.items():
        assert all(f"`{v}`" in configuration for v in hook.setting_variables(name, field)), name
    http = hook.http()
    routes = [path for path in hook.openapi()["paths"] if path.startswith("/v1")]
    assert len(routes) > 40 and all(f" {path}`" in http for path in routes)
    python = hook.python_api()
    assert all(f"[`{name}`]" in python for name in waypoint.__all__)
    assert "| `WaypointError` |" in hook.errors() and "| `NotFound` |" in hook.errors()
    # a marker a page holds becomes the generated text
    assert "waypoint cron create" in hook.on_page_markdown("<!-- reference: cli -->", None, None, None)


def test_every_command_shown_exists_with_its_options():
    """Each `waypoint ...` of the README and the pages, in a shell block or inline: its command and
    subcommands exist, and so does every option it is shown with (a renamed command or option fails)."""
    root = typer.main.get_command(app)
    shown = list(shown_commands())
    assert len(shown) > 200 and {s.where for s in shown} > {"README.md", "docs/guides/cli.md"}
    problems = [f"{s.where}: {s.text}: {p}" for s in shown for p in problems_of(s, root)]
    assert not problems, "\n".join(problems)


def test_each_concept_is_explained_once():
    concepts = re.findall(r"^- \*\*([^*]+)\*\*", page("getting-started/concepts.md"), re.M)
    assert len(concepts) > 10, concepts
    assert len(concepts) == len(set(concepts)), concepts


def test_quick_start_is_two_commands():
    block = README.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.strip().splitlines() == ['pip install -e ".[test]" && waypoint demo', "pytest"]
    # the site's home page shows the README's quick start itself, not a copy
    assert "<!-- --8<-- [start:quick-start] -->" in README.split("## Quick start", 1)[1]
    assert '--8<-- "README.md:quick-start"' in page("index.md")


def own_agent_commands() -> tuple[str, list[str]]:
    """The first agent's page: the module's code, and the shell lines that run it."""
    section = page("getting-started/first-agent.md")
    code = re.search(r"```python\n(from waypoint import Agent.*?)```", section, re.S).group(1)
    shell = section.split("Then point the worker at it and start a run:", 1)[1].split("```bash\n", 1)[1]
    lines = [line.split("#", 1)[0].strip() for line in shell.split("```", 1)[0].strip().splitlines()]
    return code, lines


def test_the_readmes_agent_is_the_first_agent_pages():
    """The README shows the first agent's code and commands; they are the page's, which the tests run."""
    code, lines = own_agent_commands()
    section = README.split("## Your own agent", 1)[1]
    assert first_block(section, "Save this as", "python") == code
    shell = first_block(section, "Then point the worker at it and start a run:")
    assert [line.split("#", 1)[0].strip() for line in shell.strip().splitlines()] == lines


def own_ports() -> dict[str, str]:
    """Free ports for every server `waypoint dev` starts (Temporal, its UI, the HTTP API), so a test
    never meets the developer's own `waypoint dev`."""
    return {
        "WAYPOINT_TEMPORAL_ADDRESS": f"localhost:{reserve_port()}",
        "WAYPOINT_TEMPORAL_UI_PORT": str(reserve_port()),
        "WAYPOINT_API_PORT": str(reserve_port()),
    }


@pytest.fixture
def default_api_port_taken() -> Iterator[None]:
    """The default API port is in use during the test (as a `waypoint dev` of the developer's would
    hold it): held here, or already by someone else."""
    with socket.socket() as sock:
        with contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", Settings.model_fields["api_port"].default))
            sock.listen()
        yield


@pytest.mark.postgres
@pytest.mark.timeout(240)
def test_your_own_agent_runs_as_written(tmp_path: Path, fake_openai: FakeOpenAI, default_api_port_taken):
    """The documented steps, typed into a shell in a fresh folder: save myapp/agents.py, export,
    `waypoint dev` (in its own terminal), then `waypoint run ... --follow`. Only the ports and the
    model endpoint differ from a user's machine (a fake OpenAI server stands in for the provider)."""
    code, (export, dev, run) = own_agent_commands()
    assert export.startswith("export WAYPOINT_AGENTS=myapp.agents") and dev == "waypoint dev", (export, dev)
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "agents.py").write_text(code)
    fake_openai.answer(
        Turn(tool_calls=[("convert", {"amount": 120, "rate": 0})]),
        Turn(tool_calls=[("convert", {"amount": 120, "rate": 1.08})]),
        Turn(content="120 EUR is 129.6 USD."),
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
    env |= own_ports() | {"OPENAI_BASE_URL": fake_openai.base_url, "COLUMNS": "200"}
    shell = shutil.which("bash") or "sh"
    server = subprocess.Popen(
        [shell, "-c", f"{export} && exec {dev}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        seen = ""
        assert server.stdout is not None
        for line in server.stdout:
            seen += line
            if "Ctrl-C stops everything" in line:
                break
        assert "treasurer" in seen, seen  # the worker says which agents it loaded
        done = subprocess.run(
            [shell, "-c", f"{export} && {run}"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
    assert done.returncode == 0, done.stderr
    assert "120 EUR is 129.6 USD." in done.stdout and "completed" in done.stdout
    tool_messages = [m["content"] for m in fake_openai.seen[2].body["messages"] if m["role"] == "tool"]
    assert tool_messages == ["error: rate must be positive", "129.6"]


@pytest.mark.timeout(120)
def test_a_bad_agent_module_stops_dev_before_it_says_anything_started(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYPOINT_", "OPENAI_"))}
    env |= own_ports() | {"WAYPOINT_AGENTS": "myapp.nope"}
    done = subprocess.run(["waypoint", "dev"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 1
    assert done.stderr.strip() == "error: cannot import agent module 'myapp.nope': No module named 'myapp'"
    assert "Ctrl-C stops everything" not in done.stdout and "Temporal" not in done.stdout
    assert not (tmp_path / ".waypoint" / "postgres").exists()  # nothing was started


@pytest.mark.postgres
async def test_the_sql_examples_run(client, engine, settings: Settings, worker):
    from sqlalchemy import text

    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add", agent="calculator")
    await wp.result(run_id)
    sql = "\n".join(re.findall(r"```sql\n(.*?)```", DOCS, re.S))
    statements = [s.strip() for s in sql.replace("run-…", run_id).split(";") if s.strip()]
    assert len(statements) >= 6
    async with engine.connect() as conn:
        for statement in statements:
            rows = (await conn.execute(text(statement))).all()
            if "WHERE run_id" in statement:
                assert rows, statement  # the run's own rows are found


@pytest.mark.postgres
@pytest.mark.timeout(240)
async def test_the_python_api_example_runs_and_its_fork_completes(memory_worker, settings: Settings):
    """The Python client guide's first block, as a script (in an `async def main()`), on the demo agent."""
    wp, _ = memory_worker
    seed_workspace(settings.resolved_workspace)
    block = first_block(page("guides/python-client.md"), "# The Python client", "python")
    script = "import asyncio\n\nasync def main():\n" + textwrap.indent(block, "    ")
    script += "    print(fork_id)\n\nasyncio.run(main())\n"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        env=settings.child_environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    fork_id = out.decode().split()[-1]
    forked = await wp.result(fork_id)
    assert forked.status == "completed" and "words in 3 notes" in (forked.output or ""), forked


def fake_server_commands() -> list[str]:
    """The shell lines that try an `openai:` agent on the fake server: its script, the server, the export."""
    section = page("getting-started/first-agent.md").split("To try an `openai:` agent without an API key", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("   #", 1)[0].strip() for line in block.strip().splitlines()]


@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_the_fake_servers_script_answers_every_run(tmp_path: Path, client, engine, settings: Settings):
    """The fake server as typed, with its two-answer turns.json, and the README's agent run twice:
    each run gets both answers (the script starts over, and says so in one line), none waits on a 500."""
    from waypoint.agents import AgentRegistry
    from waypoint.app.worker import build_worker

    echo, serve, export = fake_server_commands()
    assert serve.startswith("python -m waypoint.testing.fake_openai --port 8765") and "OPENAI_BASE_URL" in export
    port = reserve_port()
    subprocess.run(["bash", "-c", echo], cwd=tmp_path, check=True)
    fake = await asyncio.create_subprocess_exec(
        "bash", "-c", "exec " + serve.replace("8765", str(port)), cwd=tmp_path, stdout=asyncio.subprocess.PIPE
    )
    assert fake.stdout is not None
    assert "fake OpenAI server on" in (await fake.stdout.readline()).decode()
    code, _ = own_agent_commands()
    module: dict = {}
    exec(compile(code, "myapp/agents.py", "exec"), module)
    settings = settings.model_copy(update={"openai_base_url": f"http://127.0.0.1:{port}/v1"})
    wp = Waypoint(client, engine, settings)
    try:
        async with build_worker(client, engine, settings, AgentRegistry([module["treasurer"]])):
            for _ in range(2):
                run_id = await wp.start_run("Convert 120 EUR to USD at 1.08", agent="treasurer")
                result = await wp.result(run_id)
                assert (result.status, result.output) == ("completed", "120 EUR is 129.6 USD."), result
    finally:
        fake.terminate()
        out, _ = await fake.communicate()
    assert out.decode().count("used up: answering from the first again") == 1, out.decode()


def other_fake_commands() -> list[list[str]]:
    """The README's lines that run the treasurer on the Anthropic and Gemini fakes, three per provider."""
    text = page("getting-started/first-agent.md")
    section = text.split("The same `turns.json` drives the fakes of the other providers", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [line.split("   #", 1)[0].strip() for line in block.strip().splitlines()]
    return [lines[i : i + 3] for i in range(0, len(lines), 3)]


@pytest.mark.postgres
@pytest.mark.timeout(180)
@pytest.mark.parametrize("provider", ["anthropic", "google"])
async def test_the_treasurer_runs_on_each_providers_fake_as_typed(
    provider: str, tmp_path: Path, client, engine, settings: Settings, monkeypatch: pytest.MonkeyPatch
):
    """The README's turns.json, each fake started as typed, its exports in the worker's environment, and
    the run with the README's --model: the same answer as on the OpenAI fake, through each official SDK."""
    from waypoint.agents import AgentRegistry
    from waypoint.app.worker import build_worker

    echo = fake_server_commands()[0]
    serve, export, run = next(c for c in other_fake_commands() if f"--model {provider}:" in c[2])
    subprocess.run(["bash", "-c", echo], cwd=tmp_path, check=True)
    port = reserve_port()
    readme_port = serve.split("--port ", 1)[1].split()[0]
    fake = await asyncio.create_subprocess_exec(
        "bash", "-c", "exec " + serve.replace(readme_port, str(port)), cwd=tmp_path, stdout=asyncio.subprocess.PIPE
    )
    assert fake.stdout is not None
    await fake.stdout.readline()  # it says where it listens
    for pair in export.removeprefix("export ").split():
        name, value = pair.split("=", 1)
        monkeypatch.setenv(name, value.replace(readme_port, str(port)))
    code, _ = own_agent_commands()
    module: dict = {}
    exec(compile(code, "myapp/agents.py", "exec"), module)
    model = run.split("--model ", 1)[1].split()[0]
    task = run.split('"')[1]
    wp = Waypoint(client, engine, settings)
    try:
        async with build_worker(client, engine, settings, AgentRegistry([module["treasurer"]])):
            run_id = await wp.start_run(task, agent="treasurer", model=model)
            result = await wp.result(run_id)
    finally:
        fake.terminate()
        await fake.communicate()
    assert (result.status, result.output) == ("completed", "120 EUR is 129.6 USD."), result
    assert (await wp.run(run_id)).model == model


def evaluation_commands() -> list[str]:
    """The evaluations guide's worked example: its first shell block, a command a line."""
    block = first_block(page("guides/evaluations.md"), "# Evaluations")
    return [line.strip() for line in block.strip().splitlines()]


@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_the_evaluations_example_runs_as_written(worker, settings: Settings):
    """The worked example, each line typed into a shell against a running stack (the test's, as
    `waypoint dev` would be): two demo runs, a dataset of them, an experiment whose gate passes."""
    from tests.helpers import cli_env

    lines = evaluation_commands()
    assert [line.split()[:3] for line in lines[2:]] == [
        ["waypoint", "dataset", "create"],
        ["waypoint", "eval", "notes"],
    ], lines
    shell = shutil.which("bash") or "sh"
    env = {**os.environ, **cli_env(settings), "COLUMNS": "200"}
    outputs = []
    for line in lines:
        done = await asyncio.to_thread(
            subprocess.run, [shell, "-c", line], env=env, capture_output=True, text=True, timeout=150
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        outputs.append(done.stdout)
    assert "version 1" in outputs[2] and "2 case" in outputs[2], outputs[2]
    table = outputs[3]
    assert "exact" in table and "trajectory" in table and "steps" in table, table
    assert "exp-" in table, table
