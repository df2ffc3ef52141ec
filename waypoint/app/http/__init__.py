"""The HTTP API: Waypoint's own endpoints, live streams, and the Agent Protocol (`waypoint serve`)."""

from waypoint.app.http.app import create_app

__all__ = ["create_app"]
