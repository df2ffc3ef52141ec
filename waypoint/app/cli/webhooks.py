"""`waypoint webhook secret [--rotate]`: the tenant's webhook signing secret."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect

webhook_app = typer.Typer(no_args_is_help=True, help="Webhooks: the secret their POSTs are signed with.")


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook")


@webhook_app.command()
@command
async def secret(
    rotate: Annotated[bool, typer.Option("--rotate", help="Replace the secret with a new one.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the tenant's webhook signing secret (made on first use): receivers check the
    Waypoint-Signature header with it. --rotate replaces it; posts signed from then on use the new one."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.webhook_secret(rotate=rotate)
    if as_json:
        out.print_json(found.to_json())
        return
    print(found.secret)
