"""The `waypoint` command line: one module per noun (the stack, starting runs, reading runs,
messages to a run, memory, compaction, scheduled agents, evaluations, the HTTP API), every command
name as it always was.

Bad input, usage errors included, prints one line starting with `error:` on stderr and exits 1.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

try:  # typer 0.2x carries its own copy of click and raises its exceptions
    from typer._click import exceptions as usage
except ImportError:  # pragma: no cover - older typer raises click's own
    from click import exceptions as usage  # type: ignore[no-redef]

from waypoint.app.cli import (
    agents,
    api,
    assistants,
    audit,
    compaction,
    cron,
    deploy,
    evals,
    limits,
    mcp,
    memory,
    messages,
    rerun,
    run,
    runs,
    stack,
    webhooks,
)
from waypoint.app.cli._common import overrides

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable, time-travelling LLM agent runs on Temporal.",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"waypoint {version('waypoint')}")
        raise typer.Exit()


@app.callback()
def _global(
    state_dir: Annotated[Path | None, typer.Option(help="State folder (WAYPOINT_STATE_DIR).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Tenant id (WAYPOINT_TENANT).")] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if state_dir is not None:
        overrides["state_dir"] = state_dir
    if tenant is not None:
        overrides["tenant"] = tenant


_MODULES = (
    stack,
    run,
    runs,
    agents,
    rerun,
    evals,
    messages,
    memory,
    compaction,
    cron,
    limits,
    api,
    mcp,
    webhooks,
    assistants,
    deploy,
    audit,
)
for module in _MODULES:
    module.register(app)


def _usage_error(exc: usage.UsageError) -> str:
    """One line for a usage error (click already names the closest command or option), and where to look."""
    where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
    return " ".join(exc.format_message().split()) + where


def main(argv: list[str] | None = None) -> None:
    leave(run_command(argv))


def run_command(argv: list[str] | None = None) -> int:
    """Run one command line and return its exit code, which `main` exits with. Tests call it to run
    a command inside their own process (no interpreter to start, no imports to repeat)."""
    overrides.clear()  # the global options are this command line's only
    code = 0
    try:
        # Not standalone: click returns an Exit's code instead of exiting, and raises usage errors here.
        result = app(args=argv, standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except usage.NoArgsIsHelpError as exc:  # `waypoint` alone, or a group alone: its help
        print(exc.format_message())
    except usage.UsageError as exc:
        print(f"error: {_usage_error(exc)}", file=sys.stderr)
        code = 1
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        code = 1
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code


def leave(code: int) -> NoReturn:
    """Exit with `code`. The Temporal client's native threads can abort CPython's finalization at
    exit ("PyGILState_Release ... must be current", temporalio/sdk-python issue 300), so run the
    exit hooks here and leave without finalizing."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
