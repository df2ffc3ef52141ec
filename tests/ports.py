"""Ports for servers that run in processes of their own (the Temporal dev server, `waypoint dev`,
`waypoint mcp --transport http`, a test MCP server).

A server in the test's own process takes a socket bound here already (`listen_on(host, 0)`, then
`start_api(server, sock)`): nothing can take its port in between. A server in another process
cannot be handed a socket, so its port is reserved instead, in two ways at once:

- from below the kernel's ephemeral range, where neither an outgoing connection nor a `bind(0)`
  (another test's, or the Temporal dev server's own) is ever given a port;
- with a lock file per port, held by this process until it exits (a crash releases it too), so
  two test processes (xdist workers, or two sessions on one machine) never hand out the same port.

A port is handed out once per process: a server a test stopped may linger on it.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from pathlib import Path
from typing import IO

from waypoint.app.embedded import port_is_free

_held: list[IO[str]] = []


def _range() -> tuple[int, int]:
    """Ports from 10000 up to the start of the ephemeral range (32768 on a default Linux)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return 10000, max(low, 12000)


def reserve_port() -> int:
    """A port on 127.0.0.1 that is free and that no other process of the test run will be given."""
    locks = Path(tempfile.gettempdir()) / f"waypoint-test-ports-{os.getuid()}"
    locks.mkdir(exist_ok=True)
    lo, hi = _range()
    start = random.randrange(lo, hi)
    for i in range(hi - lo):
        port = lo + (start - lo + i) % (hi - lo)
        fh = open(locks / str(port), "a+")  # noqa: SIM115 - held open: the lock lives as long as the file
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        if port_is_free(port):
            _held.append(fh)
            return port
        fh.close()
    raise RuntimeError(f"no free port left in {lo}-{hi}")
