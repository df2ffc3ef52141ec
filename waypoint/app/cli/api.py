"""The HTTP API: `serve`, and its API keys: `keys create|list|revoke`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect, settings

keys_app = typer.Typer(no_args_is_help=True, help="API keys of the HTTP API (stored hashed in Postgres).")


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.add_typer(keys_app, name="keys")


@command
async def serve(
    host: Annotated[str | None, typer.Option(help="Address to listen on (WAYPOINT_API_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on (WAYPOINT_API_PORT).")] = None,
) -> None:
    """Serve the HTTP API (Waypoint's endpoints, live streams, the Agent Protocol) until Ctrl-C."""
    from waypoint.app import console as out
    from waypoint.app.http.server import api_server, listen_on, start_api, stop_api, url_of
    from waypoint.app.worker import stop_event
    from waypoint.checks import check_port
    from waypoint.client import Waypoint
    from waypoint.store.db import schema_revision

    cfg = settings()
    host = host or cfg.api_host
    port = cfg.api_port if port is None else check_port(port, "pass --port or set WAYPOINT_API_PORT")
    sock = listen_on(host, port)  # before the app is built: a taken port costs nothing
    # Postgres answers before uvicorn starts: its own start-up failure is a traceback and exit code 3.
    wp = await Waypoint.connect(cfg, temporal=False)
    try:
        await schema_revision(wp.engine)
        server = api_server(cfg, host=host, port=port, waypoint=wp)
        stop = stop_event()
        task = await start_api(server, sock)
        url = url_of(server)
        out.console.print(f"Waypoint HTTP API on {url} (docs {url}/docs); requests need an API key; Ctrl-C stops it")
        try:
            await stop.wait()
        finally:
            await stop_api(server, task)
    finally:
        sock.close()
        await wp.close()


@keys_app.command(name="create")
@command
async def keys_create(
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant every request with this key acts for.")],
    name: Annotated[str | None, typer.Option(help="A name to tell keys apart.")] = None,
    role: Annotated[
        str,
        typer.Option("--role", help="What the key may do: viewer (read), operator (also act on runs), admin (all)."),
    ] = "admin",
    as_json: JsonOpt = False,
) -> None:
    """Create an API key for a tenant with a role and print it (shown this once; only its hash is stored)."""
    from waypoint.app import console as out
    from waypoint.client._keys import check_role

    chosen = check_role(role)  # before connecting: a typo needs no database
    async with await connect() as wp:
        key, row = await wp.keys.create(tenant, name, role=chosen)
    if as_json:
        out.print_json({"key": key, **out.as_json(row)})
        return
    print(key)  # stdout is the bare key, for KEY=$(waypoint keys create --tenant T)
    note = f"{row.role} key {row.id} ({row.prefix}...) for tenant {row.tenant_id}: store it now, it is not shown again"
    print(note, file=sys.stderr)


@keys_app.command(name="list")
@command
async def keys_list(
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's keys.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List API keys (id, prefix, tenant, role, name, created, revoked); never the keys themselves."""
    from waypoint.app import console as out

    async with await connect() as wp:
        rows = await wp.keys.list(tenant)
    if as_json:
        out.print_json(rows)
        return
    out.console.print(out.keys_table(rows) if rows else "no API keys yet: `waypoint keys create --tenant T`")


@keys_app.command(name="revoke")
@command
async def keys_revoke(
    key: Annotated[str, typer.Argument(help="The key's id or prefix, as `waypoint keys list` shows it.")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke an API key: requests with it get 401 from then on."""
    from waypoint.app import console as out

    async with await connect() as wp:
        row = await wp.keys.revoke(key)
    if as_json:
        out.print_json(row)
    else:
        out.console.print(f"key {row.id} ({row.prefix}...) of tenant {row.tenant_id} revoked")


@keys_app.command(name="role")
@command
async def keys_role(
    key: Annotated[str, typer.Argument(help="The key's id or prefix, as `waypoint keys list` shows it.")],
    role: Annotated[str, typer.Argument(help="Its new role: viewer, operator or admin.", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Change an API key's role: its next request acts with it."""
    from waypoint.app import console as out
    from waypoint.client._keys import check_role

    chosen = check_role(role)
    async with await connect() as wp:
        row = await wp.keys.set_role(key, chosen)
    if as_json:
        out.print_json(row)
    else:
        out.console.print(f"key {row.id} ({row.prefix}...) of tenant {row.tenant_id} is now {row.role}")
