"""The `waypoint` command line: one module per noun (the stack, starting runs, reading runs,
messages to a run, memory, compaction, the HTTP API), every command name as it always was.

Bad input, usage errors included, prints one line starting with `error:` on stderr and exits 1.
"""

from __future__ import annotations

import atexit
import difflib
import os
import sys
from pathlib import Path
from typing import Annotated

import click
import typer

from waypoint.app.cli import api, memory, messages, run, runs, schedule, stack
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


for module in (stack, run, runs, messages, memory, schedule, api):
    module.register(app)


def _usage_error(exc: click.UsageError) -> str:
    """One line for a usage error, with the closest command when a name was misspelled."""
    message = exc.format_message()
    ctx = exc.ctx
    group = ctx.command if ctx else None
    if isinstance(group, click.Group) and message.startswith("No such command"):
        typed = message.split("'")[1] if "'" in message else ""
        names = list(group.commands)
        close = difflib.get_close_matches(typed, names, n=1)
        if close:
            message += f" Did you mean `{close[0]}`?"
    where = f" (see `{ctx.command_path} --help`)" if ctx else ""
    return " ".join(message.split()) + where


def main(argv: list[str] | None = None) -> None:
    code = 0
    try:
        # Not standalone: click returns an Exit's code instead of exiting, and raises usage errors here.
        result = app(args=argv, standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except click.UsageError as exc:
        print(f"error: {_usage_error(exc)}", file=sys.stderr)
        code = 1
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.Abort:
        print("error: aborted", file=sys.stderr)
        code = 1
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    # The Temporal client's native threads can abort CPython's finalization at exit
    # ("PyGILState_Release ... must be current", temporalio/sdk-python issue 300), so
    # run the exit hooks ourselves and leave without finalizing.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
