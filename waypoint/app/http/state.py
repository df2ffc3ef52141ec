"""What every request handler shares: the client, the stream hub, the settings, whether auth is on,
the rate limits' counts."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from waypoint.app.http.hub import StreamHub
from waypoint.app.http.limits import HttpLimits
from waypoint.client import Waypoint
from waypoint.config import Settings


@dataclass
class ApiState:
    wp: Waypoint
    hub: StreamHub
    settings: Settings
    auth: bool
    limits: HttpLimits


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state
