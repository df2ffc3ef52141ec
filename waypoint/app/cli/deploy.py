"""Deploying new code: `waypoint check-deploy` (the deploy gate, run with the new code before it
ships) and `waypoint deployment set-current|show` (Temporal Worker Versioning)."""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect
from waypoint.gateway.deploy import FINISHED_DEFAULT

deployment_app = typer.Typer(
    no_args_is_help=True, help="Worker Deployments: which version of the workers Temporal sends runs to."
)
DeploymentArg = Annotated[str, typer.Argument(help="Worker Deployment name.", show_default=False)]

# A long check says how far it got on stderr this often (a short one says nothing but its result).
PROGRESS_EVERY_SECONDS = 5.0


def register(app: typer.Typer) -> None:
    app.command(name="check-deploy")(check_deploy)
    app.add_typer(deployment_app, name="deployment")


@command
async def check_deploy(
    finished: Annotated[
        int, typer.Option("--finished", help="Also replay the last N finished runs (most recently closed first).")
    ] = FINISHED_DEFAULT,
    since: Annotated[
        str | None, typer.Option(help="Only finished runs closed since: an age (24h, 7d) or an ISO date or time.")
    ] = None,
    full_sandbox: Annotated[
        bool,
        typer.Option(
            "--full-sandbox",
            help="Replay in the workers' own sandbox, Waypoint's modules imported afresh for each history "
            "(about 7x slower; also refuses restricted calls in them).",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Replay the histories of the open runs and the last finished ones against the workflow code installed
    here; exit 1 naming the first run that would break. Run it with the new code, before deploying it."""
    from waypoint.app import console as out

    began = time.monotonic()
    said = began

    def progress(replayed: int, listed: int) -> None:
        nonlocal said
        now = time.monotonic()
        if now - said >= PROGRESS_EVERY_SECONDS:
            said = now
            print(f"replayed {replayed:,} of {listed:,} histories listed so far ({now - began:.0f} s)", file=sys.stderr)

    async with await connect() as wp:
        check = await wp.check_deploy(finished=finished, since=since, full_sandbox=full_sandbox, progress=progress)
    if as_json:
        out.print_json({**out.as_json(check), "histories": check.histories, "ok": check.ok})
    elif check.ok:
        out.console.print(f"[green]ok[/green]: {check.summary()}")
    if not check.ok:
        if not as_json:
            more = f" ({len(check.broken) - 1} more: see --json)" if len(check.broken) > 1 else ""
            print(f"error: {check.broken[0].line()}{more}", file=sys.stderr)
        raise typer.Exit(1)


@deployment_app.command(name="set-current")
@command
async def set_current(
    deployment: DeploymentArg,
    build_id: Annotated[
        str | None,
        typer.Argument(
            help="Build id of the version (default: the one of the code installed here).", show_default=False
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Make a version of the Worker Deployment current: new runs (and open runs at their next workflow task,
    unless pinned) go to its workers. Its workers must have polled first (`waypoint worker --deployment`)."""
    from waypoint.app import console as out
    from waypoint.gateway.code import build_id as local_build_id

    build = build_id or local_build_id()
    async with await connect() as wp:
        previous = await wp.set_current_deployment(deployment, build)
    if as_json:
        out.print_json({"deployment": deployment, "current": build, "previous": previous})
    else:
        out.console.print(f"{deployment}: current version {build} (was {previous or 'none'})")


@deployment_app.command(name="show")
@command
async def show(deployment: DeploymentArg, as_json: JsonOpt = False) -> None:
    """The current version of the Worker Deployment and the versions Temporal knows."""
    from waypoint.app import console as out

    async with await connect() as wp:
        current, versions = await wp.deployment(deployment)
    if as_json:
        out.print_json({"deployment": deployment, "current": current, "versions": versions})
    else:
        out.console.print(
            f"{deployment}: current version {current or 'none'}; versions: {', '.join(versions) or 'none'}"
        )
