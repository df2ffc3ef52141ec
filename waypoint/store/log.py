"""The append-only log: hash-chained events, status transitions, failed model attempts, failovers.

Events of one run form a chain, `hash = sha256(prev_hash || canonical JSON of the event)`;
appends to a run are serialized by its row lock, so two writers never take the same seq.
A transition moves an unfinished run to a new status once, with its event: a retry, or a
transition after the run finished, changes nothing.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from waypoint.names import FINISHED, EventKind, RunStatus
from waypoint.store.base import StoreBase, run_filter
from waypoint.store.hashing import chained_event
from waypoint.store.limits import leave_lines
from waypoint.store.rows import RunRow
from waypoint.store.schema import budget_reservations, events, runs
from waypoint.types import FailoverRecord, ParentRef

NewEvent = tuple[int, str, dict[str, Any]]  # (step, kind, payload)


async def lock_run(conn: AsyncConnection, run_id: str) -> None:
    """Serialize writers of one run until the caller's transaction ends."""
    await conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id).with_for_update())


def hash_chain(
    run_id: str, last_seq: int, last_hash: str | None, new: list[NewEvent], *, attempt: int = 1
) -> list[dict[str, Any]]:
    """The rows that extend a run's hash chain, which ends at (`last_seq`, `last_hash`), by `new`.
    Each row carries `payload_json`, the canonical JSON its hash was computed over."""
    seq, prev = last_seq, last_hash
    rows = []
    for step, kind, payload in new:
        seq += 1
        digest, payload_json = chained_event(prev, run_id=run_id, seq=seq, step=step, kind=kind, payload=payload)
        rows.append(
            {
                "run_id": run_id,
                "seq": seq,
                "step": step,
                "kind": kind,
                "payload": payload,
                "payload_json": payload_json,
                "attempt": attempt,
                "prev_hash": prev,
                "hash": digest,
            }
        )
        prev = digest
    return rows


async def append_events(
    conn: AsyncConnection, run_id: str, new: list[NewEvent], *, attempt: int = 1, locked: bool = False
) -> int:
    """Append events to a run's hash chain; returns the last seq. The caller owns the transaction;
    `locked`: it holds the run lock already (`lock_run`)."""
    if not locked:  # parallel tool attempts may fail, and append, at once
        await lock_run(conn, run_id)
    last = (
        await conn.execute(
            select(events.c.seq, events.c.hash).where(events.c.run_id == run_id).order_by(events.c.seq.desc()).limit(1)
        )
    ).first()
    rows = hash_chain(run_id, last.seq if last else 0, last.hash if last else None, new, attempt=attempt)
    if rows:
        await conn.execute(insert(events), [{k: v for k, v in r.items() if k != "payload_json"} for r in rows])
    return rows[-1]["seq"] if rows else (last.seq if last else 0)


class RunLog(StoreBase):
    async def set_status(self, tenant_id: str | None, run_id: str, status: RunStatus, detail: str | None) -> None:
        """Mirror a live status change (paused, waiting for approval, running again)."""
        async with self.engine.begin() as conn:
            await transition_status(conn, tenant_id, run_id, status, detail)

    async def finish_run(
        self,
        tenant_id: str,
        run_id: str,
        status: RunStatus,
        output: str | None,
        error: str | None,
        *,
        interrupted: dict[str, Any] | None = None,
        output_json: Any = None,
    ) -> RunRow:
        """Set the final status once, with a `run_finished` event; a retry changes nothing.
        `interrupted`: the step a cancel came during, logged first as `step_cancelled`;
        `output_json`: a typed answer, parsed (`output` is its text)."""
        payload = {"status": status, "output": output, "error": error}
        if output_json is not None:
            payload["output_json"] = output_json
        async with self.engine.begin() as conn:
            await _transition(
                conn,
                tenant_id,
                run_id,
                EventKind.RUN_FINISHED,
                payload,
                output=output,
                error=error,
                finished_at=func.now(),
                before=[(EventKind.STEP_CANCELLED, interrupted)] if interrupted else [],
                waiting_key=None,
                **({"output_json": output_json} if output_json is not None else {}),
            )
            await leave_lines(conn, run_id)
            # What its model calls still hold goes back to its tree's pool and its tenant's day.
            await conn.execute(delete(budget_reservations).where(budget_reservations.c.run_id == run_id))
            return await self._run(conn, tenant_id, run_id)

    async def record_failed_start(
        self,
        tenant_id: str,
        run_id: str,
        *,
        agent: str,
        task: str,
        model: str,
        error: str,
        parent: ParentRef | None = None,
        priority: int | None = None,
        webhook: str | None = None,
        schedule_id: str | None = None,
    ) -> RunRow:
        """The row of a run that could not start (status `failed`, the reason), with its
        `run_finished` event; a retry, or a run that did start, changes nothing."""
        async with self.engine.begin() as conn:
            created = (
                await conn.execute(
                    insert(runs)
                    .values(
                        run_id=run_id,
                        tenant_id=tenant_id,
                        agent=agent,
                        task=task,
                        model=model,
                        status=RunStatus.FAILED,
                        max_steps=0,
                        error=error,
                        finished_at=func.now(),
                        caller_run_id=parent.run_id if parent else None,
                        caller_step=parent.step if parent else None,
                        caller_call_index=parent.call_index if parent else None,
                        root_run_id=parent.root_run_id if parent else run_id,
                        priority=priority,
                        webhook=webhook,
                        schedule_id=schedule_id,
                    )
                    .on_conflict_do_nothing(index_elements=["run_id"])
                    .returning(runs.c.run_id)
                )
            ).first()
            if created is not None:
                payload = {"status": RunStatus.FAILED, "output": None, "error": error}
                await append_events(conn, run_id, [(0, EventKind.RUN_FINISHED, payload)], locked=True)
            return await self._run(conn, tenant_id, run_id)

    async def record_model_failure(
        self, tenant_id: str, run_id: str, step: int, payload: dict[str, Any], *, attempt: int
    ) -> None:
        """A failed model attempt, as a `model_attempt_failed` event (the run's row must be the tenant's)."""
        async with self.engine.begin() as conn:
            await self._run(conn, tenant_id, run_id, lock=True)
            await append_events(
                conn, run_id, [(step, EventKind.MODEL_ATTEMPT_FAILED, payload)], attempt=attempt, locked=True
            )

    async def record_lost_model_attempt(
        self, tenant_id: str, run_id: str, step: int, payload: dict[str, Any], *, attempt: int
    ) -> None:
        """A model attempt that ended without logging its own failure, as its `model_attempt_failed`
        event; nothing if that attempt logged one (a retry of this write changes nothing either)."""
        async with self.engine.begin() as conn:
            await self._run(conn, tenant_id, run_id, lock=True)
            logged = await conn.execute(
                select(events.c.seq).where(
                    events.c.run_id == run_id,
                    events.c.step == step,
                    events.c.kind == EventKind.MODEL_ATTEMPT_FAILED,
                    events.c.attempt == attempt,
                )
            )
            if logged.first() is None:
                new: list[NewEvent] = [(step, EventKind.MODEL_ATTEMPT_FAILED, payload)]
                await append_events(conn, run_id, new, attempt=attempt, locked=True)

    async def record_failover(self, record: FailoverRecord) -> RunRow:
        """A step's move to the agent's next model, as a `model_failover` event, and the run's row
        moved with it (`current_model`, `models_used`); a retry of the same move (its step, its target)
        changes nothing. Returns the row."""
        payload: dict[str, Any] = {
            "from": record.from_model,
            "to": record.to_model,
            "after_attempts": record.after_attempts,
            "last_error": record.last_error,
            "error_type": record.error_type,
        }
        async with self.engine.begin() as conn:
            run = await self._run(conn, record.tenant_id, record.run_id, lock=True)
            logged = await conn.execute(
                select(events.c.seq).where(
                    events.c.run_id == record.run_id,
                    events.c.step == record.step,
                    events.c.kind == EventKind.MODEL_FAILOVER,
                    events.c.payload["to"].astext == record.to_model,
                )
            )
            if logged.first() is not None:
                return run
            new: list[NewEvent] = [(record.step, EventKind.MODEL_FAILOVER, payload)]
            await append_events(conn, record.run_id, new, locked=True)
            used = run.models_used if record.to_model in run.models_used else [*run.models_used, record.to_model]
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == record.run_id)
                .values(current_model=record.to_model, models_used=used, updated_at=func.now())
            )
            return await self._run(conn, record.tenant_id, record.run_id)


async def transition_status(
    conn: AsyncConnection, tenant_id: str | None, run_id: str, status: RunStatus, detail: str | None
) -> None:
    """A live status change of an unfinished run, with its `status_changed` event (none if it has it already)."""
    payload = {"status": status, "detail": detail}
    waiting_key = detail if status == RunStatus.WAITING_CAPACITY else None
    await _transition(
        conn, tenant_id, run_id, EventKind.STATUS_CHANGED, payload, runs.c.status != status, waiting_key=waiting_key
    )


async def _transition(
    conn: AsyncConnection,
    tenant_id: str | None,
    run_id: str,
    kind: EventKind,
    payload: dict[str, Any],
    *where: Any,
    before: list[tuple[EventKind, dict[str, Any]]] | None = None,
    **values: Any,
) -> None:
    """Move an unfinished run to `payload["status"]` and log it, after the events `before`; a finished
    run (or a retry) is left as it is."""
    changed = (
        await conn.execute(
            update(runs)
            .where(run_filter(tenant_id, run_id), runs.c.status.not_in(list(FINISHED)), *where)
            .values(status=payload["status"], updated_at=func.now(), **values)
            .returning(runs.c.steps)
        )
    ).first()
    if changed is not None:
        logged = [(changed.steps, k, p) for k, p in before or []]
        await append_events(conn, run_id, [*logged, (changed.steps, kind, payload)])
