"""The forms on a run's page: pause, resume, cancel, send, approve, deny, fork. Each answers with
the run's page again: with what happened, or with why it was refused (`as_refusal`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Annotated

from fastapi import APIRouter, Depends, Form
from fastapi.responses import RedirectResponse, Response

from waypoint.app.http.ui.render import Api, Tenant, answers_errors, as_refusal, back_to, own_form
from waypoint.errors import InvalidInput
from waypoint.types import RunProgress

router = APIRouter(prefix="/ui", include_in_schema=False, dependencies=[Depends(own_form)])


async def act(run_id: str, done: str, call: Awaitable[RunProgress]) -> RedirectResponse:
    """Run an action; back to the run page with what happened (a refusal goes back with its reason)."""
    progress = await call
    return back_to(run_id, notice=f"{done}: the run is {progress.status} at step {progress.step}")


@router.post("/runs/{run_id}/pause")
@answers_errors(as_refusal)
async def pause(run_id: str, api: Api, tenant: Tenant) -> Response:
    return await act(run_id, "paused", api.wp.pause(run_id, tenant_id=tenant))


@router.post("/runs/{run_id}/resume")
@answers_errors(as_refusal)
async def resume(run_id: str, api: Api, tenant: Tenant) -> Response:
    return await act(run_id, "resumed", api.wp.resume(run_id, tenant_id=tenant))


@router.post("/runs/{run_id}/cancel")
@answers_errors(as_refusal)
async def cancel(run_id: str, api: Api, tenant: Tenant, reason: Annotated[str, Form()] = "") -> Response:
    return await act(run_id, "cancel asked", api.wp.cancel(run_id, reason.strip() or None, tenant_id=tenant))


@router.post("/runs/{run_id}/send")
@answers_errors(as_refusal)
async def send(run_id: str, api: Api, tenant: Tenant, text: Annotated[str, Form()] = "") -> Response:
    return await act(run_id, "message sent", api.wp.send(run_id, text, tenant_id=tenant))


CallId = Annotated[str, Form()]
Reason = Annotated[str, Form()]


async def decide(
    run_id: str,
    api: Api,
    tenant: Tenant,
    call_id: str,
    reason: str,
    *,
    approve: bool,
    answer: str = "",
    edited: str = "",
) -> Response:
    """Approve or deny the call that waits (the form's `call_id`), with an optional reason; an
    approval may carry an edited input (JSON) or an ask_human call's answer."""
    why = reason.strip() or None
    if not approve:
        return await act(run_id, "denied", api.wp.deny(run_id, call_id or None, why, tenant_id=tenant))
    edited_input = None
    if edited.strip():
        try:
            edited_input = json.loads(edited)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the edited input must be a JSON object of the tool's arguments: {exc.msg}") from None
    call = api.wp.approve(
        run_id, call_id or None, why, edited_input=edited_input, answer=answer or None, tenant_id=tenant
    )
    return await act(run_id, "approved", call)


@router.post("/runs/{run_id}/approve")
@answers_errors(as_refusal)
async def approve(
    run_id: str,
    api: Api,
    tenant: Tenant,
    call_id: CallId = "",
    reason: Reason = "",
    answer: Annotated[str, Form()] = "",
    edited_input: Annotated[str, Form()] = "",
) -> Response:
    return await decide(run_id, api, tenant, call_id, reason, approve=True, answer=answer, edited=edited_input)


@router.post("/runs/{run_id}/deny")
@answers_errors(as_refusal)
async def deny(run_id: str, api: Api, tenant: Tenant, call_id: CallId = "", reason: Reason = "") -> Response:
    return await decide(run_id, api, tenant, call_id, reason, approve=False)


@router.post("/runs/{run_id}/fork")
@answers_errors(as_refusal)
async def fork(
    run_id: str,
    api: Api,
    tenant: Tenant,
    step: Annotated[int, Form()],
    message: Annotated[str, Form()] = "",
    model: Annotated[str, Form()] = "",
) -> Response:
    new_id = await api.wp.fork(
        run_id, step, message=message.strip() or None, model=model.strip() or None, tenant_id=tenant
    )
    return back_to(new_id, notice=f"forked from {run_id} at step {step}")


__all__ = ["router"]
