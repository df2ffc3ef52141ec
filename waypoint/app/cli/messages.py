"""Messages to a running run: `pause`, `resume`, `cancel`, `send`, `approve`, `deny`.

Each answers with the run's live state, or one line with the reason a run refused it."""

from __future__ import annotations

from typing import Annotated

import typer

from waypoint.app.cli._common import JsonOpt, RunArg, command, connect

CallOpt = Annotated[str | None, typer.Option("--call", help="Tool call id, when several wait.")]
ReasonOpt = Annotated[str | None, typer.Option(help="Why; the model reads it.")]


def register(app: typer.Typer) -> None:
    for fn in (pause, resume, cancel, send, approve, deny):
        app.command()(fn)


async def _message(run_id: str, verb: str, as_json: bool, *args: object, **kw: object) -> None:
    from waypoint.app import console as out

    async with await connect(temporal=True) as wp:
        progress = await getattr(wp, verb)(run_id, *args, **kw)
    if as_json:
        out.print_json(progress)
    else:
        out.console.print(f"{run_id}: {verb} accepted (step {progress.step}, {progress.status})")


@command
async def pause(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Pause a run before its next step."""
    await _message(run_id, "pause", as_json)


@command
async def resume(run_id: RunArg, as_json: JsonOpt = False) -> None:
    """Resume a paused run."""
    await _message(run_id, "resume", as_json)


@command
async def cancel(run_id: RunArg, reason: ReasonOpt = None, as_json: JsonOpt = False) -> None:
    """Cancel a run and its sub-agent runs: no call starts after it, tools in flight finish (status `cancelled`)."""
    await _message(run_id, "cancel", as_json, reason)


@command
async def send(
    run_id: RunArg, text: Annotated[str, typer.Argument(help="The message.")], as_json: JsonOpt = False
) -> None:
    """Send a user message to a run; its next model call reads it."""
    await _message(run_id, "send", as_json, text)


@command
async def approve(
    run_id: RunArg,
    call: CallOpt = None,
    reason: ReasonOpt = None,
    edited: Annotated[
        str | None, typer.Option("--input", help="JSON object: the arguments the tool runs with instead.")
    ] = None,
    answer: Annotated[str | None, typer.Option(help="The answer to an ask_human call (its result).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve a tool call that waits for approval (with an edited input, or an ask_human answer)."""
    import json

    from waypoint.errors import InvalidInput

    edited_input = None
    if edited is not None:
        try:
            edited_input = json.loads(edited)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"--input must be a JSON object of the tool's arguments: {exc.msg}") from None
    await _message(run_id, "approve", as_json, call, reason, edited_input=edited_input, answer=answer)


@command
async def deny(run_id: RunArg, call: CallOpt = None, reason: ReasonOpt = None, as_json: JsonOpt = False) -> None:
    """Deny a tool call that waits for approval; the model is told why."""
    await _message(run_id, "deny", as_json, call, reason)
