"""`python -m waypoint`: the same as the `waypoint` command."""

from waypoint.app.cli import main

main()
