"""The Postgres mirror of every run, as SQLAlchemy Core tables.

The tables are created by Alembic migrations (waypoint/migrations), never from
this metadata; these definitions are what queries are written against, and a
test checks both agree.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

metadata = MetaData()

STATE_SCHEMA_VERSION = 2  # 2: the state lists event segments (waypoint/store/context.py)

runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, primary_key=True),  # = Temporal workflow id
    Column("tenant_id", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("task", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("parent_run_id", Text, ForeignKey("runs.run_id"), nullable=True),
    Column("fork_step", Integer, nullable=True),
    Column("max_steps", Integer, nullable=False),
    Column("steps", Integer, nullable=False, server_default="0"),
    Column("input_tokens", BigInteger, nullable=False, server_default="0"),
    Column("output_tokens", BigInteger, nullable=False, server_default="0"),
    Column("cost_usd", Numeric(14, 6), nullable=False, server_default="0"),
    Column("output", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("trace_id", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    # The newest step whose episodes are in episodic memory (the next model call stores those after it).
    Column("remembered_step", Integer, nullable=False, server_default="0"),
    Column("lineage_kind", Text, nullable=True),  # a LineageKind, for a run with a parent
    Column("batch_id", Text, nullable=True),  # the batch of reruns it belongs to
    # A sub-agent run: the call (run, step, call index) that started it. Its tree's root (itself for a root).
    Column("caller_run_id", Text, ForeignKey("runs.run_id"), nullable=True),
    Column("caller_step", Integer, nullable=True),
    Column("caller_call_index", Integer, nullable=True),
    Column("root_run_id", Text, nullable=True),
    Column("output_json", JSONB, nullable=True),  # a typed answer (the agent's output_type), parsed
    # Of input_tokens, those the provider's prompt cache served, and those it wrote (migration 0014).
    Column("cache_read_tokens", BigInteger, nullable=False, server_default="0"),
    Column("cache_write_tokens", BigInteger, nullable=False, server_default="0"),
    # 1 (first) to 5 (last), as Temporal's priority key; None: the default, 3 (migration 0015).
    Column("priority", SmallInteger, nullable=True),
    Column("waiting_key", Text, nullable=True),  # while waiting_capacity: the limiter key it waits for
    # Migration 0016: the schedule that fired it; when a delayed run starts; the run an enqueued run
    # waits for (a thread's next turn); where its end is posted.
    Column("schedule_id", Text, nullable=True),
    Column("start_at", DateTime(timezone=True), nullable=True),
    Column("after_run_id", Text, nullable=True),
    Column("webhook", Text, nullable=True),
    # Migration 0017: the Agent Protocol assistant (a tenant's, or a catalog agent's name) and the
    # version of it the run ran.
    Column("assistant_id", Text, nullable=True),
    Column("assistant_version", Integer, nullable=True),
    # Migration 0018: the fingerprint of the agent version it started with (None: started before).
    Column("agent_fingerprint", Text, nullable=True),
    # Migration 0021: after a failover, the model the run calls now and every model it has been on, in
    # order of first use (`model` stays the one it started on); both None while it never failed over.
    Column("current_model", Text, nullable=True),
    Column("models_used", JSONB, nullable=True),
)

events = Table(
    "events",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("seq", Integer, nullable=False),  # 1, 2, 3... per run
    Column("step", Integer, nullable=False),  # 0 = before the first model call
    Column("kind", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("attempt", Integer, nullable=False, server_default="1"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("prev_hash", Text, nullable=True),
    Column("hash", Text, nullable=False),
    UniqueConstraint("run_id", "seq", name="events_run_seq_key"),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("step", Integer, nullable=False),
    Column("state", JSONB, nullable=False),
    Column("last_event_seq", Integer, nullable=False),
    Column("state_hash", Text, nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("run_id", "step", name="checkpoints_pkey"),
)

tool_effects = Table(
    "tool_effects",
    metadata,
    Column("idempotency_key", Text, primary_key=True),
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("step", Integer, nullable=False),
    Column("call_index", Integer, nullable=False),
    Column("tool", Text, nullable=False),
    Column("arguments", Text, nullable=False),
    Column("output", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("duration_ms", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# The recalled-memory message a model call received (migration 0011), named by its hash in the step's record.
recalled_texts = Table(
    "recalled_texts",
    metadata,
    Column("run_id", Text, ForeignKey("runs.run_id"), nullable=False),
    Column("sha256", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("run_id", "sha256", name="recalled_texts_pkey"),
)

compactions = Table(
    "compactions",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("run_id", Text, ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("first_seq", Integer, nullable=False),
    Column("last_seq", Integer, nullable=False),
    Column("first_step", Integer, nullable=False),
    Column("last_step", Integer, nullable=False),
    Column("tokens_before", Integer, nullable=False),
    Column("tokens_after", Integer, nullable=False),
    Column("summary", Text, nullable=False),  # the block working memory shows instead of the range
    Column("structured", JSONB, nullable=False),  # key_facts, open_threads, decisions (with their steps)
    Column("pinned", JSONB, nullable=False),  # decisions, verbatim: [{step, seq, text, source}]
    Column("pruned", JSONB, nullable=False),  # [{seq, step, tool, reason, tokens, replacement}]
    Column("method", Text, nullable=False),  # "model" or "extractive"
    Column("model", Text, nullable=True),
    Column("fallback_reason", Text, nullable=True),  # why the model was not used
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("run_id", "first_seq", "last_seq", name="compactions_run_range_key"),
    CheckConstraint("first_seq <= last_seq", name="compactions_range_check"),
)

agents = Table(
    "agents",
    metadata,
    Column("task_queue", Text, primary_key=True),  # the queue its workers poll
    Column("name", Text, primary_key=True),
    Column("description", Text, nullable=False),  # the agent's instructions
    Column("model", Text, nullable=False),  # its model spec
    Column("providers", JSONB, nullable=False),  # the model providers its worker can call
    Column("tools", JSONB, nullable=False),  # [{name, description, parameters, requires_approval, ...}]
    Column("settings", JSONB, nullable=False),  # max_steps, budgets, context_tokens, memory, ...
    Column("worker", Text, nullable=False),  # host:pid of the worker that registered it last
    Column("fingerprint", Text, nullable=True),  # the version a fresh run starts with (migration 0018)
    Column("registered_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("key_hash", Text, nullable=False, unique=True),  # SHA-256 of the key; the key is never stored
    Column("prefix", Text, nullable=False),  # its first characters, to tell keys apart in listings
    Column("tenant_id", Text, nullable=False),
    Column("name", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    Column("role", Text, nullable=False, server_default="admin"),  # waypoint.access.Role
)

# Every human or application action, append-only, hash-chained per tenant (migration 0025).
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),  # 1, 2, 3... per tenant
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("actor", Text, nullable=False),  # key:<id>, user:<subject>, local: never a secret
    Column("role", Text, nullable=False),
    Column("surface", Text, nullable=False),  # waypoint.access.Surface
    Column("address", Text, nullable=True),
    Column("action", Text, nullable=False),  # waypoint.access.Action
    Column("target_kind", Text, nullable=True),
    Column("target_id", Text, nullable=True),
    Column("outcome", Text, nullable=False),  # waypoint.access.Outcome
    Column("detail", JSONB, nullable=True),
    Column("prev_hash", Text, nullable=True),
    Column("hash", Text, nullable=False),
    UniqueConstraint("tenant_id", "seq", name="audit_log_tenant_seq_key"),
    Index("audit_log_tenant_actor", "tenant_id", "actor", "seq"),
    Index("audit_log_tenant_at", "tenant_id", "at"),
)

threads = Table(
    "threads",
    metadata,
    Column("thread_id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# An Agent Protocol thread's runs, in order: each forked from the previous one's last step.
thread_runs = Table(
    "thread_runs",
    metadata,
    Column("thread_id", Text, ForeignKey("threads.thread_id", ondelete="CASCADE"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("run_id", Text, nullable=False),  # reserved before the run (and its row) exists
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The multitask strategy the run was created with (migration 0021); NULL: reject, the default.
    Column("multitask_strategy", Text, nullable=True),
    PrimaryKeyConstraint("thread_id", "position", name="thread_runs_pkey"),
)

# The shared limiter (waypoint/store/limits.py, migration 0015). A lease is one model call's slot of a
# limiter key, renewed while the call runs; `lease_id` is "<run>:<step>", so a retried call takes its
# own slot back instead of a second one.
capacity_leases = Table(
    "capacity_leases",
    metadata,
    Column("key", Text, nullable=False),
    Column("lease_id", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("granted_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("key", "lease_id", name="capacity_leases_pkey"),
)

# The requests of the last minute per key, with their tokens (estimated, then what the call used).
capacity_requests = Table(
    "capacity_requests",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("key", Text, nullable=False),
    Column("lease_id", Text, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("tokens", BigInteger, nullable=False, server_default="0"),
)

# The calls waiting for a key, in the line the limiter grants from (priority, then fair share).
capacity_waiters = Table(
    "capacity_waiters",
    metadata,
    Column("key", Text, nullable=False),
    Column("lease_id", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("weight", Float, nullable=False),
    Column("since", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),  # a waiter that stops asking drops out
    # Next in line, it stands by in its activity until then (a release notifies it, and signals others).
    Column("standby_until", DateTime(timezone=True), nullable=True),
    PrimaryKeyConstraint("key", "lease_id", name="capacity_waiters_pkey"),
)

# Per model key: the shared cooldown a 429 set, and the circuit breaker.
model_key_health = Table(
    "model_key_health",
    metadata,
    Column("key", Text, primary_key=True),
    Column("cooldown_until", DateTime(timezone=True), nullable=True),
    Column("cooldown_reason", Text, nullable=True),
    Column("failures", Integer, nullable=False, server_default="0"),  # retryable failures in a row
    Column("last_failure_at", DateTime(timezone=True), nullable=True),
    Column("breaker_open_until", DateTime(timezone=True), nullable=True),
    Column("requests", BigInteger, nullable=False, server_default="0"),
    Column("throttled", BigInteger, nullable=False, server_default="0"),  # 429s and 529s
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Scheduled agents (migration 0016): the tenant's record of each Temporal Schedule it created, which
# scopes it (Temporal holds its state: next fire times, paused, recent actions).
schedules = Table(
    "schedules",
    metadata,
    Column("schedule_id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("task", Text, nullable=False),
    Column("thread_id", Text, nullable=True),  # an Agent Protocol cron on a thread
    Column("spec", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Each tenant's webhook signing secret (HMAC-SHA256 of the body), made on first use.
webhook_secrets = Table(
    "webhook_secrets",
    metadata,
    Column("tenant_id", Text, primary_key=True),
    Column("secret", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Every attempt to post a finished run to its webhook.
webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("id", BigInteger, Identity(), primary_key=True),
    Column("run_id", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("url", Text, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("status_code", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Column("duration_ms", Integer, nullable=False, server_default="0"),
    Column("delivered", Boolean, nullable=False, server_default=text("false")),
    Column("delivery_id", Text, nullable=True),  # the delivery it was an attempt of (none before 0021)
)

# Every webhook delivery (migration 0021): one event to one URL, retried by its own workflow until
# delivered or its window ends; `failed` ones are the dead-letter list. `body` is what every attempt
# posts, byte for byte; `window_ends_at` is set by the worker when the delivery opens.
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("delivery_id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("event", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_status_code", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("next_attempt_at", DateTime(timezone=True), nullable=True),
    Column("window_ends_at", DateTime(timezone=True), nullable=True),
    Column("redelivery_of", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("ended_at", DateTime(timezone=True), nullable=True),
)

# A start's idempotency key: every repeat within the retention window answers the same run.
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("key", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("body_hash", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "key", name="idempotency_keys_pkey"),
)

# Agent Protocol assistants (migration 0017): a tenant's configured agent (its graph is an agent of
# the catalog) and every version of it; `version` is the one runs use (set back by `set_latest`).
assistants = Table(
    "assistants",
    metadata,
    Column("assistant_id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("graph_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text, nullable=True),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

assistant_versions = Table(
    "assistant_versions",
    metadata,
    Column("assistant_id", Text, ForeignKey("assistants.assistant_id", ondelete="CASCADE"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("graph_id", Text, nullable=False),
    Column("config", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("context", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("name", Text, nullable=False),
    Column("description", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("assistant_id", "version", name="assistant_versions_pkey"),
)

# Agent versions (migration 0018): what each fingerprint a tenant's runs started with stands for.
agent_versions = Table(
    "agent_versions",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("agent", Text, nullable=False),
    Column("instructions", Text, nullable=False),
    Column("tool_schemas", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("models", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("mcp_tools", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "fingerprint", name="agent_versions_pkey"),
)

# Evaluations (migration 0020): versioned datasets of cases, experiments over them, each case's
# result, the judge's recorded verdicts, and the scorers the workers registered.
datasets = Table(
    "datasets",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("source", JSONB, nullable=False),  # {"kind": "runs", "select": ...} or {"kind": "file", "file": ...}
    Column("cases", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "name", "version", name="datasets_pkey"),
)

dataset_cases = Table(
    "dataset_cases",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("dataset", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("idx", Integer, nullable=False),
    Column("case_id", Text, nullable=False),
    Column("task", Text, nullable=False),
    Column("expected_output", JSONB, nullable=True),
    Column("expected_tools", JSONB, nullable=True),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("source_run_id", Text, nullable=True),
    PrimaryKeyConstraint("tenant_id", "dataset", "version", "idx", name="dataset_cases_pkey"),
    ForeignKeyConstraint(
        ["tenant_id", "dataset", "version"],
        ["datasets.tenant_id", "datasets.name", "datasets.version"],
        name="dataset_cases_dataset_fkey",
        ondelete="CASCADE",
    ),
)

experiments = Table(
    "experiments",
    metadata,
    Column("experiment_id", Text, primary_key=True),  # = its Temporal workflow id
    Column("tenant_id", Text, nullable=False),
    Column("dataset", Text, nullable=False),
    Column("dataset_version", Integer, nullable=False),
    Column("agent", Text, nullable=False),
    Column("model", Text, nullable=True),
    Column("instructions", Text, nullable=True),
    Column("recorded_tools", Boolean, nullable=False),
    Column("repeat", Integer, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("scorers", JSONB, nullable=False),  # [{"name", "args", "label"}]
    Column("rescored_from", Text, nullable=True),  # a rescoring: the experiment whose runs it scores
    Column("priority", Integer, nullable=True),
    Column("status", Text, nullable=False),  # an ExperimentStatus
    Column("cases_total", Integer, nullable=False),  # runs of cases it makes: cases x repeat
    Column("error", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True), nullable=True),
)

experiment_results = Table(
    "experiment_results",
    metadata,
    Column("experiment_id", Text, ForeignKey("experiments.experiment_id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("repetition", Integer, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("run_id", Text, nullable=True),
    Column("status", Text, nullable=False),  # a CaseStatus
    Column("run_status", Text, nullable=True),
    Column("scores", JSONB, nullable=False, server_default=text("'{}'::jsonb")),  # label -> {value, passed, reason}
    Column("error", Text, nullable=True),
    Column("cost_usd", Numeric(14, 6), nullable=False, server_default="0"),
    Column("tokens", BigInteger, nullable=False, server_default="0"),
    Column("latency_ms", BigInteger, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("experiment_id", "idx", "repetition", name="experiment_results_pkey"),
)

eval_judgements = Table(
    "eval_judgements",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("run_id", Text, ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("judge_key", Text, nullable=False),  # sha256 of the model, the rubric and what was graded
    Column("model", Text, nullable=False),
    Column("score", Float, nullable=False),
    Column("reason", Text, nullable=False),
    Column("input_tokens", BigInteger, nullable=False, server_default="0"),
    Column("output_tokens", BigInteger, nullable=False, server_default="0"),
    Column("cost_usd", Numeric(14, 6), nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "run_id", "judge_key", name="eval_judgements_pkey"),
)

scorers = Table(
    "scorers",
    metadata,
    Column("task_queue", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text, nullable=False, server_default=""),
    Column("worker", Text, nullable=False, server_default=""),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("task_queue", "name", name="scorers_pkey"),
)

# Budget pools (waypoint/store/budget.py, migration 0021). A tree's token, cost and step budgets are one
# pool keyed by its root run; each model call of the tree reserves from it before it goes out and
# settles what it spent after. `waiting`: the runs of the tree waiting for the calls in flight to settle.
MONEY = Numeric(20, 10)
budget_pools = Table(
    "budget_pools",
    metadata,
    Column("root_run_id", Text, ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("max_tokens", BigInteger, nullable=True),
    Column("max_cost_usd", MONEY, nullable=True),
    Column("max_steps", Integer, nullable=True),
    Column("used_tokens", BigInteger, nullable=False, server_default="0"),
    Column("used_cost_usd", MONEY, nullable=False, server_default="0"),
    Column("used_steps", Integer, nullable=False, server_default="0"),
    Column("waiting", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# What each tenant spent in a UTC day, against its daily budget (`[tenants.NAME]` of the limits file).
budget_tenant_days = Table(
    "budget_tenant_days",
    metadata,
    Column("tenant_id", Text, nullable=False),
    Column("day", Date, nullable=False),
    Column("used_tokens", BigInteger, nullable=False, server_default="0"),
    Column("used_cost_usd", MONEY, nullable=False, server_default="0"),
    Column("waiting", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("tenant_id", "day", name="budget_tenant_days_pkey"),
)

# The model calls in flight: one row per (run, step) (a retried attempt replaces its own), gone when
# the call settles or its run ends; past `expires_at` (its call's timeout) it no longer counts.
budget_reservations = Table(
    "budget_reservations",
    metadata,
    Column("run_id", Text, ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("step", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("pool", Text, ForeignKey("budget_pools.root_run_id", ondelete="CASCADE"), nullable=True),
    Column("tenant_id", Text, nullable=False),
    Column("day", Date, nullable=True),
    Column("tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cost_usd", MONEY, nullable=False),
    Column("steps", Integer, nullable=False),
    Column("reserved_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("run_id", "step", name="budget_reservations_pkey"),
)
