"""The agent of `waypoint demo --chaos`, for its own worker processes (WAYPOINT_AGENTS=waypoint.demo_chaos):
the demo agent plus one slow `archive_report` call, which the demo kills a worker in."""

from waypoint.demo import chaos_variant

demo_chaos = chaos_variant()
