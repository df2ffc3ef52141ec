"""Waypoint's closed sets and frozen names, in one place.

Imported by workflow code, so: the standard library only.

Activity, workflow, update and query names are part of the contract with runs in flight:
a name is frozen once released, since renaming one breaks the runs already running.
Values of the string enums are what Postgres and Temporal history hold; a `StrEnum` member
equals its value, so rows and payloads written before the enums existed compare equal.
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Values of `runs.status`."""

    # Not started yet: a delayed run waits for its start time (`runs.start_at`), an enqueued run for
    # the run before it on its thread (`runs.after_run_id`). Either can be cancelled before it starts.
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    WAITING_APPROVAL = "waiting_approval"
    # A model call waits for capacity: a limit of its model key or tenant (waypoint/limits.py), a
    # shared cooldown after a 429, or an open circuit breaker. `runs.waiting_key` names the key.
    WAITING_CAPACITY = "waiting_capacity"
    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def finished(self) -> bool:
        return self in FINISHED

    @property
    def unsuccessful(self) -> bool:
        """A finished run the CLI reports with exit code 1."""
        return self in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.BUDGET_EXCEEDED)


FINISHED = frozenset(
    {RunStatus.COMPLETED, RunStatus.MAX_STEPS, RunStatus.BUDGET_EXCEEDED, RunStatus.CANCELLED, RunStatus.FAILED}
)
# Not started yet: the run exists (its row, no steps) and waits for its time or its turn.
WAITING_TO_START = frozenset({RunStatus.SCHEDULED, RunStatus.QUEUED})
LIVE = frozenset({RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.WAITING_APPROVAL, RunStatus.WAITING_CAPACITY})
# Shown, never stored: an unfinished run whose workflow task keeps failing (derived from Temporal at read time).
STUCK = "stuck"
# The status shown for a run Temporal has and Postgres has not yet (its worker writes its row at its
# first workflow task); never stored.
STARTING = "starting"


class RunSort(StrEnum):
    """Orders of a runs listing. Each is a keyset (value, run_id), so pages never skip or repeat a
    run whose value holds still; a live run's tokens, cost, steps and duration grow, so it can
    move between pages of those sorts."""

    NEWEST = "newest"
    OLDEST = "oldest"
    TOKENS = "tokens"  # most tokens (input + output) first
    COST = "cost"  # most expensive first
    STEPS = "steps"  # most steps first
    DURATION = "duration"  # longest first (to finished_at, or to updated_at while live)


class FleetPeriod(StrEnum):
    """The periods the fleet's figures cover (`waypoint fleet --period`, GET /v1/fleet?period=)."""

    HOUR = "1h"
    SIX_HOURS = "6h"
    DAY = "24h"
    WEEK = "7d"
    MONTH = "30d"


class EventKind(StrEnum):
    """Values of `events.kind`: what one entry of a run's append-only log records."""

    RUN_STARTED = "run_started"  # the instructions, the task, the resolved plan
    USER_MESSAGE = "user_message"
    DECISION = "decision"  # a human approved or denied a tool call
    MODEL_ATTEMPT_FAILED = "model_attempt_failed"
    MODEL_RESPONSE = "model_response"
    # A step's model kept failing (or cannot be called here): the step, and the run's later steps, go
    # to the agent's next model; {from, to, after_attempts, last_error, error_type}.
    MODEL_FAILOVER = "model_failover"
    TOOL_RESULT = "tool_result"
    STATUS_CHANGED = "status_changed"
    # A cancel came during a step: what was in flight and how each part ended, and whether the step is
    # `recorded` (its model answered) or has no checkpoint (its model call was cancelled); workflows/cancels.py.
    STEP_CANCELLED = "step_cancelled"
    # A model call found a budget spent: its tree's pool, or its tenant's day; the run waits or ends
    # (`budget_exceeded`). {scope, measure, action, used, reserved, limit, needed, reason}.
    BUDGET_REACHED = "budget_reached"
    RUN_FINISHED = "run_finished"


# Events whose payloads the model reads (through working memory) and compaction summarizes.
MESSAGE_KINDS = (EventKind.RUN_STARTED, EventKind.USER_MESSAGE, EventKind.MODEL_RESPONSE, EventKind.TOOL_RESULT)
TURN_KINDS = (EventKind.USER_MESSAGE, EventKind.DECISION, EventKind.MODEL_RESPONSE, EventKind.TOOL_RESULT)


class ToolOutcome(StrEnum):
    """How one tool call ended (`tool_effects.outcome`, `ToolResult.outcome`)."""

    OK = "ok"
    BAD_CALL = "bad_call"  # unknown tool or invalid arguments: the model should repair it
    TOOL_ERROR = "tool_error"  # the tool raised ToolError
    DENIED = "denied"  # by a human
    ANSWERED = "answered"  # an ask_human call: a human's answer is its result
    CANCELLED = "cancelled"  # the run was cancelled (or its deadline passed) while the call waited
    FAILED = "failed"  # its attempts ran out
    NOT_RECORDED = (
        "not_recorded"  # a rerun with recorded tools: no recorded call matched, and the tool may not run again
    )

    @property
    def in_ledger(self) -> bool:
        """`run_tool` wrote it to the tool_effects ledger (the others are decided by the workflow)."""
        return self in (ToolOutcome.OK, ToolOutcome.BAD_CALL, ToolOutcome.TOOL_ERROR, ToolOutcome.NOT_RECORDED)


class DecisionKind(StrEnum):
    """What a human decided on a tool call that waited for approval (`decision` events)."""

    APPROVED = "approved"
    DENIED = "denied"


class LineageKind(StrEnum):
    """Values of `runs.lineage_kind`: how a run came from its parent."""

    FORK = "fork"  # `waypoint fork`: the parent's state at a step, maybe a new message or model
    RERUN = "rerun"  # `waypoint rerun`: the same run again with a change, tools answered from the record
    SUBAGENT = "subagent"  # a sub-agent run its parent started with a tool call (a child workflow)


class ToolMode(StrEnum):
    """How a rerun's tool calls run (`waypoint rerun --tools`)."""

    RECORDED = "recorded"  # a call matching the parent's at the same step and position gets the recorded result
    LIVE = "live"  # every call runs


class MemoryView(StrEnum):
    """What a rerun or fork recalls from long-term memory (`waypoint rerun --memory`). Never, unless
    `all`: the episodes its original (and the original's own ancestors) stored after the step it
    starts from, a future it did not live, final answer included."""

    THEN = "then"  # memory as it was when the original reached that step (its start, for a rerun from step 0)
    NOW = "now"  # memory as it is now
    ALL = "all"  # memory as it is now, the original's later episodes included


class ScheduleOverlap(StrEnum):
    """What a scheduled agent does when its time comes while the run it fired last still runs
    (Temporal's ScheduleOverlapPolicy of the same name)."""

    SKIP = "skip"  # this fire is dropped
    BUFFER_ONE = "buffer_one"  # it starts when the running one ends; at most one waits
    ALLOW_ALL = "allow_all"  # it starts at once, alongside
    CANCEL_OTHER = "cancel_other"  # the running one is cancelled, then this one starts


class Activity(StrEnum):
    """Activity names (frozen)."""

    START_RUN = "start_run"
    CALL_MODEL = "call_model"
    RUN_TOOL = "run_tool"
    RECORDED_CALLS = "recorded_calls"
    RECORD_STEP = "record_step"
    FINISH_RUN = "finish_run"
    SET_STATUS = "set_run_status"
    MEMORY_STEP = "memory_step"
    MEMORY_ADMIN = "memory_admin"
    SAVE_EPISODES = "save_episodes"
    COMPACT_RUN = "compact_run"
    SELECT_RUNS = "select_runs_to_compact"
    REMEMBER_MISSING = "remember_missing"
    AGENT_RESULT = "agent_result"
    RECORD_FAILOVER = "record_failover"
    DELIVER_WEBHOOK = "deliver_webhook"  # runs from before webhook-2: the run's workflow posted itself
    # A webhook delivery (workflows/webhooks.py): its row (made from the run's final state), one
    # signed POST per attempt, and the dead-letter mark once its retry window has run out.
    OPEN_WEBHOOK = "open_webhook_delivery"
    POST_WEBHOOK = "post_webhook"
    CLOSE_WEBHOOK = "close_webhook_delivery"
    # A run that waits before it starts (delayed, enqueued, joining a thread): its row at once,
    # its place on a thread, and the wait for the run before it (workflows/starts.py).
    HOLD_RUN = "hold_run"
    JOIN_THREAD = "join_thread"
    AWAIT_RUN = "await_run"
    # An experiment (workflows/experiments.py): its next cases, one case's run input, a judge's
    # verdict on a case's run (a model call: a remote activity), a case's scores, the summary.
    EXPERIMENT_PLAN = "experiment_plan"
    EXPERIMENT_CASE = "experiment_case"
    JUDGE_CASE = "judge_case"
    SCORE_CASE = "score_case"
    FINISH_EXPERIMENT = "finish_experiment"


class WebhookEvent(StrEnum):
    """The `event` of a webhook body."""

    RUN_FINISHED = "run.finished"  # the run ended (any final status): its final state


class DeliveryStatus(StrEnum):
    """Where a webhook delivery stands: retried until delivered, or failed (the dead-letter list)."""

    PENDING = "pending"  # not delivered yet: the next attempt comes while its retry window lasts
    DELIVERED = "delivered"  # a 2xx answer
    FAILED = "failed"  # its window ran out, or the receiver refused it (a 4xx): `webhooks redeliver` sends it again


class Workflow(StrEnum):
    """Workflow type names (frozen)."""

    AGENT_RUN = "AgentRunWorkflow"
    COMPACTION = "CompactionWorkflow"
    MEMORY_REQUEST = "MemoryRequestWorkflow"
    EXPERIMENT = "ExperimentWorkflow"
    WEBHOOK_DELIVERY = "WebhookDeliveryWorkflow"


class VersioningMode(StrEnum):
    """How a run started on a deployment version moves when another version becomes current."""

    # The next workflow task of a run goes to the new current version: every command-sequence change
    # in Waypoint's workflows is guarded by `workflow.patched`, and `waypoint check-deploy` proves it.
    AUTO_UPGRADE = "auto-upgrade"
    # A run stays on the version it started on: keep the old workers until their runs end.
    PINNED = "pinned"


class WorkflowSandbox(StrEnum):
    """How a worker's workflow sandbox treats Waypoint's own modules."""

    # Imported once, outside the sandbox, and shared by every workflow run of the worker: a run's
    # first workflow task skips importing them afresh (about 60-70 ms of CPU a workflow instance on
    # 2 cores: each run, each sub-agent run, each run brought back after the cache evicted it). The
    # workflows' code is still checked in the full sandbox by the replay tests and the time-skipping
    # tests, and `waypoint check-deploy` replays with the same pass-through.
    PASSTHROUGH = "passthrough"
    # Imported afresh inside the sandbox for each workflow instance, every call in them checked.
    FULL = "full"


class Update(StrEnum):
    """Updates an agent run takes (frozen)."""

    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    SEND = "send"
    APPROVE = "approve"
    DENY = "deny"


class Query(StrEnum):
    PROGRESS = "progress"


class Signal(StrEnum):
    """Signals an agent run takes (frozen)."""

    # The shared limiter freed capacity this run's model call waits for: ask again now.
    CAPACITY = "capacity"


class WaitReason(StrEnum):
    """Why the shared limiter made a model call wait (`CapacityWait.reason`)."""

    IN_FLIGHT = "in_flight"  # the key's calls in flight are at its limit
    REQUESTS = "requests"  # the key's requests of the last minute are
    TOKENS = "tokens"  # the key's tokens of the last minute are
    TENANT = "tenant"  # the tenant's runs with a call in flight are
    COOLDOWN = "cooldown"  # a 429 (or 529) said when the key takes calls again
    BREAKER = "breaker"  # the key failed with retryable errors until its circuit breaker opened
    RECOVERED = "recovered"  # not a wait: a model the run failed over from is healthy again
    # A budget (its tree's pool, its tenant's day) has room only once the calls in flight settle, or
    # the tenant's day is spent and its limits say wait (waypoint/store/budget.py).
    BUDGET = "budget"


class MemoryOp(StrEnum):
    """What a `MemoryRequest` asks the memory worker."""

    SEARCH = "search"
    SHOW = "show"
    FORGET = "forget"


class DemoAgent(StrEnum):
    """The demos `waypoint demo --agent` runs."""

    DEMO = "demo"  # one agent reads the notes, counts their words, writes report.md
    RESEARCH = "research"  # a lead agent fans the notes out to sub-agents at once; one writes research.md


class EpisodeKind(StrEnum):
    STEP = "step"
    DECISION = "decision"
    SUMMARY = "summary"
    FACT = "fact"


# The memory tools whose results are pinned (pin_decision) or stored as their own episodes.
PIN_TOOL = "pin_decision"
MEMORY_SAVE_TOOL = "memory_save"


def memory_task_queue(task_queue: str) -> str:
    """The queue of the worker that owns episodic memory."""
    return f"{task_queue}-memory"


# The tool a typed agent (one with an `output_type`) gives its answer through (waypoint.typed_answers).
FINAL_ANSWER_TOOL = "final_answer"
# The built-in tool an agent with `ask_human=True` calls to ask its human a question.
ASK_HUMAN_TOOL = "ask_human"


class ExperimentStatus(StrEnum):
    """Values of `experiments.status`."""

    RUNNING = "running"
    COMPLETED = "completed"  # every case ran and was scored or errored
    CANCELLED = "cancelled"
    FAILED = "failed"  # the experiment itself could not go on (its workflow failed)


class CaseStatus(StrEnum):
    """How one case of an experiment ended (`experiment_results.status`)."""

    SCORED = "scored"
    # Not scored: a scorer raised, the judge could not be reached, the case's run could not start.
    # The message says which; the experiment goes on.
    ERRORED = "errored"


class BuiltinScorer(StrEnum):
    """The scorers every worker has (`waypoint eval --scorer NAME[:key=value,...]`)."""

    EXACT = "exact"  # the answer equals the expected output
    CONTAINS = "contains"  # the answer contains it (or `text=`)
    REGEX = "regex"  # the answer matches `pattern=` (or the expected output as a pattern)
    JSON_SCHEMA = "json_schema"  # the answer is JSON valid against `schema=` (or the case's metadata.schema)
    TRAJECTORY = "trajectory"  # the tool calls match the expected ones (`mode=`)
    NUMERIC = "numeric"  # the answer's number is within `tolerance=` of the expected one
    COST = "cost"  # the run cost at most `max=` USD
    STEPS = "steps"  # the run took at most `max=` steps
    JUDGE = "judge"  # a model grades the answer by `rubric=` (a durable activity; the verdict is recorded)


class TrajectoryMode(StrEnum):
    """How `trajectory` compares a run's tool calls with the expected ones."""

    IN_ORDER = "in_order"  # the same calls, in the same order
    ANY_ORDER = "any_order"  # the same calls, in any order
    SUBSET = "subset"  # every expected call is among them (others may be too)


def experiment_run_id(experiment_id: str, index: int, repetition: int) -> str:
    """The run id of case `index`'s `repetition`-th run in an experiment: derived, never drawn, so a
    retried or replayed experiment can only ever name (and start) the same run."""
    return f"{experiment_id}.{index}.{repetition}"


def child_run_id(run_id: str, step: int, call_index: int) -> str:
    """The run id of the sub-agent run that call `call_index` of `step` starts: derived, never drawn,
    so a retried or replayed parent can only ever name (and start) the same child."""
    return f"{run_id}.{step}.{call_index}"


def idempotency_key(run_id: str, step: int, call_index: int) -> str:
    """The key of one tool call, stable across retries: `run_id:step:call_index`."""
    return f"{run_id}:{step}:{call_index}"


class Provider(StrEnum):
    OPENAI = "openai"  # any OpenAI-compatible chat-completions endpoint
    ANTHROPIC = "anthropic"  # Anthropic's Messages API, through the `anthropic` SDK (extra `anthropic`)
    GOOGLE = "google"  # Gemini, through the `google-genai` SDK (extra `google`)
    SCRIPTED = "scripted"  # the agent's own ScriptedModel


# The error type of a model attempt that ended without a word (its worker died, or its heartbeat
# stopped): the next attempt logs it as `model_attempt_failed`.
LOST_ATTEMPT = "AttemptLost"
