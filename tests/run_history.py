"""What a run's Temporal history shows about it, for tests that prove something did not happen
without waiting on the clock."""

from __future__ import annotations

import json

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from waypoint.names import Activity, Update


def _update(event: HistoryEvent) -> str | None:
    if not event.HasField("workflow_execution_update_accepted_event_attributes"):
        return None
    return event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name


def _work(event: HistoryEvent) -> str | None:
    """The activity an event starts or records: a scheduled activity, or a local activity's marker."""
    if event.HasField("activity_task_scheduled_event_attributes"):
        return event.activity_task_scheduled_event_attributes.activity_type.name
    if event.HasField("marker_recorded_event_attributes"):
        data = event.marker_recorded_event_attributes.details.get("data")
        if data is not None and data.payloads:
            return json.loads(data.payloads[0].data).get("activity_type")
    return None


async def done_while_paused(client: Client, run_id: str) -> list[str]:
    """What the run did between writing its pause (its first status write after it took its last
    pause) and taking the resume that followed: the activities it scheduled and local activities it
    ran, none if it held still. Proved by order, not time: the status write is a local activity,
    whose marker lands in the same workflow task completion as whatever the workflow did next, so
    a step started while paused lies before the resume however soon the resume came."""
    events = [e async for e in client.get_workflow_handle(run_id).fetch_history_events()]
    resumes = [i for i, e in enumerate(events) if _update(e) == Update.RESUME]
    assert resumes, f"run {run_id} took no resume"
    pauses = [i for i, e in enumerate(events[: resumes[-1]]) if _update(e) == Update.PAUSE]
    assert pauses, f"run {run_id} took no pause before its resume"
    writes = [i for i in range(pauses[-1], resumes[-1]) if _work(events[i]) == Activity.SET_STATUS]
    assert writes, f"run {run_id} wrote no status between its pause and its resume: it never paused"
    return [work for e in events[writes[0] + 1 : resumes[-1]] if (work := _work(e)) is not None]
