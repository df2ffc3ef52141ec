"""The stack: `dev`, `demo`, `worker`, `migrate`, `codec-server`."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from waypoint.app.cli._common import command, fail, settings
from waypoint.errors import InvalidInput, WaypointError
from waypoint.names import DemoAgent


def register(app: typer.Typer) -> None:
    app.command()(dev)
    app.command()(demo)
    app.command()(worker)
    app.command()(migrate)
    app.command(name="codec-server")(codec_server)


def _raise_on_sigterm() -> None:
    # While the stack starts (synchronous code), turn SIGTERM into KeyboardInterrupt so cleanup runs.
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def dev(no_worker: Annotated[bool, typer.Option("--no-worker", help="Start no worker here.")] = False) -> None:
    """Start the embedded stack (Temporal, Postgres, Qdrant) and a worker; Ctrl-C stops it all."""
    from waypoint.app.devstack import serve

    _raise_on_sigterm()
    try:
        serve(settings(), worker=not no_worker)
    except WaypointError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        pass


def demo(
    agent: Annotated[
        DemoAgent,
        typer.Option(help="demo: one agent reads notes; research: a lead agent fans out to sub-agents at once."),
    ] = DemoAgent.DEMO,
    model: Annotated[str | None, typer.Option(help="Model spec, e.g. openai:gpt-4o-mini (default: scripted).")] = None,
    chaos: Annotated[
        bool, typer.Option("--chaos", help="Fail model calls, kill the worker mid-tool, resume, check the result.")
    ] = False,
) -> None:
    """Run the demo agent to completion on the embedded stack (started, or reused if running)."""
    from waypoint.app.demo_run import run_demo

    _raise_on_sigterm()
    try:
        if chaos and model:
            raise InvalidInput("--chaos plays its own model (a local server that fails some calls): drop --model")
        if chaos and agent != DemoAgent.DEMO:
            raise InvalidInput("--chaos plays the notes demo only: drop --agent")
        if model and agent != DemoAgent.DEMO:
            raise InvalidInput("the research demo's agents are scripted: drop --model")
        run_demo(settings(), model=model, chaos=chaos, agent=agent)
    except WaypointError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@command
async def worker(
    deployment: Annotated[
        str | None,
        typer.Option(help="Join this Worker Deployment as a version (WAYPOINT_WORKER_DEPLOYMENT; unset: unversioned)."),
    ] = None,
    build_id: Annotated[
        str | None,
        typer.Option(help="Build id of that version (WAYPOINT_WORKER_BUILD_ID; default: a hash of Waypoint's code)."),
    ] = None,
    pinned: Annotated[
        bool,
        typer.Option(
            "--pinned",
            help="Runs stay on the version they started on (default: auto-upgrade, they move to the next current "
            "version at their next workflow task).",
        ),
    ] = False,
) -> None:
    """Run a worker against the configured Temporal and Postgres (as `python worker.py`)."""
    from waypoint.app.devstack import worker_main
    from waypoint.names import VersioningMode

    given = {"worker_deployment": deployment, "worker_build_id": build_id}
    extra = {name: value for name, value in given.items() if value is not None}
    if pinned:
        extra["worker_versioning"] = VersioningMode.PINNED
    await worker_main(settings(**extra))


@command
async def migrate() -> None:
    """Apply the database migrations (Alembic) to the configured Postgres."""
    from waypoint.app import console as out
    from waypoint.client import database_url
    from waypoint.store.db import create_engine, schema_revision
    from waypoint.store.db import migrate as apply

    engine = create_engine(database_url(settings()))
    try:
        await apply(engine)
        current, _ = await schema_revision(engine)
    except OSError as exc:
        raise WaypointError(f"cannot reach Postgres ({exc}): check WAYPOINT_DATABASE_URL") from None
    finally:
        await engine.dispose()
    out.console.print(f"database schema at revision {current}")


@command
async def codec_server(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8888,
) -> None:
    """Serve the payload codec (POST /decode, /encode) to the Temporal Web UI and CLI until Ctrl-C."""
    from waypoint.app import console as out
    from waypoint.app.worker import stop_event
    from waypoint.codec import CodecServer, EncryptionCodec
    from waypoint.errors import ConfigError

    cfg = settings()
    codec = EncryptionCodec.from_settings(cfg)
    if codec is None:
        raise ConfigError("WAYPOINT_CODEC_KEYS is not set: the codec server needs the keys the workers use")
    try:
        server = CodecServer(codec, cfg.codec_ui_origin).start(host, port)
    except OSError as exc:
        raise WaypointError(f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port") from None
    out.console.print(
        f"codec server on http://{host}:{port} for the UI at {cfg.codec_ui_origin} "
        f"(encrypting with key {codec.current_key_id}); Ctrl-C stops it"
    )
    try:
        await stop_event().wait()
    finally:
        server.stop()
