"""A model attempt that ends without an answer (its worker died, or it sent no heartbeat within the
timeout) is logged like any failed attempt: the next attempt writes its `model_attempt_failed`
event, once, so a run's log counts every request the provider may have billed."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from temporalio.client import Client

from tests.helpers import rows
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import EventKind
from waypoint.store.schema import events

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


async def test_an_attempt_that_missed_its_heartbeat_is_logged_by_the_next(
    client: Client, engine: AsyncEngine, settings: Settings, worker
) -> None:
    wp = Waypoint(client, engine, settings)
    task = f"stall {uuid.uuid4().hex[:8]}"
    run_id = await wp.start_run(task, agent="staller")
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", f"done: {task}")
    logged = await rows(engine, events, run_id, events.c.seq)
    failed = [e for e in logged if e.kind == EventKind.MODEL_ATTEMPT_FAILED]
    assert [(e.step, e.attempt, e.payload["type"]) for e in failed] == [(1, 1, "AttemptLost")]
    assert "sent no heartbeat within 2 s" in failed[0].payload["error"]
    # The step is recorded once, with the answer of the attempt that answered.
    answers = [e for e in logged if e.kind == EventKind.MODEL_RESPONSE]
    assert [(e.step, e.payload["attempt"]) for e in answers] == [(1, 2)]
