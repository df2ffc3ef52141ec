"""Reaching Temporal: the connection, the one mapping of its RPC failures to Waypoint's errors, the
fair-share priority a started workflow carries, and what every part of the gateway shares."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator

from temporalio.client import Client
from temporalio.common import Priority
from temporalio.service import RPCError, RPCStatusCode

from waypoint import telemetry
from waypoint.codec import data_converter, header_codec_behavior
from waypoint.config import Settings
from waypoint.errors import ConfigError, Conflict, InvalidInput, NotFound, Unavailable, WaypointError


def rpc_error(exc: RPCError, doing: str) -> WaypointError:
    """The one mapping of a Temporal RPC failure, by its status code."""
    message = f"Temporal refused to {doing}: {exc.message}"
    if exc.status == RPCStatusCode.NOT_FOUND:
        return NotFound(message)
    if exc.status in (RPCStatusCode.ALREADY_EXISTS, RPCStatusCode.FAILED_PRECONDITION):
        return Conflict(message)
    if exc.status == RPCStatusCode.INVALID_ARGUMENT:
        return InvalidInput(message)
    return Unavailable(f"{message} (is Temporal at the configured address healthy?)")


def fair_share(settings: Settings, tenant_id: str, priority: int | None) -> Priority:
    """What a started workflow carries: busy workers take higher-priority tasks first, then share each
    priority between tenants by weight. Temporal gives its activities and child workflows the same."""
    return Priority(
        priority_key=priority or None,
        fairness_key=tenant_id,
        fairness_weight=settings.limits.weight(tenant_id),
    )


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), 0.5):
            return True
    except (OSError, ValueError):
        return False


async def connect(settings: Settings, *, wait_seconds: float = 15.0) -> Client:
    """A client of the configured Temporal. A server that accepts connections but is not ready yet
    (a dev server starting) is waited for, up to `wait_seconds`; one that refuses them fails at once."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return await Client.connect(
                settings.temporal_address,
                namespace=settings.temporal_namespace,
                # Workers built from this client use its converter too: with codec keys, both sides encrypt.
                data_converter=data_converter(settings),
                header_codec_behavior=header_codec_behavior(settings),
                # One trace per run from here on (worker spans join it); Temporal SDK metrics if asked for.
                interceptors=telemetry.client_interceptors(settings),
                runtime=telemetry.temporal_runtime(settings),
            )
        except RuntimeError as exc:  # the SDK's bridge reports every connect failure so
            if time.monotonic() < deadline and _listening(settings.temporal_address):
                await asyncio.sleep(0.25)
                continue
            raise Unavailable(
                f"cannot reach Temporal at {settings.temporal_address} ({str(exc).splitlines()[0]}): "
                "start it with `waypoint dev` or set WAYPOINT_TEMPORAL_ADDRESS"
            ) from None


class GatewayBase:
    """The Temporal client and settings every part of the gateway works with."""

    def __init__(self, client: Client, settings: Settings):
        self.client = client
        self.settings = settings

    @contextlib.contextmanager
    def readable(self, run_id: str) -> Iterator[None]:
        """A payload this client cannot decode (the SDK's converter raises KeyError for an unknown
        encoding): without codec keys, an encrypted run's answers are unreadable."""
        try:
            yield
        except KeyError:
            if self.client.data_converter.payload_codec is not None:
                raise
            raise ConfigError(
                f"run {run_id}'s payloads are encrypted and this client has no keys: set WAYPOINT_CODEC_KEYS "
                "to the keys the workers use"
            ) from None

    @property
    def traced(self) -> bool:
        """Whether this client propagates traces to the workers (then a start opens the run's trace)."""
        from temporalio.contrib.opentelemetry import TracingInterceptor

        return any(isinstance(i, TracingInterceptor) for i in self.client.config().get("interceptors", []))
