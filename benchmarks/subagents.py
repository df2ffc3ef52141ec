"""Sub-agent fan-out: Waypoint's child runs against the OpenAI Agents SDK's agents as tools on Temporal.

    python benchmarks/subagents.py [--children 20] [--child-steps 10] [--cap 8] [--rounds 2] [--probes 5]
                                   [--hold 3] [--no-peer] [--quick]

Needs the `peers` extra for the peer (`pip install -e ".[peers]"`; `--no-peer` measures Waypoint
alone). Run it as a file: it imports peers.py and the agent modules from this folder, and so do
the worker processes.

One embedded stack (Temporal dev server and Postgres, in a temporary folder, on free ports), one
fake OpenAI server over HTTP (`_subagents_common.py`: instant answers, chosen from the request),
and one worker process per framework, so each worker's RSS can be read from /proc. The fake
model, not a ScriptedModel, is what keeps the comparison fair: both frameworks make the same
chat-completions requests over the same socket, and Waypoint runs with its defaults (memory on,
the Postgres mirror, tracing) as in peers.py. This process only starts runs, serves the model and
reads the results.

A tree is a lead whose first step calls the sub-agent `--children` times (one model answer with
all the calls), each sub-agent run making `--child-steps` steps (`--child-steps` - 1 tick calls,
then its answer), after which the lead answers: `--children` x `--child-steps` sub-agent steps.
Waypoint's lead has `max_parallel_agents=--cap`: each call is a child run (a child workflow); the
peer's lead lists `sub_agent.as_tool(...)`, which runs every sub-agent inside the lead's workflow,
all at once (`as_tool` has no cap).

Measured, in `--rounds` interleaved rounds, each framework in turn (wall time at the client, from
the start call to the result):
- the tree;
- Waypoint only, the same tree with a cap of `--children` (no call waits, as the peer runs it);
- one agent making the same steps in sequence: one run of `--children` x `--child-steps` steps;
- ceil(children / cap) runs of `--child-steps` steps one after the other: the ideal tree time (the
  children of each wave at once, each wave as long as one child run).
Then, `--probes` times each, a lead step whose one call is a sub-agent making 1 step, and a lead
step whose one call is the trivial tool (see `start_cost`); the lead's Temporal history of the
last tree; and, first of all on fresh workers, the worker's RSS with `--children` sub-agents live
at once (see `rss_test`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

import _peers_common as common
import peers
from _subagents_common import WORKER, child_tag, lead_task, responder
from rich.console import Console
from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from waypoint.app.devstack import prepare_database, spawn_worker
from waypoint.app.embedded import EmbeddedStack
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.names import Activity, child_run_id
from waypoint.testing import embedded_stack
from waypoint.testing.fake_openai import FakeOpenAI

HERE = Path(__file__).resolve().parent
WAYPOINT_QUEUE = "subagents-waypoint"
PEER_WORKER = "openai-agents-subagents"  # _peers_worker.py's name for _subagents_openai
PEER_MODEL_ACTIVITY = "invoke_model_activity"  # the plugin's model activity
RUN_TIMEOUT_S = 600.0
# The targets
TREE_VS_IDEAL = 1.3
START_COST_MS = 50.0
HISTORY_PER_CHILD = 10_000  # bytes
RSS_PER_CHILD = 2_000_000  # bytes
console = Console(width=None if sys.stdout.isatty() else 150)


@dataclass
class Side:
    """One framework: its runs of one agent (peers.py's Framework), how it starts a lead, its worker."""

    name: str
    single: peers.Framework
    start_lead: Callable[[str, str, bool], Awaitable[str]]  # (tag, task, wide) -> workflow id
    model_activity: str
    pid: int
    cap: int | None  # sub-agent runs at once; None: no cap
    peer: bool


@dataclass
class Rounds:
    tree: list[float] = field(default_factory=list)
    tree_cpu: list[dict[str, float]] = field(default_factory=list)  # CPU s by process during each tree
    sequential_cpu: list[dict[str, float]] = field(default_factory=list)
    wide: list[float] = field(default_factory=list)  # Waypoint only: the cap at --children
    sequential: list[float] = field(default_factory=list)  # one agent, every step in sequence
    waves: list[float] = field(default_factory=list)  # ceil(children / cap) child runs in sequence
    child: list[float] = field(default_factory=list)  # each of those runs
    last_tree: str = ""


@dataclass
class Rss:
    idle: int
    peak: int
    live: int  # sub-agent runs live at once, at most (from the model's ledger)


@dataclass
class StartCost:
    agent_step: list[float]  # ms: the lead's step with one 1-step sub-agent, minus its model call
    tool_step: list[float]  # ms: the lead's step with one tick call
    to_child: list[float]  # ms: the lead's model call done -> the sub-agent's model call scheduled
    from_child: list[float]  # ms: the sub-agent's model call done -> the lead's next model call scheduled
    child_model: list[float]  # ms: the sub-agent's model call, scheduled -> completed (subtracted)
    parts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # Waypoint's finer split
    child_timeline: str = ""  # Waypoint: the last probe's child, event by event


@dataclass
class Measured:
    rounds: dict[str, Rounds] = field(default_factory=dict)
    rss: dict[str, Rss] = field(default_factory=dict)
    start: dict[str, StartCost] = field(default_factory=dict)
    history: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)  # bytes, bytes per event type
    load: list[tuple[float, float, float]] = field(default_factory=list)


# --- runs -------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, args: argparse.Namespace, bench: peers.Bench):
        self.args = args
        self.bench = bench
        self.ledger = bench.ledger

    async def tree(
        self, side: Side, calls: int, ticks: int, *, wide: bool = False, hold: float = 0.0
    ) -> tuple[str, str, float]:
        """A lead fanning out to `calls` sub-agents of `ticks` tick steps and their answer:
        (the lead's workflow id, its tag, wall s)."""
        tag = f"{side.name.split(',')[0]}-{uuid.uuid4().hex[:10]}"
        began = time.monotonic()
        workflow_id = await side.start_lead(tag, lead_task(WORKER, calls, ticks, tag, hold), wide)
        status = await asyncio.wait_for(side.single.wait(workflow_id), RUN_TIMEOUT_S)
        wall = time.monotonic() - began
        made = [len(self.ledger.times(child_tag(tag, i))) for i in range(calls)]
        if status != "completed" or any(n != ticks + 1 for n in made):
            raise RuntimeError(
                f"{side.name}: a tree of {calls} x {ticks + 1} steps ended {status}; "
                f"model requests per sub-agent: {made}"
            )
        return workflow_id, tag, wall

    async def tick_lead(self, side: Side) -> str:
        """A lead whose one step calls `tick` once: its workflow id."""
        tag = f"{side.name.split(',')[0]}-{uuid.uuid4().hex[:10]}"
        workflow_id = await side.start_lead(tag, lead_task(common.TOOL_NAME, 1, 1, tag), False)
        status = await asyncio.wait_for(side.single.wait(workflow_id), RUN_TIMEOUT_S)
        if status != "completed":
            raise RuntimeError(f"{side.name}: a lead calling tick once ended {status}")
        return workflow_id

    async def single(self, side: Side, steps: int) -> float:
        """One agent's run of `steps` steps (`steps` - 1 ticks and the answer): wall s."""
        outcome = await self.bench.run(side.single, steps - 1)
        peers.check(side.single, outcome, steps - 1)
        return outcome.wall_s


async def measure(
    args: argparse.Namespace, runner: Runner, sides: list[Side], plain: Client, cpu: CpuClock
) -> Measured:
    out = Measured(load=[os.getloadavg()])
    for side in sides:
        with console.status(f"{side.name}: worker RSS with {args.children} sub-agents live"):
            out.rss[side.name] = await rss_test(args, runner, side)
    for rnd in range(args.rounds):
        order = sides[rnd % len(sides) :] + sides[: rnd % len(sides)]
        for side in order:
            r = out.rounds.setdefault(side.name, Rounds())
            label = f"round {rnd + 1}/{args.rounds}: {side.name}"
            with console.status(f"{label}: a tree of {args.children} x {args.child_steps} steps"):
                before = cpu.read()
                r.last_tree, _, wall = await runner.tree(side, args.children, args.child_steps - 1)
                r.tree.append(wall)
                r.tree_cpu.append(cpu.since(before))
            if side.cap is not None and side.cap < args.children:
                with console.status(f"{label}: the same tree with a cap of {args.children}"):
                    r.wide.append((await runner.tree(side, args.children, args.child_steps - 1, wide=True))[2])
            with console.status(f"{label}: one agent, {args.children * args.child_steps} steps in sequence"):
                before = cpu.read()
                r.sequential.append(await runner.single(side, args.children * args.child_steps))
                r.sequential_cpu.append(cpu.since(before))
            with console.status(f"{label}: {waves(args)} runs of {args.child_steps} steps, one after the other"):
                walls = [await runner.single(side, args.child_steps) for _ in range(waves(args))]
                r.child += walls
                r.waves.append(sum(walls))
    for side in sides:
        with console.status(f"{side.name}: {args.probes} x (one 1-step sub-agent, one tool call)"):
            out.start[side.name] = await start_cost(args, runner, side, plain)
        tree_id = out.rounds[side.name].last_tree
        out.history[side.name] = await history_size(runner.bench, plain, tree_id)
    out.load.append(os.getloadavg())
    return out


def waves(args: argparse.Namespace) -> int:
    return math.ceil(args.children / args.cap)


# --- CPU time by process, from /proc ---------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, tuple[str, int, float]]:
    """Every process: (name, parent pid, CPU s in user and system mode)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                raw = fh.read()
        except OSError:  # it ended
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        out[int(entry)] = (
            raw[raw.index("(") + 1 : raw.rindex(")")],
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / TICK,
        )
    return out


def _machine_busy() -> float:
    """CPU s the machine spent busy since boot (all cores, every process: /proc/stat's cpu line)."""
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK  # minus idle and iowait


@dataclass
class CpuClock:
    """CPU s used by each process of the benchmark (a process with its children), and by the machine."""

    workers: dict[str, int]  # name -> pid
    postmaster: int | None

    def read(self) -> dict[str, float]:
        procs = _proc_stats()
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (_, ppid, _) in procs.items():
            children[ppid].append(pid)

        def tree(pid: int) -> float:
            return procs[pid][2] + sum(tree(c) for c in children[pid]) if pid in procs else 0.0

        me = os.getpid()
        out = {f"{name} worker": tree(pid) for name, pid in self.workers.items()}
        out["temporal"] = sum(tree(p) for p in children[me] if procs[p][0].startswith("temporal"))
        out["postgres"] = tree(self.postmaster) if self.postmaster else 0.0
        out["this process"] = procs[me][2]
        out["machine"] = _machine_busy()
        return out

    def since(self, before: dict[str, float]) -> dict[str, float]:
        now = self.read()
        return {k: now[k] - before.get(k, 0.0) for k in now}


def postmaster_pid(state_dir: Path) -> int | None:
    try:
        return int((state_dir / "postgres" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# --- worker RSS -------------------------------------------------------------------------------------


def rss_of(pid: int) -> int:
    """Resident set size of process `pid`, in bytes (VmRSS in /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def rss_test(args: argparse.Namespace, runner: Runner, side: Side) -> Rss:
    """The worker's RSS idle, then its peak while a tree of `--children` sub-agents at once runs,
    each holding `--hold` s in its one tick call (so all are live together). Before the idle
    reading, a tree of one sub-agent and a lead calling tick warm up the code paths (imports,
    the sandbox's first workflow, connection pools). The worker is fresh: nothing ran on it before."""
    await runner.tree(side, 1, 1)
    await runner.tick_lead(side)
    await asyncio.sleep(2)
    idle = min(rss_of(side.pid) for _ in range(3))
    peak = idle
    done = asyncio.ensure_future(runner.tree(side, args.children, 1, wide=True, hold=args.hold))
    while not done.done():
        peak = max(peak, rss_of(side.pid))
        await asyncio.sleep(0.05)
    _, tag, _ = done.result()
    return Rss(idle, peak, live_at_once(runner.ledger, tag, args.children))


def live_at_once(ledger: common.Ledger, tag: str, children: int) -> int:
    """The most sub-agent runs of the tree `tag` between their first and last model request at one moment."""
    spans = [ledger.times(child_tag(tag, i)) for i in range(children)]
    edges = sorted([(t[0], 1) for t in spans if t] + [(t[-1], -1) for t in spans if t])
    live = most = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


# --- what starting a sub-agent costs ----------------------------------------------------------------


def seconds(event: HistoryEvent) -> float:
    return event.event_time.ToMicroseconds() / 1e6


def activities(events: Sequence[HistoryEvent], name: str) -> list[tuple[float, float]]:
    """(scheduled, completed) times of each activity of type `name`, in the order they were scheduled."""
    scheduled: dict[int, float] = {}
    done: dict[int, float] = {}
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if e.activity_task_scheduled_event_attributes.activity_type.name == name:
                scheduled[e.event_id] = seconds(e)
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done[e.activity_task_completed_event_attributes.scheduled_event_id] = seconds(e)
    return [(at, done[i]) for i, at in sorted(scheduled.items()) if i in done]


def first(events: Sequence[HistoryEvent], kind: int) -> float:
    return next(seconds(e) for e in events if e.event_type == kind)


async def events_of(plain: Client, workflow_id: str) -> list[HistoryEvent]:
    return list((await plain.get_workflow_handle(workflow_id).fetch_history()).events)


async def start_cost(args: argparse.Namespace, runner: Runner, side: Side, plain: Client) -> StartCost:
    """`--probes` pairs: a lead whose step 1 calls one sub-agent that answers in 1 step, and a lead
    whose step 1 calls `tick` once. From Temporal history timestamps (one server clock for parent
    and child): a lead's step 1 is from its first model call's completion to its second model
    call's schedule. The sub-agent's own step, its model call from schedule to completion, is
    subtracted from the sub-agent step; what is left against the tool step is what starting a
    sub-agent costs more than calling a tool (for Waypoint: start the child workflow, its
    start_run, record its step and finish it, the parent's agent_result)."""
    out = StartCost([], [], [], [], [])
    for _ in range(args.probes):
        lead_id, _, _ = await runner.tree(side, 1, 0)
        tick_id = await runner.tick_lead(side)
        lead = await events_of(plain, lead_id)
        lead_models = activities(lead, side.model_activity)
        if side.peer:  # the sub-agent's model call is in the lead's own history, between the lead's two
            (_, m1_done), (c_sched, c_done), (m2_sched, _) = lead_models
        else:
            child = await events_of(plain, child_run_id(lead_id, 1, 0))
            (_, m1_done), (m2_sched, _) = lead_models
            ((c_sched, c_done),) = activities(child, side.model_activity)
            child_start = first(child, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
            child_end = first(child, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
            initiated = first(lead, EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
            back = first(lead, EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED)
            for label, a, b in (
                ("lead's model call done -> child workflow start initiated", m1_done, initiated),
                ("-> child's workflow started", initiated, child_start),
                ("-> child's model call scheduled (start_run, ...)", child_start, c_sched),
                ("child's model call done -> child's workflow completed", c_done, child_end),
                ("-> the lead sees it completed", child_end, back),
                ("-> lead's next model call scheduled (agent_result, record_step)", back, m2_sched),
            ):
                out.parts[label].append((b - a) * 1000)
            out.child_timeline = timeline(child)
        out.child_model.append((c_done - c_sched) * 1000)
        out.to_child.append((c_sched - m1_done) * 1000)
        out.from_child.append((m2_sched - c_done) * 1000)
        out.agent_step.append((m2_sched - m1_done - (c_done - c_sched)) * 1000)
        (_, t1_done), (t2_sched, _) = activities(await events_of(plain, tick_id), side.model_activity)
        out.tool_step.append((t2_sched - t1_done) * 1000)
    return out


def timeline(events: Sequence[HistoryEvent]) -> str:
    """A run's history in one line: ms from its start, then what happened (activities by name; a local
    activity shows as the marker its workflow task recorded)."""
    start = seconds(events[0])
    names: dict[int, str] = {}
    out = []
    for e in events:
        kind = EventType.Name(e.event_type).removeprefix("EVENT_TYPE_").lower()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
            kind = f"{names[e.event_id]} scheduled"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            kind = f"{names.get(e.activity_task_completed_event_attributes.scheduled_event_id, '?')} completed"
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            continue
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            kind = f"local {local_activity(e)}"
        out.append(f"{(seconds(e) - start) * 1000:.0f} {kind}")
    return "; ".join(out)


def local_activity(event: HistoryEvent) -> str:
    """The activity type a local-activity marker records, or the marker's name."""
    attrs = event.marker_recorded_event_attributes
    data = attrs.details.get("data")
    if data is not None and data.payloads:
        try:
            return str(json.loads(data.payloads[0].data).get("activity_type", attrs.marker_name))
        except ValueError:
            pass
    return attrs.marker_name


async def history_size(bench: peers.Bench, plain: Client, workflow_id: str) -> tuple[int, dict[str, int]]:
    """The lead's history in bytes (every execution, as peers.py counts), and its latest execution's
    bytes per event type."""
    total = await bench.history_bytes(workflow_id)
    by_type: dict[str, int] = defaultdict(int)
    for e in await events_of(plain, workflow_id):
        by_type[EventType.Name(e.event_type).removeprefix("EVENT_TYPE_").lower()] += e.ByteSize()
    return total, dict(by_type)


# --- the stack and the frameworks -------------------------------------------------------------------


async def bench(
    args: argparse.Namespace, stack: EmbeddedStack, fake: FakeOpenAI, ledger: common.Ledger, tmp: Path
) -> None:
    from _subagents_waypoint import LEAD, WIDE_LEAD

    assert stack.info is not None
    address = stack.info.temporal_address
    settings = Settings(
        state_dir=tmp / "waypoint",
        temporal_address=address,
        database_url=stack.info.database_url,
        task_queue=WAYPOINT_QUEUE,
        agents="_subagents_waypoint",
        openai_api_key="fake",
        openai_base_url=fake.base_url,
        # The deployment's cap on a run's sub-agents at once (default 8) is raised so that only the
        # agents' own caps apply (the wide lead's must).
        max_parallel_agents=max(args.children, args.cap),
    )
    engine = await prepare_database(stack.info.database_url)
    await engine.dispose()
    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    env = settings.child_environment(
        PYTHONPATH=pythonpath, SUBAGENTS_CAP=str(args.cap), SUBAGENTS_WIDE=str(args.children)
    )
    procs = []
    try:
        with console.status("starting the workers..."):
            procs.append(await asyncio.to_thread(spawn_worker, env, timeout=120))
        wp = await Waypoint.connect(settings)
        plain = await Client.connect(address)
        b = peers.Bench(ledger, plain)

        async def start_waypoint_lead(tag: str, task: str, wide: bool) -> str:
            return await wp.start_run(task, agent=WIDE_LEAD if wide else LEAD)

        sides = [
            Side(
                "waypoint",
                peers.waypoint_framework("waypoint", wp, WORKER),
                start_waypoint_lead,
                Activity.CALL_MODEL.value,
                procs[0].pid,
                args.cap,
                peer=False,
            )
        ]
        if not args.no_peer:
            import _peers_openai
            import _subagents_openai

            peer_env = dict(os.environ, PYTHONPATH=pythonpath)
            cmd = [sys.executable, str(HERE / "_peers_worker.py"), PEER_WORKER, address, _subagents_openai.TASK_QUEUE]
            with console.status("starting the peer's worker..."):
                procs.append(await asyncio.to_thread(common.spawn, cmd, peer_env))
            oai = await _subagents_openai.connect(address)

            async def start_peer_lead(tag: str, task: str, wide: bool) -> str:
                return await _subagents_openai.start_lead(oai, tag, task, args.child_steps + 5)

            sides.append(
                Side(
                    _subagents_openai.NAME,
                    peers.peer_framework(_peers_openai, oai, _subagents_openai.TASK_QUEUE),
                    start_peer_lead,
                    PEER_MODEL_ACTIVITY,
                    procs[1].pid,
                    None,
                    peer=True,
                )
            )
        try:
            cpu = CpuClock({side.name: side.pid for side in sides}, postmaster_pid(tmp))
            measured = await measure(args, Runner(args, b), sides, plain, cpu)
        finally:
            await wp.close()
        report(args, sides, measured)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                await asyncio.to_thread(proc.wait, 30)
            except Exception:
                proc.kill()


# --- the report -------------------------------------------------------------------------------------


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT MET"


def report(args: argparse.Namespace, sides: list[Side], m: Measured) -> None:
    n, steps, w = args.children, args.child_steps, waves(args)
    t = Table(
        title=f"A lead fanning out to {n} sub-agents of {steps} steps in one step; wall s at the client, "
        f"median of {args.rounds} rounds (each round's value in parentheses)",
        title_justify="left",
    )
    for col in (
        "framework",
        "tree s",
        f"{n * steps} steps, one agent s",
        f"{steps}-step run s",
        f"{w} x {steps}-step runs in sequence s",
        f"tree / {w} in sequence",
        f"tree / one {steps}-step run",
        f"tree / {n * steps} in sequence",
    ):
        t.add_column(col, justify="left" if col == "framework" else "right")

    def each(values: list[float], fmt: str = "{:.1f}") -> str:
        return f"{fmt.format(med(values))} ({' / '.join(fmt.format(v) for v in values)})"

    def row(label: str, tree: list[float], r: Rounds) -> None:
        per_round = [a / b for a, b in zip(tree, r.waves, strict=True)]
        t.add_row(
            label,
            each(tree),
            each(r.sequential),
            f"{med(r.child):.2f}",
            each(r.waves),
            each(per_round, "{:.2f}x"),
            f"{med(tree) / med(r.child):.2f}x",
            f"{med(tree) / med(r.sequential):.2f}x",
        )

    for side in sides:
        r = m.rounds[side.name]
        cap = f"cap {side.cap}" if side.cap is not None else "no cap (as_tool)"
        row(f"{side.name}, {cap}", r.tree, r)
        if r.wide:
            row(f"{side.name}, cap {n}", r.wide, r)
    console.print(t)

    s = Table(
        title=f"Starting a sub-agent against calling a tool: ms, median of {args.probes} "
        "(Temporal history timestamps of the lead and the sub-agent)",
        title_justify="left",
    )
    s.add_column("framework")
    for col in (
        "lead step, one tool call",
        "lead step, one 1-step sub-agent",
        "of which its model call (subtracted)",
        "lead model done -> sub-agent model scheduled",
        "sub-agent model done -> lead model scheduled",
        "start cost (sub-agent step - tool step)",
    ):
        s.add_column(col, justify="right")
    for side in sides:
        c = m.start[side.name]
        s.add_row(
            side.name,
            f"{med(c.tool_step):.1f}",
            f"{med(c.agent_step) + med(c.child_model):.1f}",
            f"{med(c.child_model):.1f}",
            f"{med(c.to_child):.1f}",
            f"{med(c.from_child):.1f}",
            f"{med(c.agent_step) - med(c.tool_step):+.1f}",
        )
    console.print(s)
    ours = m.start["waypoint"]
    console.print(
        "waypoint's sub-agent step, part by part (ms, medians): "
        + "; ".join(f"{label} {med(v):.1f}" for label, v in ours.parts.items())
    )
    console.print(f"a 1-step child's history (ms from its start): {ours.child_timeline}")

    h = Table(title=f"The lead's Temporal history, tree of {n} x {steps}, and worker RSS", title_justify="left")
    for col in (
        "framework",
        "history bytes",
        "per sub-agent",
        "worker RSS idle MB",
        f"peak, {n} live MB",
        "live at once",
        "per live sub-agent",
    ):
        h.add_column(col, justify="left" if col == "framework" else "right")
    for side in sides:
        total, _ = m.history[side.name]
        rss = m.rss[side.name]
        h.add_row(
            side.name,
            f"{total:,}",
            f"{total / n / 1000:,.1f} KB",
            f"{rss.idle / 1e6:,.1f}",
            f"{rss.peak / 1e6:,.1f}",
            str(rss.live),
            f"{(rss.peak - rss.idle) / max(1, rss.live) / 1e6:,.2f} MB",
        )
    console.print(h)
    for side in sides:
        _, by_type = m.history[side.name]
        top = sorted(by_type.items(), key=lambda kv: -kv[1])[:5]
        parts = ", ".join(f"{k} {v / n:,.0f}" for k, v in top)
        console.print(f"{side.name}'s lead history, bytes per sub-agent by event type: {parts}")

    cpu_table = Table(
        title="Where the time went: CPU s by process during the timed runs (medians of the rounds); "
        "other = the rest of the machine's busy time (other load)",
        title_justify="left",
    )
    names = [f"{side.name} worker" for side in sides] + ["temporal", "postgres", "this process"]
    for col in ("run", "wall s", *names, "other", "machine busy, cores", "its worker, CPU ms per model call"):
        cpu_table.add_column(col, justify="left" if col == "run" else "right")
    for side in sides:
        r = m.rounds[side.name]
        for label, walls, cpus, calls in (
            (f"{side.name}: tree", r.tree, r.tree_cpu, n * steps + 2),
            (f"{side.name}: {n * steps} in sequence", r.sequential, r.sequential_cpu, n * steps),
        ):
            spent = {k: med([d[k] for d in cpus]) for k in cpus[0]}
            other = spent["machine"] - sum(spent[k] for k in names)
            cpu_table.add_row(
                label,
                f"{med(walls):.1f}",
                *(f"{spent[k]:.1f}" for k in names),
                f"{other:.1f}",
                f"{spent['machine'] / med(walls):.2f}",
                f"{spent[f'{side.name} worker'] / calls * 1000:.0f}",
            )
    console.print(cpu_table)

    r = m.rounds["waypoint"]
    ratio = med([a / b for a, b in zip(r.tree, r.waves, strict=True)])
    cost = med(ours.agent_step) - med(ours.tool_step)
    total, _ = m.history["waypoint"]
    rss = m.rss["waypoint"]
    grown = (rss.peak - rss.idle) / max(1, rss.live)
    lines = [
        f"tree with cap {args.cap} at most {TREE_VS_IDEAL}x {w} child runs in sequence: {ratio:.2f}x, "
        f"{verdict(ratio <= TREE_VS_IDEAL)}",
        f"starting a child at most {START_COST_MS:.0f} ms more than a tool call: {cost:+.1f} ms, "
        f"{verdict(cost <= START_COST_MS)}",
        f"parent history under {HISTORY_PER_CHILD // 1000} KB per child: {total / n / 1000:.1f} KB, "
        f"{verdict(total / n < HISTORY_PER_CHILD)}",
        f"worker RSS under {RSS_PER_CHILD // 1_000_000} MB more per live child: {grown / 1e6:.2f} MB "
        f"({rss.live} live), {verdict(grown < RSS_PER_CHILD)}",
    ]
    console.print("Targets (Waypoint), as measured:")
    for line in lines:
        console.print(f"  {line}")
    notes = [
        "KB and MB are 1,000 and 1,000,000 bytes. Load average at the start and the end: "
        + ", ".join(f"{a:.1f}" for a, _, _ in m.load)
        + f" (2 cores? {os.cpu_count()} here).",
    ]
    if any(s.peer for s in sides):
        notes.append(
            "openai-agents runs `as_tool` sub-agents inside the lead's workflow: no child workflow or history "
            "of their own (their model calls and tool calls are the lead's activities, in the lead's history), "
            "and every call of a turn at once (no cap), so its tree is measured as a user writes it, uncapped, "
            f"against the same {w} runs in sequence and against one {steps}-step run."
        )
    for note in notes:
        console.print(note)
    print(f"fan-out {n}x{steps}, cap {args.cap}: {ratio:.2f}x the ideal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=20, help="sub-agent calls in the lead's one step")
    parser.add_argument("--child-steps", type=int, default=10, help="steps of each sub-agent run (ticks + answer)")
    parser.add_argument("--cap", type=int, default=8, help="Waypoint's max_parallel_agents for the tree")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the timed runs")
    parser.add_argument("--probes", type=int, default=5, help="repetitions of the start-cost pair")
    parser.add_argument("--hold", type=float, default=3.0, help="s each sub-agent's tick holds in the RSS test")
    parser.add_argument("--no-peer", action="store_true", help="Waypoint alone (no `peers` extra needed)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, 2 probes, 1 s holds")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.probes, args.hold = 1, 2, 1.0
    if min(args.children, args.cap, args.rounds, args.probes) < 1 or args.child_steps < 2 or args.hold <= 0:
        parser.error("--children, --cap, --rounds, --probes must be at least 1, --child-steps 2, --hold above 0")
    if not args.no_peer:
        missing = [name for name in ("agents", "temporalio.openai_agents") if not find_spec(name)]
        if missing:
            print(
                f"error: the peer is not installed ({', '.join(missing)}): pip install -e '.[peers]', or --no-peer",
                file=sys.stderr,
            )
            raise SystemExit(1)
    # Waypoint's defaults, not whatever this shell sets.
    for key in [k for k in os.environ if k.startswith(("WAYPOINT_", "OPENAI_"))]:
        del os.environ[key]
    with tempfile.TemporaryDirectory(prefix="waypoint-subagents-") as tmp:
        with embedded_stack(Path(tmp)) as stack:
            ledger = common.Ledger()
            fake = FakeOpenAI(responder(ledger))
            try:
                fake.start()
                # The peer's openai client reads these; Waypoint gets them through its Settings.
                os.environ.update(
                    OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="fake", OPENAI_AGENTS_DISABLE_TRACING="1"
                )
                asyncio.run(bench(args, stack, fake, ledger, Path(tmp)))
            finally:
                fake.stop()


if __name__ == "__main__":
    main()
