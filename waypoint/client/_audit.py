"""`wp.audit`: the tenant's audit log, written by every audited action and read by admins.

    async with wp._scope.act(Action.CANCEL, tenant, Target(TargetKind.RUN, run_id)):
        ...                                      # its outcome is recorded by `record` (the sink)
    page = await wp.audit.entries(since="24h", actor="key:3")   # newest first
    verdict = await wp.audit.verify()            # the first entry whose chain breaks, if any

`record` is the scope's audit sink: each entry is appended to the tenant's hash-chained log
(`waypoint.store.audit`) and emitted as an OpenTelemetry event `waypoint.audit` (on the current
span when one records, else on a short span of its own).

Failures, decided: the log is the record of who did what, so a database failure to append an
entry is not swallowed: it propagates, and the surface answers with it (the action itself may have
taken effect; an audit gap is worse than an error the caller sees). Telemetry is a copy: a failure
to emit the event is logged and never fails the action.

Reading the log needs the role `Action.AUDIT_READ` asks for (admin); a refused read is recorded,
a read is not (the log would grow an entry each time someone looks at it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from waypoint import telemetry
from waypoint.access import Action, AuditEntry
from waypoint.checks import BIGINT_MAX, check_choice, check_count, check_text, parse_when
from waypoint.client._scope import Scope
from waypoint.errors import InvalidInput
from waypoint.store.audit import AUDIT_LIMIT_MAX, AuditLog, AuditRow, AuditVerdict

log = logging.getLogger(__name__)

ACTOR_PREFIXES = ("key:", "user:")


@dataclass(frozen=True)
class AuditPage:
    """Entries of the audit log, newest first; `next_cursor`: pass it as `cursor` for the older ones
    (None: there are none)."""

    entries: list[AuditRow]
    next_cursor: int | None


def check_actor(actor: str | None) -> str | None:
    """An actor as the log names it: `key:<id>`, `user:<subject>` or `local`."""
    if actor is None:
        return None
    actor = check_text("the actor", actor.strip())
    if actor != "local" and not any(actor.startswith(p) and len(actor) > len(p) for p in ACTOR_PREFIXES):
        raise InvalidInput(f"actor {actor!r}: name one as the log does: key:<id>, user:<subject> or local")
    return actor


@dataclass(frozen=True)
class AuditQuery:
    """Which entries a read asks for, checked (every surface checks its input with `of` first)."""

    since: datetime | None = None
    actor: str | None = None
    action: str | None = None
    limit: int = 100
    cursor: int | None = None

    @classmethod
    def of(
        cls,
        *,
        since: str | datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        limit: int = 100,
        cursor: int | None = None,
    ) -> AuditQuery:
        when = parse_when("since", since.strip()) if isinstance(since, str) else since
        if action is not None:
            action = check_choice("action", action.strip(), Action)
        check_count("the limit", limit, high=AUDIT_LIMIT_MAX)
        if cursor is not None:
            check_count("the cursor", cursor, high=BIGINT_MAX)
        return cls(when, check_actor(actor), action, limit, cursor)


def audit_attributes(row: AuditRow) -> dict[str, str | int]:
    """The `waypoint.audit.*` attributes of an entry's OpenTelemetry event (nothing secret: the row holds none)."""
    attributes: dict[str, str | int] = {
        "waypoint.tenant": row.tenant_id,
        "waypoint.audit.seq": row.seq,
        "waypoint.audit.actor": row.actor,
        "waypoint.audit.role": row.role,
        "waypoint.audit.action": row.action,
        "waypoint.audit.outcome": row.outcome,
        "waypoint.audit.surface": row.surface,
    }
    if row.target_kind is not None:
        attributes["waypoint.audit.target"] = f"{row.target_kind}:{row.target_id}"
    return attributes


class Audit:
    def __init__(self, store: AuditLog, scope: Scope):
        self._store = store
        self._scope = scope

    async def record(self, entry: AuditEntry) -> AuditRow:
        """Append an audited action to its tenant's log and emit it as an OpenTelemetry event (see
        the module's docstring for what a failure of either does)."""
        row = await self._store.append_audit(entry)
        try:
            telemetry.event("waypoint.audit", audit_attributes(row))
        except Exception:  # a copy for the trace backend: never the action's failure
            log.warning("the audit entry %s of tenant %s was not emitted as a span event", row.seq, row.tenant_id)
        return row

    async def entries(
        self,
        *,
        since: str | datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        limit: int = 100,
        cursor: int | None = None,
        tenant_id: str | None = None,
    ) -> AuditPage:
        """The tenant's audit entries, newest first: since `since` (an age such as 24h, or an ISO
        time), of `actor` (key:<id>, user:<subject>, local), of `action` (run.cancel, ...), at most
        `limit`; `cursor`: the `next_cursor` of the page before. Needs the admin role."""
        query = AuditQuery.of(since=since, actor=actor, action=action, limit=limit, cursor=cursor)
        tenant = await self._scope.allowed(Action.AUDIT_READ, tenant_id)
        rows = await self._store.audit_entries(
            tenant,
            since=query.since,
            actor=query.actor,
            action=query.action,
            limit=query.limit,
            before_seq=query.cursor,
        )
        more = len(rows) == limit and rows[-1].seq > 1
        return AuditPage(rows, rows[-1].seq if more else None)

    async def verify(self, *, tenant_id: str | None = None) -> AuditVerdict:
        """Recompute the tenant's audit chain: `ok`, or the first entry (`broken_seq`) that was
        changed, removed or does not chain to the one before. Needs the admin role."""
        tenant = await self._scope.allowed(Action.AUDIT_READ, tenant_id)
        return await self._store.verify_audit(tenant)


__all__ = ["Audit", "AuditPage", "AuditQuery", "check_actor"]
