"""The Python API: the runtime's public face (`Waypoint`), and the typed values it hands out.

`Waypoint` composes one private service per capability (`_runs`, `_starts`, `_travel`, `_live`,
`_threads`, `_turns`, `_schedules`, `_evals`, `_memory`, `_deploy`, `_limits`, `_keys`,
`_webhooks`, ...), each built from the store, the Temporal link and the tenant scope, never from
`Waypoint` itself. Surfaces (CLI, HTTP, MCP, the viewer) import from here, not from the store.
"""

from waypoint.client._assistants import builtin
from waypoint.client._audit import AuditPage, AuditQuery
from waypoint.client._deploy import ReplayOutcome
from waypoint.client._eval_reports import (
    ExperimentComparison,
    ExperimentReport,
    GateFailure,
    check_gates,
    gate,
    parse_gates,
)
from waypoint.client._evals import CONCURRENCY_MAX, REPEAT_MAX, RUN_IDS_MAX
from waypoint.client._limits import FleetBucket, FleetLimits, FleetRun, FleetStats, ModelKeyStats
from waypoint.client._runs import RunStatusView
from waypoint.client._schedules import CATCHUP_DEFAULT_SECONDS, Schedules
from waypoint.client._scope import database_url
from waypoint.client._starts import Claim, StartedRun
from waypoint.client._turns import MULTITASK_STRATEGIES, StartedTurn, Turn, newest_started
from waypoint.client._views import (
    as_json,
    caller_json,
    child_json,
    delivery_line,
    delivery_summary,
    node_json,
    tree_json,
)
from waypoint.client._waypoint import Waypoint
from waypoint.store.assistants import AssistantRow
from waypoint.store.listen import Listener
from waypoint.store.rows import EventRow, RunRow
from waypoint.store.schedules import ScheduleRow
from waypoint.store.threads import ThreadRow, ThreadRun
from waypoint.store.travel import StepState
from waypoint.store.webhooks import WebhookDelivery

__all__ = [
    "AuditPage",
    "AuditQuery",
    "CATCHUP_DEFAULT_SECONDS",
    "CONCURRENCY_MAX",
    "MULTITASK_STRATEGIES",
    "REPEAT_MAX",
    "RUN_IDS_MAX",
    "Claim",
    "ExperimentComparison",
    "ExperimentReport",
    "FleetBucket",
    "FleetLimits",
    "FleetRun",
    "FleetStats",
    "GateFailure",
    "ModelKeyStats",
    "ReplayOutcome",
    "RunStatusView",
    "Schedules",
    "StartedRun",
    "StartedTurn",
    "Turn",
    "Waypoint",
    "builtin",
    "check_gates",
    "database_url",
    "gate",
    "newest_started",
    "parse_gates",
    # the typed rows the client hands out, and how the surfaces show them (`_views`): a surface takes
    # them from here, not from the store
    "AssistantRow",
    "EventRow",
    "Listener",
    "RunRow",
    "ScheduleRow",
    "StepState",
    "ThreadRow",
    "ThreadRun",
    "WebhookDelivery",
    "as_json",
    "caller_json",
    "child_json",
    "delivery_line",
    "delivery_summary",
    "node_json",
    "tree_json",
]
