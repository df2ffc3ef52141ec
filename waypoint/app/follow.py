"""Following a run as it goes: print each step as it lands in Postgres, until the run ends."""

from __future__ import annotations

import asyncio
import json

from waypoint.app import console as out
from waypoint.app.client import Waypoint
from waypoint.errors import NotFound, WaypointError
from waypoint.names import FINISHED
from waypoint.store.rows import RunRow, as_json


async def follow(wp: Waypoint, run_id: str, *, as_json_lines: bool = False, poll_seconds: float = 0.3) -> RunRow:
    """Print steps as they land until the run ends; returns the final run row."""
    shown = 0
    gateway = await wp.temporal()
    with out.console.status(f"waiting for a worker to start {run_id}...") as spinner:
        while True:
            try:
                run = await wp.run(run_id)
            except NotFound:
                ended = await gateway.ended_without_row(run_id)  # e.g. it could not start: no row will come
                if ended is not None:
                    raise WaypointError(ended) from None
                await asyncio.sleep(poll_seconds)
                continue
            for line in await wp.timeline(run_id, after_step=shown):
                if as_json_lines:
                    print(json.dumps(as_json(line)), flush=True)
                else:
                    out.console.print(out.step_text(line))
                shown = line.step
            if run.status in FINISHED:
                return run
            spinner.update(f"{run_id}: step {shown + 1} running...")
            await asyncio.sleep(poll_seconds)
