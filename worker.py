"""A Waypoint worker: `python worker.py` (the same as `waypoint worker`).

Configured by WAYPOINT_* variables; see the README.
"""

from waypoint.app.cli import main

if __name__ == "__main__":
    main(["worker"])
