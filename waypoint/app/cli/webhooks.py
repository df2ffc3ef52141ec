"""`waypoint webhooks list|show|redeliver|secret`: webhook deliveries (the dead-letter list among them)
and the tenant's signing secret. `waypoint webhook secret` is the same command under its old name."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect

webhooks_app = typer.Typer(
    no_args_is_help=True,
    help="Webhooks: deliveries (retried until delivered or their window ends, then on the dead-letter "
    "list), redelivery, and the secret their POSTs are signed with.",
)
DeliveryArg = Annotated[str, typer.Argument(help="Delivery id (`waypoint webhooks list`).", show_default=False)]


def register(app: typer.Typer) -> None:
    app.add_typer(webhooks_app, name="webhooks")
    app.add_typer(webhooks_app, name="webhook", hidden=True)  # `waypoint webhook secret`, as it always was


@webhooks_app.command(name="list")
@command
async def deliveries(
    failed: Annotated[
        bool, typer.Option("--failed", help="Only the dead-letter list: deliveries given up (window over, or refused).")
    ] = False,
    run_id: Annotated[str | None, typer.Option("--run", help="Only the deliveries of this run.")] = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """List the tenant's webhook deliveries, newest first: status (pending, delivered, failed), attempts,
    the last answer, when the next attempt is due. `--failed`: the dead-letter list."""
    from waypoint.app import console as out

    async with await connect() as wp:
        rows = await wp.webhooks.list(failed=failed, run_id=run_id, limit=limit)
    if as_json:
        out.print_json(rows)
    elif rows:
        out.console.print(out.deliveries_table(rows, wp.tenant(), failed=failed))
    elif failed:
        out.console.print("no failed deliveries: every webhook was delivered or is still being retried")
    else:
        out.console.print("no webhook deliveries yet: start a run with `--webhook URL`")


@webhooks_app.command(name="show")
@command
async def show(delivery_id: DeliveryArg, as_json: JsonOpt = False) -> None:
    """One delivery and every attempt of it, oldest first."""
    from waypoint.app import console as out

    async with await connect() as wp:
        found = await wp.webhooks.get(delivery_id)
        attempts = await wp.webhooks.attempts(delivery_id)
    if as_json:
        out.print_json({**out.as_json(found), "attempts": attempts})
        return
    out.console.print(out.delivery_table(found, attempts))


@webhooks_app.command(name="redeliver")
@command
async def redeliver(delivery_id: DeliveryArg, as_json: JsonOpt = False) -> None:
    """Send a delivered or failed delivery again: a new delivery of the same body to the same URL,
    retried as any; prints its id."""
    from waypoint.app import console as out

    async with await connect() as wp:  # Temporal on first use: an unknown delivery is refused before
        again = await wp.webhooks.redeliver(delivery_id)
    if as_json:
        out.print_json(again)
        return
    print(again.delivery_id)


@webhooks_app.command()
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
