"""The Postgres mirror: every SQL statement and every write, tenant-scoped in one place.

    store = RunStore(engine)     # built once per process, injected into the activities
    await store.list_runs(tenant_id)
    await store.steps.record_step(record, attempt=n)   # a family is an attribute of the store
    await store.keys.create_key(tenant_id, name)
    await store.travel.state_at(tenant_id, run_id, step)

One object, assembled from small parts, one module each: the log (append, hash chain,
status transitions), a step's writes, the tool ledger, compactions, what a step reads,
listings, time travel, comparing two runs, integrity and retention, the mirror's invariants (what
`verify --all` checks against Temporal), the agent catalog, the HTTP API's keys and threads,
scheduled agents, runs that wait to start, what live streams read, the shared limiter of model calls,
the fleet's figures over a period, the idempotency keys of starts, webhooks (signing secrets, deliveries,
delivery attempts), Agent Protocol assistants (versioned), the agent versions runs started with, and
the rows a run's waterfall is drawn from, evaluations (datasets, experiments, their results), and the
budget pools model calls reserve from (a tree's, a tenant's day), and the audit log of who did what
(hash-chained per tenant). Each family is an attribute of `RunStore` (its docstring names them);
the runs themselves (`get_run`, `list_runs`, ...) are the store's own methods.
`waypoint.store.db` has connections and migrations, `waypoint.store.schema` the tables.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from waypoint.store.assistants import AssistantStore
from waypoint.store.audit import AuditLog
from waypoint.store.budget import BudgetStore
from waypoint.store.catalog import Catalog
from waypoint.store.compactions import CompactionStore
from waypoint.store.compare import Compare
from waypoint.store.evals import EvalStore
from waypoint.store.fleet import FleetReads
from waypoint.store.idempotency import Idempotency
from waypoint.store.integrity import Integrity
from waypoint.store.invariants import Invariants
from waypoint.store.keys import ApiKeys
from waypoint.store.ledger import Ledger
from waypoint.store.limits import Limiter
from waypoint.store.log import RunLog
from waypoint.store.reads import Reads
from waypoint.store.schedules import ScheduleStore
from waypoint.store.starts import Starts
from waypoint.store.steps import StepWriter
from waypoint.store.streams import Streams
from waypoint.store.threads import Threads
from waypoint.store.travel import TimeTravel
from waypoint.store.trees import Trees
from waypoint.store.versions import VersionStore
from waypoint.store.waterfall import WaterfallReads
from waypoint.store.webhooks import Webhooks
from waypoint.store.working import WorkingReads


class RunStore(Reads):
    """Every read and write of the Postgres mirror.

    The families that stand alone are stores of their own, one attribute each, so a client service is
    built from the one it needs: `log` (the run log: status transitions, a run's end, failovers),
    `steps` (creating a run, a step's writes), `starts` (runs that wait to start, joining a thread),
    `ledger` (the tool ledger), `working` (what a step reads, recall's fork chain), `streams` (what
    live streams read, notifications), `catalog` (the agent catalog), `travel` (time travel: a
    step's state, diffs, events, export, lineage), `integrity` (verify a run or a tree, delete a
    run), `compare` (two runs side by side), `evals` (datasets, experiments, results, judgements,
    scorers; it reads a case's run through `compare`), `trees` (a run's sub-agent runs, and their
    status mirrored on callers), `budget` (budget pools and a tenant's day), `keys` (the HTTP API's
    keys), `audit` (the audit log), `schedules` (scheduled agents), `assistants` (Agent Protocol
    assistants), `idempotency` (the idempotency keys of starts), `versions` (the agent versions runs
    started with), `webhooks` (signing secrets, deliveries, attempts), `limiter` (the shared limiter
    of model calls), `fleet` (the fleet's figures), `invariants` (what `verify --all` compares with
    Temporal), `threads` (conversation threads), `waterfall` (the rows a run's waterfall is drawn
    from) and `compaction` (compactions of a run's log).

    What is left on the store itself is the runs noun: `Reads` (listings) and `StoreBase`'s `_run` /
    `get_run` / `checkpoint_at` / `owner_of_step`, which every family shares.
    """

    def __init__(self, engine: AsyncEngine):
        self.engine = engine
        self.keys = ApiKeys(engine)
        self.audit = AuditLog(engine)
        self.schedules = ScheduleStore(engine)
        self.assistants = AssistantStore(engine)
        self.idempotency = Idempotency(engine)
        self.versions = VersionStore(engine)
        self.webhooks = Webhooks(engine)
        self.limiter = Limiter(engine)
        self.fleet = FleetReads(engine)
        self.invariants = Invariants(engine)
        self.threads = Threads(engine)
        self.waterfall = WaterfallReads(engine)
        self.compaction = CompactionStore(engine)
        self.log = RunLog(engine)
        self.steps = StepWriter(engine)
        self.starts = Starts(engine)
        self.ledger = Ledger(engine)
        self.working = WorkingReads(engine)
        self.streams = Streams(engine)
        self.catalog = Catalog(engine)
        self.travel = TimeTravel(engine)
        self.integrity = Integrity(engine)
        self.compare = Compare(engine)
        self.evals = EvalStore(engine, self.compare)
        self.trees = Trees(engine)
        self.budget = BudgetStore(engine)


__all__ = ["RunStore"]
