"""`waypoint audit`: the tenant's audit log (who did what, from where, how it ended), newest first,
and `--verify`, its hash chain recomputed."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, command, connect, fail


def register(app: typer.Typer) -> None:
    app.command(name="audit")(audit)


@command
async def audit(
    since: Annotated[
        str | None, typer.Option(help="Only entries since: an age (24h, 7d) or an ISO date or time.")
    ] = None,
    actor: Annotated[
        str | None, typer.Option(help="Only this actor's entries: key:<id>, user:<subject> or local.")
    ] = None,
    action: Annotated[str | None, typer.Option(help="Only this action's entries, e.g. run.cancel.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many entries (1 to 1000).")] = 50,
    verify: Annotated[
        bool, typer.Option("--verify", help="Recompute the log's hash chain; exit 1 if an entry was changed.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Show the tenant's audit log, newest first: every audited action (approve, deny, cancel, ...),
    its actor (an API key's id, a signed-in user's subject, or local), role, surface, target and
    outcome (ok, refused, failed). With --verify: check that no entry was changed or removed."""
    from waypoint.app import console as out
    from waypoint.client import AuditQuery

    AuditQuery.of(since=since, actor=actor, action=action, limit=limit)  # bad input: before connecting
    async with await connect() as wp:
        if verify:
            verdict = await wp.audit.verify()
        else:
            page = await wp.audit.entries(since=since, actor=actor, action=action, limit=limit)
    if verify:
        if as_json:
            out.print_json(verdict)
        elif verdict.ok:
            out.console.print(f"audit log of tenant {verdict.tenant_id}: {verdict.entries} entries, the chain holds")
        if not verdict.ok:
            raise fail(f"the audit log of tenant {verdict.tenant_id} is broken at {verdict.problem}")
        return
    if as_json:
        out.print_json({"entries": page.entries, "next_cursor": page.next_cursor})
        return
    if not page.entries:
        out.console.print("no audit entries: approving, denying or cancelling a run writes one")
        return
    out.console.print(out.audit_table(page.entries))
    if page.next_cursor is not None:
        out.console.print("older entries exist: narrow with --since, --actor or --action, or raise --limit")
