"""Following a run as it goes: print each step as it lands in Postgres, until the run ends.

A step shows the moment it lands: following listens for the log's notifications (the channel
the HTTP streams use) and polls only as a fallback, when listening is not possible.
When nothing lands for a few seconds it asks Temporal why (no worker polls the queue, workflow
tasks keep failing, an activity keeps failing) and says so once while it lasts (not once per
attempt), with the fix, and keeps waiting.
Ctrl-C stops following, not the run, and says how to follow it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator

from waypoint.app import console as out
from waypoint.client import Waypoint, as_json
from waypoint.errors import NotFound, WaypointError
from waypoint.names import FINISHED
from waypoint.store.listen import Listener
from waypoint.store.rows import RunRow
from waypoint.store.streams import EVENTS_CHANNEL

# Seconds without a new step before following asks Temporal what blocks the run (and between asks).
QUIET_SECONDS = 3.0


async def follow(wp: Waypoint, run_id: str, *, as_json_lines: bool = False, poll_seconds: float = 1.0) -> RunRow:
    """Print steps as they land until the run ends; returns the final run row."""
    try:
        return await _follow(wp, run_id, as_json_lines, poll_seconds)
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels this task, then raises KeyboardInterrupt
        print(
            f"stopped following {run_id}; the run goes on. Follow it again with `waypoint status {run_id} --follow`",
            file=sys.stderr,
        )
        raise


@contextlib.asynccontextmanager
async def log_grew(wp: Waypoint, run_id: str) -> AsyncIterator[asyncio.Event]:
    """An event set whenever the run's log grows (a Postgres notification); never set when the
    database cannot LISTEN (a pooler in transaction mode, say): following then polls."""
    moved = asyncio.Event()

    def on_events(payload: str) -> None:
        if payload.rsplit(" ", 2)[0] == run_id:
            moved.set()

    listener: Listener | None = None
    try:
        url = wp.engine.url.render_as_string(hide_password=False)
        listener = await Listener(url, {EVENTS_CHANNEL: on_events}, on_reconnect=moved.set).start()
    except Exception as exc:  # polling still follows the run, only later
        print(f"note: following by polling ({type(exc).__name__}: {exc})", file=sys.stderr)
    try:
        yield moved
    finally:
        if listener is not None:
            await listener.close()


def say_model(before: str, run: RunRow, as_json_lines: bool) -> None:
    """A line when the run moves to another model (a failover, or back to one that recovered): with
    `--json`, `{"model": ..., "from": ..., "models_used": [...]}`, told from a step's line by its keys."""
    if as_json_lines:
        print(json.dumps({"model": run.current_model, "from": before, "models_used": run.models_used}), flush=True)
    else:
        out.console.print(out.model_switch_text(before, run))


async def _follow(wp: Waypoint, run_id: str, as_json_lines: bool, poll_seconds: float) -> RunRow:
    shown = 0
    gateway = await wp.temporal()
    quiet_since = asked_at = time.monotonic()
    said: set[str] = set()
    on_model: str | None = None  # the model last shown: the one it started on, until a failover moves it
    async with log_grew(wp, run_id) as moved:
        with out.console.status(f"waiting for a worker to start {run_id}...") as spinner:
            while True:
                moved.clear()  # before the read: a notification during it wakes the next wait
                try:
                    run = await wp.run(run_id)
                except NotFound:
                    ended = await gateway.ended_without_row(run_id)  # e.g. it could not start: no row will come
                    if ended is not None:
                        raise WaypointError(ended) from None
                    run = None
                if run is not None and on_model != run.current_model:
                    if on_model is not None or run.current_model != run.model:
                        say_model(on_model or run.model, run, as_json_lines)
                    on_model = run.current_model
                for line in await wp.timeline(run_id, after_step=shown) if run is not None else []:
                    if as_json_lines:
                        print(json.dumps(as_json(line)), flush=True)
                    else:
                        out.console.print(out.step_text(line))
                    shown = line.step
                    quiet_since = time.monotonic()
                    said.clear()  # the run moved: a problem that comes back is new
                if run is not None and run.status in FINISHED:
                    return run
                now = time.monotonic()
                if now - quiet_since > QUIET_SECONDS and now - asked_at > QUIET_SECONDS:
                    asked_at = now
                    problem = await gateway.blocked(run_id)
                    if problem is not None and problem.what not in said:  # once while it lasts, not per attempt
                        said.add(problem.what)
                        warning = f"warning: {problem.message}; still waiting (Ctrl-C stops following, not the run)"
                        print(warning, file=sys.stderr)
                spinner.update(f"{run_id}: step {shown + 1} running...")
                with contextlib.suppress(TimeoutError):
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for drops a cancel (Ctrl-C) that
                    # lands as the event is set, and following would go on
                    async with asyncio.timeout(poll_seconds):
                        await moved.wait()
