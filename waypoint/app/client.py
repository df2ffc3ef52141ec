"""Moved to `waypoint.client`; this name stays one release for code written against it (earlier
docs showed `waypoint.app.client.as_json`). Import from `waypoint.client`."""

from waypoint.client import *  # noqa: F403
from waypoint.client import __all__ as __all__
