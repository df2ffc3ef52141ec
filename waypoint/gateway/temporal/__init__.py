"""Everything the client asks of Temporal, with Temporal's failures mapped by type to Waypoint errors.

Imported only when a command needs Temporal (the `temporalio` client takes a noticeable part
of a second to import), so listing runs from Postgres never pays for it.

The gateway is one class built from one module per kind of call: `_connect` (the connection, the
mapping of RPC failures), `_starts` (starting and stopping workflows, the memory worker),
`_reads` (describe and history reads), `_messages` (queries, updates, results) and `_replay`
(replaying histories, deployment versions). Schedules live in `waypoint.gateway.schedule` and
`waypoint.gateway.agent_schedules`.
"""

from __future__ import annotations

from waypoint.gateway.temporal._connect import GatewayBase, connect, fair_share, rpc_error
from waypoint.gateway.temporal._messages import Messages
from waypoint.gateway.temporal._reads import Blocked, HistoryFacts
from waypoint.gateway.temporal._replay import Replays, failure_text, quiet_runtime, workflow_name
from waypoint.gateway.temporal._starts import Starts

__all__ = [
    "Blocked",
    "HistoryFacts",
    "TemporalGateway",
    "connect",
    "failure_text",
    "fair_share",
    "quiet_runtime",
    "rpc_error",
    "workflow_name",
]


class TemporalGateway(Starts, Messages, Replays, GatewayBase):
    """The client's Temporal calls: start, message, query and replay runs; reach the memory worker."""
