"""Experiments against plain rerun batches of the same runs, and an experiment whose worker is SIGKILLed halfway.

    python benchmarks/evals.py [--cases 200] [--concurrency 8] [--rounds 2] [--quick]

Run it as a file: the agent module (`_echo_agent.py`) is imported from this folder, by the worker too.
One embedded stack (Temporal and Postgres in a temporary folder, on free ports) and one `waypoint
worker` process serving `bench-evals` (`_echo_agent.py`: 3 steps that each call `echo`, then the
answer "done"; the model is the scripted one, so it takes no time). `--cases` runs of it are
recorded, `--concurrency` at a time, and a dataset is made of them (`wp.evals.create_dataset` with
their ids). Then, `--rounds` times in turn (A B A B: the machine is noisy):

- A: `wp.rerun_batch("agent=bench-evals", tools="recorded")` reruns every recorded run (the selection
  leaves reruns and experiment runs out), `--concurrency` at a time, and compares each with its source;
- B: an experiment on the dataset with recorded tools, the same concurrency and the scorers `exact`
  and `trajectory` (`wp.evals.start_experiment`, followed to its end by `wp.evals.wait`).

Last, one more experiment: once half its cases have results, the worker gets SIGKILL and a new one
starts at once. Counted after: results written before the kill, results written twice (the table's
key forbids it), case runs (runs tagged with the experiment id) against cases, case runs whose
checkpoints or steps differ from their source's, case runs with more than one `run_started` event,
finished cases lost (a result from before the kill missing or naming another run after it), and the
time lost: the killed experiment's wall minus the clean experiments' median. Any count that must
be 0 and is not makes the exit code 1.

An experiment's wall is from the client's start call to the `finished_at` its workflow writes; a
batch's is the client's call (it returns once every rerun is compared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _echo_agent import EVALS_AGENT, EVALS_STEPS
from rich.console import Console
from rich.table import Table
from sqlalchemy import text

from waypoint.app.devstack import prepare_database, spawn_worker
from waypoint.app.embedded import EmbeddedStack
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import CaseStatus, EventKind, ExperimentStatus, RunStatus
from waypoint.testing import embedded_stack

HERE = Path(__file__).resolve().parent
AGENT = EVALS_AGENT.name
DATASET = "bench-evals"
SCORERS = ("exact", "trajectory")
OVERHEAD_TARGET = 1.1  # an experiment at most this many times the rerun batch of the same runs
POLL_S = 0.05  # how often the killer reads the experiment's progress
QUICK = {"cases": 20}
console = Console(width=150)

# Of a batch's or an experiment's runs (tagged with its id): how many, how many do not match their
# source run in checkpoints or steps, how many logged `run_started` more than once (a run started twice).
RUNS_CHECK = text(
    """
    SELECT count(*) AS runs,
           count(*) FILTER (WHERE r.steps <> p.steps OR
               (SELECT count(*) FROM checkpoints c WHERE c.run_id = r.run_id) <>
               (SELECT count(*) FROM checkpoints c WHERE c.run_id = p.run_id)) AS differ,
           count(*) FILTER (WHERE
               (SELECT count(*) FROM events e WHERE e.run_id = r.run_id AND e.kind = :started) > 1) AS twice,
           avg(extract(epoch FROM r.finished_at - r.created_at)) * 1000 AS run_ms
    FROM runs r JOIN runs p ON p.run_id = r.parent_run_id
    WHERE r.batch_id = :batch
    """
)
RESULTS = text("SELECT idx, repetition, run_id FROM experiment_results WHERE experiment_id = :exp")
WRITTEN_TWICE = text(
    "SELECT count(*) FROM (SELECT 1 FROM experiment_results WHERE experiment_id = :exp "
    "GROUP BY idx, repetition HAVING count(*) > 1) AS twice"
)
NEXT_RESULT = text(
    "SELECT extract(epoch FROM min(created_at)) FROM experiment_results "
    "WHERE experiment_id = :exp AND created_at > to_timestamp(:at)"
)


@dataclass
class Measured:
    """One batch or experiment: its wall time and what its runs' rows say."""

    wall: float
    ok: int  # reruns completed (a batch: and matched their source); cases scored (an experiment)
    runs: int = 0
    differ: int = 0
    twice: int = 0
    run_ms: float = 0.0  # a run's own time, mean: its row's created_at (its start_run) to finished_at
    scores: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Killed:
    """The experiment whose worker was killed halfway."""

    run: Measured
    before: int  # results written before the kill
    written_twice: int
    lost: int
    restart_s: float  # the new worker's start, to its "worker ready" line
    next_result_s: float | None  # from the kill to the next result written


class Worker:
    """The one `waypoint worker` process (replaced after a kill); `stop` ends whichever is running."""

    def __init__(self, settings: Settings, tmp: Path):
        self.settings, self.tmp = settings, tmp
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0

    async def start(self) -> float:
        pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
        # Each process its own Qdrant folder: a new worker never waits on the dead one's lock.
        env = self.settings.child_environment(
            PYTHONPATH=pythonpath, WAYPOINT_QDRANT_PATH=str(self.tmp / f"qdrant-{self.started}")
        )
        self.started += 1
        began = time.monotonic()
        self.proc = await asyncio.to_thread(spawn_worker, env, timeout=120)
        return time.monotonic() - began

    def kill(self) -> float:
        """SIGKILL: no graceful shutdown, nothing reported to Temporal. Returns the time of the kill."""
        assert self.proc is not None
        self.proc.kill()
        at = time.time()
        self.proc.wait()
        return at

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def runs_check(wp: Waypoint, batch: str) -> tuple[int, int, int, float]:
    async with wp.engine.connect() as conn:
        row = (await conn.execute(RUNS_CHECK, {"batch": batch, "started": EventKind.RUN_STARTED.value})).one()
    return int(row.runs), int(row.differ), int(row.twice), float(row.run_ms or 0.0)


async def seed(wp: Waypoint, args: argparse.Namespace) -> tuple[list[str], float]:
    gate = asyncio.Semaphore(args.concurrency)

    async def one(n: int) -> str:
        async with gate:
            run_id = await wp.start_run(f"echo benchmark case {n}", agent=AGENT)
            if (await wp.result(run_id)).status != RunStatus.COMPLETED:
                raise RuntimeError(f"recorded run {run_id} did not complete")
            return run_id

    began = time.monotonic()
    run_ids = await asyncio.gather(*(one(n) for n in range(args.cases)))
    return list(run_ids), time.monotonic() - began


async def batch(wp: Waypoint, args: argparse.Namespace, sources: set[str]) -> Measured:
    began = time.monotonic()
    report = await wp.rerun_batch(f"agent={AGENT}", limit=args.cases, concurrency=args.concurrency, tools="recorded")
    wall = time.monotonic() - began
    if {i.source_run_id for i in report.items} != sources:
        raise RuntimeError("the batch's selection is not the recorded runs: the benchmark's stack is not its own")
    ok = sum(i.status == RunStatus.COMPLETED and not i.diverged for i in report.items)
    return Measured(wall, ok, *await runs_check(wp, report.batch_id))


async def start(wp: Waypoint, args: argparse.Namespace) -> tuple[str, float]:
    began = time.time()  # the end is the workflow's finished_at, a wall-clock time
    exp = await wp.evals.start_experiment(
        DATASET, agent=AGENT, recorded_tools=True, concurrency=args.concurrency, scorers=SCORERS
    )
    return exp.experiment_id, began


def timeout(args: argparse.Namespace) -> float:
    # An experiment that stops moving (a worker whose workflow code broke, say) fails the benchmark
    # instead of hanging it; a clean one here takes well under a second a case.
    return 120 + 3 * args.cases


async def finish(wp: Waypoint, args: argparse.Namespace, experiment_id: str, began: float) -> Measured:
    report = await wp.evals.wait(experiment_id, timeout=timeout(args))
    exp = report.experiment
    if exp.status != ExperimentStatus.COMPLETED or exp.finished_at is None:
        raise RuntimeError(f"experiment {experiment_id} ended {exp.status}: {exp.error}")
    ok = sum(r.status == CaseStatus.SCORED for r in report.results)
    scores = {s.scorer: s.mean for s in report.summary.scorers}
    return Measured(exp.finished_at.timestamp() - began, ok, *await runs_check(wp, experiment_id), scores)


async def experiment(wp: Waypoint, args: argparse.Namespace) -> Measured:
    return await finish(wp, args, *await start(wp, args))


async def killed(wp: Waypoint, args: argparse.Namespace, worker: Worker) -> Killed:
    experiment_id, began = await start(wp, args)
    deadline = time.time() + timeout(args)
    while (await wp.evals.experiment(experiment_id)).done < args.cases // 2:
        if time.time() > deadline:
            raise RuntimeError(f"experiment {experiment_id} did not get to half its cases in {timeout(args)} s")
        await asyncio.sleep(POLL_S)
    at = worker.kill()
    async with wp.engine.connect() as conn:
        before = {(r.idx, r.repetition): r.run_id for r in await conn.execute(RESULTS, {"exp": experiment_id})}
    restart = await worker.start()
    run = await finish(wp, args, experiment_id, began)
    async with wp.engine.connect() as conn:
        after = {(r.idx, r.repetition): r.run_id for r in await conn.execute(RESULTS, {"exp": experiment_id})}
        twice = int((await conn.execute(WRITTEN_TWICE, {"exp": experiment_id})).scalar_one())
        first = (await conn.execute(NEXT_RESULT, {"exp": experiment_id, "at": at})).scalar_one()
    lost = sum(after.get(key) != run_id for key, run_id in before.items())
    return Killed(run, len(before), twice, lost, restart, None if first is None else float(first) - at)


def per_min(n: int, wall: float) -> str:
    return f"{n / wall * 60:,.0f}"


def report(
    args: argparse.Namespace, seeded: float, batches: list[Measured], exps: list[Measured], crash: Killed
) -> bool:
    n = args.cases
    table = Table(
        title=f"{n} recorded runs of {EVALS_STEPS + 1} steps ({EVALS_STEPS} echo calls), scripted model, "
        f"{args.concurrency} at a time, one worker process; recording them took {seeded:.1f} s "
        f"({per_min(n, seeded)} runs/min)",
        title_justify="left",
    )
    for col in ("", "rerun batch", "experiment", "experiment, worker killed"):
        table.add_column(col, justify="left" if not col else "right")
    b_med = statistics.median(m.wall for m in batches)
    e_med = statistics.median(m.wall for m in exps)
    for i, (b, e) in enumerate(zip(batches, exps, strict=True), 1):
        table.add_row(f"wall s, round {i}", f"{b.wall:.1f}", f"{e.wall:.1f}", "-")
    table.add_row("wall s, median", f"{b_med:.1f}", f"{e_med:.1f}", f"{crash.run.wall:.1f}")
    table.add_row("runs or cases / min, median", per_min(n, b_med), per_min(n, e_med), per_min(n, crash.run.wall))
    for i, (b, e) in enumerate(zip(batches, exps, strict=True), 1):
        table.add_row(f"x the batch, round {i}", "-", f"{e.wall / b.wall:.2f}x", "-")
    table.add_row("x the batch, median", "-", f"{e_med / b_med:.2f}x", f"{crash.run.wall / b_med:.2f}x")

    def each(label: str, cell: Callable[[Measured], str]) -> None:
        """A row of what every round's batch and experiment, and the killed one, counted (rounds: a/b)."""
        rounds = [
            "/".join(cells) if set(cells) != {"-"} else "-"
            for cells in ([cell(m) for m in ms] for ms in (batches, exps))
        ]
        table.add_row(label, *rounds, cell(crash.run))

    each(f"completed and matched / scored, of {n}", lambda m: str(m.ok))
    for scorer in SCORERS:
        each(f"{scorer} mean", lambda m, s=scorer: "-" if m.scores.get(s) is None else f"{m.scores[s]:.2f}")
    each("run ms, mean (start_run to finished)", lambda m: f"{m.run_ms:.0f}")
    each(
        f"ms a slot holds a case outside its run (wall x {args.concurrency} / {n} - run ms)",
        lambda m: f"{m.wall * 1000 * args.concurrency / n - m.run_ms:.0f}",
    )
    each("runs tagged with its id", lambda m: str(m.runs))
    each("runs whose checkpoints or steps differ from the source's", lambda m: str(m.differ))
    each("runs started twice (run_started > 1)", lambda m: str(m.twice))
    table.add_row("results written before the kill", "-", "-", str(crash.before))
    table.add_row("results written twice", "-", "-", str(crash.written_twice))
    table.add_row("finished cases lost", "-", "-", str(crash.lost))
    table.add_row("new worker's start s", "-", "-", f"{crash.restart_s:.1f}")
    nxt = "-" if crash.next_result_s is None else f"{crash.next_result_s:.1f}"
    table.add_row("kill to the next result s", "-", "-", nxt)
    table.add_row("time lost s (killed wall - clean median)", "-", "-", f"{crash.run.wall - e_med:.1f}")
    console.print(table)

    everything = [*batches, *exps, crash.run]
    bad = [
        *(f"{m.ok} of {n} ok" for m in everything if m.ok != n),
        *(f"{m.runs} runs for {n}" for m in everything if m.runs != n),
        *(f"{m.differ} runs differ from their source" for m in everything if m.differ),
        *(f"{m.twice} runs started twice" for m in everything if m.twice),
        *([f"{crash.written_twice} results written twice"] if crash.written_twice else []),
        *([f"{crash.lost} finished cases lost"] if crash.lost else []),
    ]
    overhead = e_med / b_med
    console.print(
        f"experiment: {overhead:.3f}x the rerun batch at the median (target {OVERHEAD_TARGET}x: "
        f"{'met' if overhead <= OVERHEAD_TARGET else 'not met'}); worker killed: {crash.before} results before, "
        f"{crash.written_twice} written twice, {crash.lost} lost, {crash.run.wall - e_med:.1f} s lost"
    )
    for line in bad:
        console.print(f"violation: {line}")
    return not bad


async def bench(args: argparse.Namespace, stack: EmbeddedStack, tmp: Path) -> bool:
    assert stack.info is not None
    engine = await prepare_database(stack.info.database_url)
    await engine.dispose()
    settings = Settings(
        state_dir=tmp / "waypoint",
        temporal_address=stack.info.temporal_address,
        database_url=stack.info.database_url,
        task_queue=f"bench-evals-{uuid.uuid4().hex[:6]}",
        agents="_echo_agent",
        memory=False,
    )
    worker = Worker(settings, tmp)
    wp = await Waypoint.connect(settings)
    try:
        with console.status("starting the worker..."):
            await worker.start()
        with console.status("a warm-up run..."):
            await wp.result(await wp.start_run("warm up", agent=AGENT))
        with console.status(f"recording {args.cases} runs..."):
            run_ids, seeded = await seed(wp, args)
        await wp.evals.create_dataset(DATASET, run_ids=run_ids)
        batches, exps = [], []
        for i in range(1, args.rounds + 1):
            with console.status(f"round {i}: rerun batch..."):
                batches.append(await batch(wp, args, set(run_ids)))
            with console.status(f"round {i}: experiment..."):
                exps.append(await experiment(wp, args))
        with console.status("an experiment whose worker is killed halfway..."):
            crash = await killed(wp, args, worker)
        return report(args, seeded, batches, exps, crash)
    finally:
        await wp.close()
        worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cases", type=int, default=200, help="recorded runs, and so cases of the dataset")
    parser.add_argument("--concurrency", type=int, default=8, help="runs at a time (recording, batch, experiment)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of a batch then an experiment")
    parser.add_argument("--quick", action="store_true", help=f"a smoke: {QUICK['cases']} cases")
    args = parser.parse_args()
    if args.quick:
        args.cases = QUICK["cases"]
    if min(args.cases, args.concurrency, args.rounds) < 1 or args.cases < 2:
        parser.error("--cases must be at least 2, --concurrency and --rounds at least 1")
    with tempfile.TemporaryDirectory(prefix="waypoint-bench-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            ok = asyncio.run(bench(args, stack, Path(tmp)))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
