"""The audit log: every human or application action, one row each, append-only and hash-chained per
tenant like a run's events.

    row = await store.audit.append_audit(entry)          # seq 1, 2, 3... of the entry's tenant
    rows = await store.audit.audit_entries(tenant, actor="key:3", limit=50)   # newest first
    verdict = await store.audit.verify_audit(tenant)     # the first entry whose chain breaks, if any

`hash = sha256(prev_hash || canonical JSON of the entry)` (the construction of `hashing.py`), over
every column but `id`, `prev_hash` and `hash`, `at` as ISO 8601 text. Appends to one tenant are
serialized by a transaction-scoped advisory lock on the tenant, taken in the statement that reads
the clock; the lock, the chain's tail and the insert are one transaction, so two writers (in one
process or many) never take the same seq or chain to the same entry.

Nothing secret is written: the actor names a key by its id, a user by the token's subject; the
detail holds a refusal's or a failure's message only, with anything that looks like an API key, a
bearer token or a JWT masked (`scrub`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, text

from waypoint.access import AuditEntry
from waypoint.checks import check_count, check_tenant
from waypoint.store.base import StoreBase
from waypoint.store.hashing import canonical_json
from waypoint.store.rows import row_of
from waypoint.store.schema import audit_log

MASK = "[REDACTED]"
AUDIT_LIMIT_MAX = 1000  # entries one read returns at most
DETAIL_MAX = 2000  # characters of a message kept


@dataclass(frozen=True)
class AuditRow:
    """One entry of a tenant's audit log (`audit_log`): who (`actor`: key:<id>, user:<subject> or
    local; never a secret) did what (`action`) on what (`target_kind`, `target_id`), from where
    (`surface`, `address`), when, and how it ended (`outcome`: ok, refused, failed; `detail`: the
    refusal's or failure's message). `seq` counts the tenant's entries from 1; `hash` chains each
    to the one before (`prev_hash`)."""

    tenant_id: str
    seq: int
    at: datetime
    actor: str
    role: str
    surface: str
    address: str | None
    action: str
    target_kind: str | None
    target_id: str | None
    outcome: str
    detail: dict[str, Any] | None
    prev_hash: str | None
    hash: str

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> AuditRow:
        return row_of(cls, row)

    @property
    def message(self) -> str | None:
        return (self.detail or {}).get("message")


@dataclass(frozen=True)
class AuditVerdict:
    """What `verify_audit` found: the entries read, and the first one whose chain breaks (None:
    the chain holds), with why."""

    tenant_id: str
    entries: int = 0
    broken_seq: int | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.broken_seq is None


_SECRETS = [
    re.compile(r"\bwp_[A-Za-z0-9_-]{4,}"),  # an API key (`wp_` and its random part)
    re.compile(r"\bBearer\s+\S+", re.I),
    re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),  # a JWT
    re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{40,}={0,2}"),  # a long random token
]


def scrub(message: str) -> str:
    """`message` with anything that looks like a key or a token masked, cut to DETAIL_MAX."""
    for pattern in _SECRETS:
        message = pattern.sub(MASK, message)
    return storable(message, DETAIL_MAX)


NAME_KEPT = 300  # characters of an actor, address or target id kept


def storable(value: str, high: int = NAME_KEPT) -> str:
    """`value` as Postgres text can hold it, cut to `high`: a refused or failed action may name what
    was refused (a run id with a NUL in it, a thousand-character id) and its entry must still be written."""
    return value.replace("\x00", "\ufffd")[:high]


def _storable(value: str | None) -> str | None:
    return None if value is None else storable(value)


def entry_hash(prev_hash: str | None, fields: dict[str, Any]) -> str:
    """The chained hash of an entry's fields (every column but id, prev_hash and hash)."""
    body = dict(fields)
    at = body["at"]
    body["at"] = at.isoformat(timespec="microseconds") if isinstance(at, datetime) else at
    return hashlib.sha256(((prev_hash or "") + canonical_json(body)).encode()).hexdigest()


HASHED = (
    "tenant_id",
    "seq",
    "at",
    "actor",
    "role",
    "surface",
    "address",
    "action",
    "target_kind",
    "target_id",
    "outcome",
    "detail",
)


def entry_fields(entry: AuditEntry, seq: int, at: datetime) -> dict[str, Any]:
    """The columns an entry is written as (`detail` scrubbed)."""
    actor, target = entry.actor, entry.target
    return {
        "tenant_id": entry.tenant,
        "seq": seq,
        "at": at,
        "actor": storable(actor.id),
        "role": actor.role.value,
        "surface": actor.surface.value,
        "address": _storable(actor.address),
        "action": entry.action.value,
        "target_kind": target.kind.value if target is not None else None,
        "target_id": _storable(target.id) if target is not None else None,
        "outcome": entry.outcome.value,
        "detail": {"message": scrub(entry.detail)} if entry.detail else None,
    }


class AuditLog(StoreBase):
    async def append_audit(self, entry: AuditEntry) -> AuditRow:
        """Append `entry` to its tenant's audit log: the next seq, chained to the entry before."""
        tenant = check_tenant(entry.tenant)
        async with self.engine.begin() as conn:
            # The lock serializes the tenant's appends until this transaction ends; the clock is read
            # under it, so the log's times rise with its seqs.
            lock = text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 44)), clock_timestamp() AS now")
            at = (await conn.execute(lock, {"key": f"waypoint.audit:{tenant}"})).one().now
            tail = (
                await conn.execute(
                    select(audit_log.c.seq, audit_log.c.hash)
                    .where(audit_log.c.tenant_id == tenant)
                    .order_by(audit_log.c.seq.desc())
                    .limit(1)
                )
            ).first()
            seq, prev = (tail.seq + 1, tail.hash) if tail is not None else (1, None)
            fields = entry_fields(entry, seq, at)
            values = {**fields, "prev_hash": prev, "hash": entry_hash(prev, fields)}
            await conn.execute(audit_log.insert().values(**values))
        return AuditRow(**values)

    async def audit_entries(
        self,
        tenant_id: str,
        *,
        since: datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        limit: int = 100,
        before_seq: int | None = None,
    ) -> list[AuditRow]:
        """The tenant's entries, newest first: at `since` or later, of `actor`, of `action`, at most
        `limit`, with a seq below `before_seq` (the cursor: the last seq of the page before)."""
        check_count("the limit", limit, high=AUDIT_LIMIT_MAX)
        query = select(audit_log).where(audit_log.c.tenant_id == check_tenant(tenant_id))
        if since is not None:
            query = query.where(audit_log.c.at >= since)
        if actor is not None:
            query = query.where(audit_log.c.actor == actor)
        if action is not None:
            query = query.where(audit_log.c.action == action)
        if before_seq is not None:
            query = query.where(audit_log.c.seq < before_seq)
        query = query.order_by(audit_log.c.seq.desc()).limit(limit)
        async with self.engine.connect() as conn:
            return [AuditRow.of(r) for r in (await conn.execute(query)).mappings()]

    async def verify_audit(self, tenant_id: str) -> AuditVerdict:
        """Recompute the tenant's chain in seq order: the first entry that is missing (a gap in the
        seqs), does not chain to the one before, or whose content does not match its hash."""
        tenant = check_tenant(tenant_id)
        query = select(audit_log).where(audit_log.c.tenant_id == tenant).order_by(audit_log.c.seq)
        count, prev, expected = 0, None, 1
        async with self.engine.connect() as conn:
            rows = await conn.stream(query.execution_options(yield_per=500))
            async for found in rows.mappings():
                count += 1
                row = AuditRow.of(found)
                problem = None
                if row.seq != expected:
                    problem, seq = f"entry {expected} is missing (the next is {row.seq})", expected
                elif row.prev_hash != prev:
                    problem, seq = "its prev_hash is not the hash of the entry before", row.seq
                elif entry_hash(prev, {k: getattr(row, k) for k in HASHED}) != row.hash:
                    problem, seq = "its content does not match its hash (it was changed)", row.seq
                if problem is not None:
                    await rows.close()
                    return AuditVerdict(tenant, count, seq, f"entry {seq}: {problem}")
                prev, expected = row.hash, row.seq + 1
        return AuditVerdict(tenant, count)


__all__ = ["AUDIT_LIMIT_MAX", "AuditLog", "scrub"]
