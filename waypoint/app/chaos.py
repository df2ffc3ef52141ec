"""`waypoint demo --chaos`: the demo run meets the failures of production, and Postgres shows it survived.

- The model is the chaos agent's script played over HTTP by a local
  OpenAI-compatible server, which fails the first attempt of two steps: a 503
  with a short `retry-after-ms`, then a 429 with `Retry-After: 1`.
- The worker is a separate process. While the slow `archive_report` tool runs,
  the demo SIGKILLs it and starts another, which takes the call over once the
  dead worker's heartbeats stop.
- At the end, checks read from Postgres: a checkpoint for every step, one
  ledger row per tool call, and the archive appended exactly once.

The workers poll a task queue of their own, so a `waypoint dev` running in the
same state folder keeps its worker and never sees the chaos run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from rich.table import Table

from waypoint.app import console as out
from waypoint.app.devstack import prepare_database, spawn_worker
from waypoint.app.follow import follow
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.demo import ARCHIVE_ATTEMPTS, ARCHIVE_LOG, CHAOS_AGENT, DEMO_TASK, seed_workspace
from waypoint.demo_chaos import demo_chaos
from waypoint.errors import WaypointError
from waypoint.gateway.temporal import connect
from waypoint.models.scripted import ScriptedModel
from waypoint.names import LOST_ATTEMPT, EventKind, RunStatus, idempotency_key
from waypoint.retry import HEARTBEAT_TIMEOUT
from waypoint.store import RunStore
from waypoint.store.ledger import Effect
from waypoint.store.reads import StepLine
from waypoint.store.rows import RunRow
from waypoint.testing.fake_openai import FakeOpenAI, Reply, Turn

CHAOS_MODEL = "openai:waypoint-chaos"
# Only the first attempt of these steps fails, so the retry succeeds and every run prints the same story.
FAILURES: dict[int, Reply] = {
    2: Reply(503, {"error": {"message": "overloaded, try again", "type": "server_error"}}, {"retry-after-ms": "100"}),
    4: Reply(429, {"error": {"message": "rate limit reached", "type": "rate_limit_error"}}, {"retry-after": "1"}),
}
RUN_TIMEOUT = 120.0  # seconds; the run takes about 15
KILL_AFTER = 1.0  # seconds into the archive_report call


class FlakyProvider:
    """A FakeOpenAI responder: a scripted model's turns over HTTP, with the first attempt of some steps failing."""

    def __init__(self, model: ScriptedModel, failures: dict[int, Reply]):
        self.model = model
        self.failures = failures
        self.attempts: Counter[int] = Counter()
        self._lock = threading.Lock()  # the server answers every request on its own thread

    def __call__(self, body: dict[str, Any], n: int) -> Turn | Reply:
        messages = body.get("messages") or []
        # Every step adds one assistant message to the context.
        step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        with self._lock:
            self.attempts[step] += 1
            attempt = self.attempts[step]
        if attempt == 1 and step in self.failures:
            return self.failures[step]
        try:
            # The server thread has no event loop, and a script may be async.
            turn = asyncio.run(self.model.complete(messages, body.get("tools") or [], step=step))
        except Exception as exc:  # a 4xx is not retried, so a bug in the script fails the run with its message
            return Reply(400, {"error": {"message": f"the chaos script failed: {exc!r}", "type": "invalid_request"}})
        return Turn(
            content=turn.content,
            tool_calls=[(c.name, json.loads(c.arguments)) for c in turn.tool_calls],
            prompt_tokens=turn.usage.input_tokens,
            completion_tokens=turn.usage.output_tokens,
        )


def worker_env(settings: Settings, *, task_queue: str, qdrant_path: Path, base_url: str) -> dict[str, str]:
    """The environment of a chaos worker: these settings, none of the user's Waypoint or OpenAI variables."""
    chaos = settings.model_copy(
        update={
            "state_dir": Path(settings.state_dir).resolve(),
            "task_queue": task_queue,
            "workspace": settings.resolved_workspace,
            "qdrant_path": qdrant_path,
            "agents": "waypoint.demo_chaos",
            "openai_base_url": base_url,
            "openai_api_key": SecretStr("chaos-demo-key"),  # the local server checks none; the SDK wants one
        }
    )
    return chaos.child_environment()


@dataclass
class Workers:
    """The chaos worker processes: the one that gets killed, then its replacement."""

    env: dict[str, str]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)

    @property
    def current(self) -> subprocess.Popen[str]:
        return self.procs[-1]

    async def spawn(self) -> subprocess.Popen[str]:
        proc = await asyncio.to_thread(spawn_worker, self.env)
        self.procs.append(proc)
        return proc

    async def kill(self) -> int:
        proc = self.current
        self.killed.add(proc.pid)
        proc.kill()  # SIGKILL: no graceful shutdown, no last heartbeat, as when a machine dies
        await asyncio.to_thread(proc.wait)
        return proc.pid

    def check_alive(self) -> None:
        proc = self.current
        if proc.poll() is not None and proc.pid not in self.killed:
            raise WaypointError(
                f"chaos worker {proc.pid} exited by itself (code {proc.returncode}): run `waypoint worker` to see why"
            )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class Crash:
    """What the demo did to the run, on the demo's clock."""

    step: int = 0
    killed_pid: int = 0
    killed_at: datetime | None = None
    resumed_pid: int = 0
    resumed_at: datetime | None = None


def archive_attempts(workspace: Path, run_id: str) -> list[tuple[str, int, int]]:
    """(idempotency key, attempt, worker pid) of each archive_report attempt of the run, as the tool logged it."""
    path = workspace / ARCHIVE_ATTEMPTS
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split()
        if len(parts) == 5 and parts[0].startswith(f"{run_id}:"):  # a line still being written has fewer
            found.append((parts[0], int(parts[2]), int(parts[4])))
    return found


def archived_keys(workspace: Path, run_id: str) -> list[str]:
    path = workspace / ARCHIVE_LOG
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split(" ", 1)[0] for line in lines if line.startswith(f"{run_id}:")]


async def crash_during_archive(run_id: str, workspace: Path, workers: Workers, crash: Crash) -> None:
    """Kill the worker once archive_report runs, start another, and watch it take the call over."""
    while not (seen := archive_attempts(workspace, run_id)):
        workers.check_alive()
        await asyncio.sleep(0.05)
    crash.step = int(seen[0][0].split(":")[-2])
    # Well inside the 3-second call, and late enough for the follower to have shown the previous step.
    await asyncio.sleep(KILL_AFTER)
    crash.killed_pid = await workers.kill()
    crash.killed_at = datetime.now().astimezone()
    out.console.print(f"[red]worker {crash.killed_pid} killed (SIGKILL) during archive_report[/red], step {crash.step}")
    new = await workers.spawn()
    out.console.print(
        f"new worker {new.pid} polls the same task queue and opened the same Qdrant shard; Temporal hands it "
        f"archive_report once the dead worker's heartbeats stop ({HEARTBEAT_TIMEOUT.total_seconds():g} s)"
    )
    while len(seen := archive_attempts(workspace, run_id)) < 2:
        workers.check_alive()
        await asyncio.sleep(0.05)
    _, attempt, crash.resumed_pid = seen[-1]
    crash.resumed_at = datetime.now().astimezone()
    out.console.print(f"[green]resumed: archive_report attempt {attempt} runs on worker {crash.resumed_pid}[/green]")
    while True:  # until the run ends, so a worker that dies by itself does not leave the demo waiting
        workers.check_alive()
        await asyncio.sleep(0.2)


async def follow_with(wp: Waypoint, run_id: str, meddle: Coroutine[Any, Any, None]) -> RunRow:
    """Follow the run to its end while `meddle` runs beside it; returns the final run row."""
    following = asyncio.create_task(follow(wp, run_id))
    chaos = asyncio.create_task(meddle)
    try:
        async with asyncio.timeout(RUN_TIMEOUT):
            await asyncio.wait({following, chaos}, return_when=asyncio.FIRST_COMPLETED)
    except TimeoutError:
        raise WaypointError(f"the chaos run did not end within {RUN_TIMEOUT:g} s") from None
    finally:
        for task in (following, chaos):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    if not following.cancelled():
        return following.result()
    chaos.result()  # a worker died by itself: raise why
    raise WaypointError("the chaos demo stopped before the run ended")


@dataclass
class Evidence:
    """What Postgres holds about the run."""

    steps: list[int]  # of its checkpoints
    calls: dict[str, str]  # idempotency key -> tool, from the model's answers
    ledger: list[Effect]  # its tool_effects rows
    failures: list[tuple[int, datetime, dict[str, Any]]]  # model_attempt_failed events


async def gather_evidence(store: RunStore, tenant_id: str, run_id: str) -> Evidence:
    steps = await store.integrity.checkpoint_steps(tenant_id, run_id)
    kinds = [EventKind.MODEL_RESPONSE, EventKind.MODEL_ATTEMPT_FAILED]
    logged = await store.travel.events(tenant_id, run_id, kinds=kinds)
    ledger = await store.ledger.effects(tenant_id, run_id)
    calls = {
        idempotency_key(run_id, e.step, i): call["name"]
        for e in logged
        if e.kind == EventKind.MODEL_RESPONSE
        for i, call in enumerate(e.payload["tool_calls"])
    }
    failures = [(e.step, e.created_at, e.payload) for e in logged if e.kind == EventKind.MODEL_ATTEMPT_FAILED]
    return Evidence(steps=steps, calls=calls, ledger=ledger, failures=failures)


def _clock(at: datetime) -> str:
    return at.astimezone().strftime("%H:%M:%S")


def timeline(lines: list[StepLine], evidence: Evidence, crash: Crash) -> Table:
    """The steps, with each model retry, the crash and the resume where they happened."""
    rows: list[tuple[int, int, str, str]] = []  # (step, order within the step, time, event)
    for step, at, failure in evidence.failures:
        delay = failure.get("retry_in_seconds")
        after = f" after {delay:g} s" if delay is not None else ""
        if failure.get("type") == LOST_ATTEMPT:  # no answer at all: the worker stopped, or missed its heartbeat
            text = f"[yellow]model call attempt {failure.get('attempt')} lost (no heartbeat), retried[/yellow]"
        else:
            text = f"[yellow]model answered {failure['status']}, retried{after}[/yellow]"
        rows.append((step, 0, _clock(at), text))
    if crash.killed_at is not None:
        text = f"[red]worker killed during archive_report[/red] (pid {crash.killed_pid}, SIGKILL)"
        rows.append((crash.step, 1, _clock(crash.killed_at), text))
    if crash.resumed_at is not None:
        attempt = next((r.attempt for r in evidence.ledger if r.tool == "archive_report"), "?")
        text = f"[green]resumed on a new worker ({crash.resumed_pid}): archive_report attempt {attempt}[/green]"
        rows.append((crash.step, 2, _clock(crash.resumed_at), text))
    for line in lines:
        what = f"tools: {out.tool_summary(line.tools)}" if line.tools else f"answer: {line.answer}"
        rows.append((line.step, 3, _clock(line.at), what))
    ordered = sorted(rows, key=lambda r: r[:2])  # stable: retries keep their order
    return out.columns(
        "What happened", ("step", "time", "event"), [(str(s), c, w) for s, _, c, w in ordered], wrap="event"
    )


def checks(row: RunRow, evidence: Evidence, crash: Crash, workspace: Path) -> list[tuple[bool, str]]:
    """Durability, as (passed, what) pairs read from Postgres and the archive."""
    run_id, steps = row.run_id, row.steps
    keys = [r.idempotency_key for r in evidence.ledger]
    archive_calls = sorted(k for k, tool in evidence.calls.items() if tool == "archive_report")
    archived = archived_keys(workspace, run_id)
    finished = [r.attempt for r in evidence.ledger if r.tool == "archive_report"]
    # The failures the demo's provider answered; an attempt lost on a loaded machine (a missed
    # heartbeat) is logged too, and retried like any, but it is not one the demo injects.
    answered = [(step, failure) for step, _, failure in evidence.failures if failure.get("type") != LOST_ATTEMPT]
    failed = {step: failure["status"] for step, failure in answered}
    expected = {step: reply.status for step, reply in FAILURES.items()}
    return [
        (row.status == RunStatus.COMPLETED, f"run {row.status} after {steps} steps"),
        (
            evidence.steps == list(range(steps + 1)),
            f"checkpoints: steps {', '.join(map(str, evidence.steps))} (contiguous from 0 to {steps})",
        ),
        (
            failed == expected and len(answered) == len(expected),
            "model failures recorded, each retried once: "
            + (", ".join(f"{status} at step {step}" for step, status in failed.items()) or "none"),
        ),
        (
            crash.killed_pid != 0 and bool(finished) and finished[0] > 1,
            f"worker killed during archive_report; the call finished on attempt {finished[0] if finished else '-'}",
        ),
        (
            sorted(keys) == sorted(evidence.calls) and len(set(keys)) == len(keys),
            f"tool ledger: {len(keys)} rows for {len(evidence.calls)} tool calls, one per idempotency key",
        ),
        (
            bool(archive_calls) and sorted(archived) == archive_calls,
            f"archive_report effect applied exactly once: {len(archive_calls)} call(s), "
            f"{len(archive_attempts(workspace, run_id))} attempts, {len(archived)} line(s) in {ARCHIVE_LOG}",
        ),
    ]


async def chaos_demo(settings: Settings, started: float, *, shared_stack: bool) -> None:
    workspace = settings.resolved_workspace
    seed_workspace(workspace)
    engine = await prepare_database(settings.database_url or "")
    queue = f"waypoint-chaos-{uuid.uuid4().hex[:8]}"
    # An embedded Qdrant shard admits one process. A `waypoint dev` worker holds the state folder's,
    # so ours get another; otherwise the replacement reopens the killed worker's (its lock died with it).
    qdrant = Path(settings.state_dir).resolve() / "qdrant-chaos" if shared_stack else settings.resolved_qdrant_path
    assert isinstance(demo_chaos.model, ScriptedModel)
    provider = FakeOpenAI(FlakyProvider(demo_chaos.model, FAILURES)).start()
    workers = Workers(worker_env(settings, task_queue=queue, qdrant_path=qdrant, base_url=provider.base_url))
    try:
        with out.console.status("starting a worker process..."):
            first = await workers.spawn()
        out.console.print(f"worker {first.pid} polls task queue {queue} (Qdrant shard {qdrant})")
        out.console.print(
            f"model {CHAOS_MODEL} at {provider.base_url}: "
            + ", ".join(f"HTTP {r.status} on the first call of step {s}" for s, r in FAILURES.items())
        )
        client = await connect(settings)
        wp = Waypoint(client, engine, settings.model_copy(update={"task_queue": queue}))
        run_id = await wp.start_run(DEMO_TASK, agent=CHAOS_AGENT, model=CHAOS_MODEL)
        out.console.print(f"started [bold]{run_id}[/bold]: {DEMO_TASK}")
        crash = Crash()
        row = await follow_with(wp, run_id, crash_during_archive(run_id, workspace, workers, crash))
        evidence = await gather_evidence(RunStore(engine), settings.tenant, run_id)
        out.console.print(timeline(await wp.timeline(run_id), evidence, crash))
        results = checks(row, evidence, crash, workspace)
        out.console.print("[bold]Checks[/bold] (read from Postgres and the archive log)")
        for passed, what in results:
            out.console.print(f"  {'[green]PASS[/green]' if passed else '[red]FAIL[/red]'}  {what}")
        out.console.print(f"[dim]chaos demo took {time.monotonic() - started:.1f} s[/dim]")
        failed = sum(not passed for passed, _ in results)
        if failed:
            raise WaypointError(f"{failed} of {len(results)} chaos checks failed")
    finally:
        workers.stop()
        provider.stop()
        await engine.dispose()
        if shared_stack:  # the chaos workers' own shard, beside the dev worker's: nothing else reads it
            shutil.rmtree(qdrant, ignore_errors=True)
