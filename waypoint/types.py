"""Messages exchanged between the workflow and its activities.

Everything here is a plain dataclass made of JSON-friendly fields, because it
travels through Temporal history and must be importable inside the workflow
sandbox: no IO, no third-party imports.

Activity names are part of the contract too: a name is frozen once released,
since renaming one breaks runs that are already in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

START_RUN = "start_run"
CALL_MODEL = "call_model"
RUN_TOOL = "run_tool"
RECORD_STEP = "record_step"
FINISH_RUN = "finish_run"


class RunStatus:
    """Values of `runs.status`."""

    RUNNING = "running"
    COMPLETED = "completed"
    MAX_STEPS = "max_steps"
    FAILED = "failed"

    FINISHED = (COMPLETED, MAX_STEPS, FAILED)


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by the model; `arguments` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ModelTurn:
    """What one model call answered."""

    model: str
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    latency_ms: int = 0


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    name: str
    output: str
    is_error: bool = False
    duration_ms: int = 0


@dataclass(frozen=True)
class RunInput:
    """Input of AgentRunWorkflow. The run id is the workflow id."""

    agent: str
    task: str
    tenant_id: str = "default"
    # Model spec overriding the agent's own, e.g. "openai:gpt-4o-mini".
    model: str | None = None
    max_steps: int | None = None


@dataclass(frozen=True)
class StartRunInput:
    run_id: str
    tenant_id: str
    agent: str
    task: str
    model: str | None
    max_steps: int | None


@dataclass(frozen=True)
class RunPlan:
    """What `start_run` resolved from the agent definition; fixed for the run's life."""

    model: str
    max_steps: int
    tool_names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CallModelInput:
    """The context is not carried here: the activity loads it from the checkpoint of `step - 1`."""

    run_id: str
    tenant_id: str
    agent: str
    step: int
    model: str


@dataclass(frozen=True)
class RunToolInput:
    run_id: str
    tenant_id: str
    agent: str
    step: int
    call_index: int
    call: ToolCall

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}:{self.step}:{self.call_index}"


@dataclass(frozen=True)
class StepRecord:
    run_id: str
    tenant_id: str
    step: int
    turn: ModelTurn
    tool_results: list[ToolResult] = field(default_factory=list)


@dataclass(frozen=True)
class FinishRunInput:
    run_id: str
    tenant_id: str
    status: str
    steps: int
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str
    steps: int
    output: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class RunProgress:
    """Answer of the workflow's `progress` query."""

    step: int
    status: str
    last_action: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
