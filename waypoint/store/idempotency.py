"""Idempotency keys of starts: the first start with a key claims it for its run; every repeat within
the retention window answers that run instead of starting another.

    run_id, created = await store.idempotency.claim_key(tenant, key, new_id, body_hash, retention_seconds)
    if created: start it (and `release_key` if that fails, so a retry with the key can start it)

The claim is the arbiter of a race: the key's primary key lets one INSERT win, and the others read
the winner's row. A row older than the retention window is replaced in the same statement (ON
CONFLICT DO UPDATE ... WHERE expired), so two late repeats cannot both take it over. Expired rows of
every tenant are tidied a batch at a time by the claims that win.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import ColumnElement, Interval, and_, delete, func, literal, select, tuple_
from sqlalchemy.dialects.postgresql import insert

from waypoint.errors import Conflict
from waypoint.store.base import StoreBase
from waypoint.store.schema import idempotency_keys, runs

TIDY_BATCH = 100  # expired keys a winning claim deletes: bounded work per start, however many expired
CLAIM_TRIES = 5  # a claim whose row vanished between the insert and the read (a failed start released it)


def _expired(retention_seconds: float) -> ColumnElement[bool]:
    """Rows created longer ago than the retention window (by the database's clock)."""
    return idempotency_keys.c.created_at < func.now() - literal(timedelta(seconds=retention_seconds), Interval())


class Idempotency(StoreBase):
    async def claim_key(
        self, tenant_id: str, key: str, run_id: str, body_hash: str, retention_seconds: float
    ) -> tuple[str, bool]:
        """(run id, created): `run_id` and True when this call took the key (new, or its old claim
        expired); else the run the key answers and False. A live key claimed for a different request
        (`body_hash`) is a Conflict naming its run."""
        table = idempotency_keys
        new = insert(table).values(tenant_id=tenant_id, key=key, run_id=run_id, body_hash=body_hash)
        claim = new.on_conflict_do_update(
            index_elements=[table.c.tenant_id, table.c.key],
            set_={"run_id": run_id, "body_hash": body_hash, "created_at": func.now()},
            where=_expired(retention_seconds),
        ).returning(table.c.run_id)
        mine = and_(table.c.tenant_id == tenant_id, table.c.key == key)
        for _ in range(CLAIM_TRIES):
            async with self.engine.begin() as conn:
                if await conn.scalar(claim) is not None:
                    created = True
                else:  # a live claim: the statement waited for its transaction, so it is committed
                    found = (await conn.execute(select(table.c.run_id, table.c.body_hash).where(mine))).first()
                    if found is None:
                        continue  # released meanwhile: claim again
                    if found.body_hash != body_hash:
                        raise Conflict(
                            f"idempotency key {key!r} was used for run {found.run_id} with a different request: "
                            "use a new key"
                        )
                    return str(found.run_id), False
            await self._tidy_keys(retention_seconds)
            return run_id, created
        raise Conflict(f"idempotency key {key!r} is being claimed and released by other starts: try again")

    async def tenant_of_run(self, run_id: str) -> str | None:
        """The tenant whose run has this id, if any run has it: a run id is one Temporal workflow id,
        whichever tenant asks."""
        async with self.engine.connect() as conn:
            tenant: str | None = await conn.scalar(select(runs.c.tenant_id).where(runs.c.run_id == run_id))
        return tenant

    async def release_key(self, tenant_id: str, key: str, run_id: str) -> None:
        """Undo a claim whose start failed (only if the key still names `run_id`)."""
        table = idempotency_keys
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(table).where(table.c.tenant_id == tenant_id, table.c.key == key, table.c.run_id == run_id)
            )

    async def key_run(self, tenant_id: str, key: str) -> str | None:
        """The run a key names now (expired or not), or None."""
        table = idempotency_keys
        query = select(table.c.run_id).where(table.c.tenant_id == tenant_id, table.c.key == key)
        async with self.engine.connect() as conn:
            found: str | None = await conn.scalar(query)
        return found

    async def _tidy_keys(self, retention_seconds: float) -> None:
        """Delete a batch of expired keys (any tenant's), skipping rows a claim holds right now."""
        table = idempotency_keys
        batch = (
            select(table.c.tenant_id, table.c.key)
            .where(_expired(retention_seconds))
            .limit(TIDY_BATCH)
            .with_for_update(skip_locked=True)
        )
        async with self.engine.begin() as conn:
            await conn.execute(delete(table).where(tuple_(table.c.tenant_id, table.c.key).in_(batch)))


__all__ = ["Idempotency"]
