"""What every command shares: settings, the one-line error, the async runner, common options.

Kept light on purpose: `waypoint --help` imports only this, typer and the command modules; what
a command needs beyond them it imports when it runs.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from waypoint.app.loop import run
from waypoint.errors import WaypointError

if TYPE_CHECKING:
    from waypoint.client import Waypoint
    from waypoint.config import Settings

T = TypeVar("T")
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
RunArg = Annotated[str, typer.Argument(help="Run id.", show_default=False)]
StepArg = Annotated[str, typer.Argument(help="Step number.", show_default=False)]
MemoryOpt = Annotated[
    str,
    typer.Option(
        help="What it recalls from long-term memory: then (as it was at that step of the original), "
        "now (as it is); neither recalls the original's later steps, all does."
    ),
]

# The global options (`--state-dir`, `--tenant`), set by the root callback before a command runs.
overrides: dict[str, Any] = {}


def settings(**extra: Any) -> Settings:
    from pydantic import ValidationError

    from waypoint.config import Settings

    try:
        return Settings(**{**overrides, **extra})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise WaypointError(f"invalid configuration: {problems}") from None


def fail(message: str) -> typer.Exit:
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(1)


def command(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async command; a WaypointError becomes one line on stderr and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return run(fn(*args, **kwargs))
        except WaypointError as exc:
            raise fail(str(exc)) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as exc:
            from waypoint.store.db import database_error

            translated = database_error(exc)
            if translated is None:
                raise  # a bug: its traceback is what a report needs
            raise fail(str(translated)) from None

    return wrapper


async def connect(*, temporal: bool = False) -> Waypoint:
    """The client, on the configured stack (Temporal connected on first use unless `temporal`),
    acting for the rest of the command as WAYPOINT_API_KEY's key (its tenant and role) when it is
    set, else as the installation's own admin."""
    from waypoint.client import Waypoint

    cfg = settings()
    wp = await Waypoint.connect(cfg, temporal=temporal)
    try:
        await act_as_key(wp, cfg)
    except BaseException:
        await wp.close()
        raise
    return wp


async def act_as_key(wp: Waypoint, cfg: Settings) -> None:
    """Enter the CLI's actor in the running command's task: WAYPOINT_API_KEY's key, else LOCAL."""
    from waypoint.access import LOCAL, Actor, Surface, enter

    if cfg.api_key is None:
        enter(LOCAL.at(Surface.CLI))
        return
    row = await wp.keys.valid(cfg.api_key.get_secret_value().strip())
    if row is None:
        raise WaypointError(
            "WAYPOINT_API_KEY is an unknown or revoked key: unset it to act as the installation's admin, "
            "or set a key `waypoint keys list` shows as valid"
        )
    if "tenant" in cfg.model_fields_set and cfg.tenant != row.tenant_id:  # named, not the default
        raise WaypointError(
            f"WAYPOINT_API_KEY acts for tenant {row.tenant_id!r}, not {cfg.tenant!r} (--tenant or WAYPOINT_TENANT): "
            "leave the tenant out, or use a key of that tenant"
        )
    enter(Actor(f"key:{row.id}", row.role, row.tenant_id, Surface.CLI))
