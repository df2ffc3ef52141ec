"""The open Agent Protocol's thread streaming routes (langchain-ai/agent-protocol, openapi.json 0.1.6):
commands to a thread over HTTP, and the connection-scoped event stream they go with.

A command is `{"id", "method", "params"}`; its answer is `{"type": "success", "id", "result"}`, or
`{"type": "error", "id", "error", "message"}` where `error` is Waypoint's error code for the same
failure over HTTP (errors.py). The methods Waypoint answers:

- `run.start`: a run on the thread, as `POST /threads/{id}/runs` (params: `agent_id` or
  `assistant_id`, `input`, `config`, `metadata`, ...); result `{"run_id"}`;
- `input.respond`: answer the thread's interrupted run with `params.response` (a `Command(resume=...)`:
  a new run on the thread whose command resumes it); result `{"run_id"}`;
- `state.get`: the thread's state (as `GET /threads/{id}/state`);
- `state.listCheckpoints`: its checkpoints, newest first (as `GET /threads/{id}/history`, `params.limit`).

The event streams these commands go with are not served (501 `not_supported`, naming the streams
that are): the spec's `POST /threads/{id}/stream` and its WebSocket (`GET` upgraded), and the
session stream of langgraph-sdk's `client.threads.stream` (`/threads/{id}/stream/events`, SSE or
WebSocket). A refused upgrade answers the JSON error as an HTTP answer (errors.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from waypoint.app.http.auth import Api, Tenant
from waypoint.app.http.errors import status_of
from waypoint.app.http.problems import HttpError, not_supported
from waypoint.app.http.protocol.runs import RunCreate, start_on_thread
from waypoint.app.http.protocol.threads import get_state, newest_started, thread_states
from waypoint.app.http.state import ApiState
from waypoint.errors import Conflict, InvalidInput, WaypointError

router = APIRouter(tags=["agent protocol (open spec): thread streaming"])

CHANNELS = ("values", "updates", "messages", "tools", "lifecycle", "input", "checkpoints", "tasks", "custom")


class StreamingCommand(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: int = Field(ge=0)
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


class EventStreamRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    channels: list[str] = Field(min_length=1)
    namespaces: list[list[str]] | None = None
    depth: int | None = Field(None, ge=0)
    since: int | None = Field(None, ge=0)

    @field_validator("channels")
    @classmethod
    def known(cls, channels: list[str]) -> list[str]:
        for channel in channels:
            if channel not in CHANNELS and not (channel.startswith("custom:") and len(channel) > len("custom:")):
                raise ValueError(f"{channel!r} is not a channel: one of {', '.join(CHANNELS)}, or custom:<name>")
        return channels


Method = Callable[[ApiState, str, str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def _run_start(api: ApiState, tenant: str, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    agent = params.get("agent_id") or params.get("assistant_id")
    if not isinstance(agent, str) or not agent:
        raise InvalidInput("run.start needs params.agent_id: the agent to run (POST /agents/search lists them)")
    body = _run_create({**params, "assistant_id": agent})
    return {"run_id": (await start_on_thread(api, tenant, thread_id, body)).run_id}


async def _input_respond(api: ApiState, tenant: str, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    if "response" not in params:
        raise InvalidInput("input.respond needs params.response: the answer to the thread's interrupt")
    thread = await api.wp.threads.get(thread_id, tenant_id=tenant)
    owner = newest_started(thread)
    if owner is None:
        raise Conflict(f"thread {thread_id} has no run to respond to: start one with run.start")
    body = _run_create({"assistant_id": owner.agent, "command": {"resume": params["response"]}})
    return {"run_id": (await start_on_thread(api, tenant, thread_id, body)).run_id}


async def _state_get(api: ApiState, tenant: str, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    return await get_state(thread_id, api, tenant)


async def _list_checkpoints(api: ApiState, tenant: str, thread_id: str, params: dict[str, Any]) -> dict[str, Any]:
    limit = params.get("limit", 10)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidInput(f"params.limit must be a whole number from 1 to 1000, got {limit!r}")
    return {"checkpoints": (await thread_states(api, tenant, thread_id))[:limit]}


METHODS: dict[str, Method] = {
    "run.start": _run_start,
    "input.respond": _input_respond,
    "state.get": _state_get,
    "state.listCheckpoints": _list_checkpoints,
}


def _run_create(fields: dict[str, Any]) -> RunCreate:
    try:
        return RunCreate.model_validate(fields)
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(str(x) for x in p['loc'])}: {p['msg']}" for p in e.errors())
        raise InvalidInput(f"the command's params do not fit a run: {where}") from e


def _error(command_id: int, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": command_id, "error": code, "message": message}


@router.post("/threads/{thread_id}/commands")
async def send_command(thread_id: str, body: StreamingCommand, api: Api, tenant: Tenant) -> dict[str, Any]:
    """Run one command on the thread (404 if there is no such thread); a command that fails answers
    an error response naming the failure's code."""
    await api.wp.threads.get(thread_id, tenant_id=tenant)
    method = METHODS.get(body.method)
    if method is None:
        return _error(body.id, "not_supported", f"method {body.method!r} is not supported: one of {', '.join(METHODS)}")
    try:
        result = await method(api, tenant, thread_id, body.params)
    except WaypointError as e:
        return _error(body.id, status_of(e)[1], str(e))
    except HttpError as e:
        return _error(body.id, e.code, str(e))
    return {"type": "success", "id": body.id, "result": result}


INSTEAD = (
    "stream a run with GET /threads/{thread_id}/runs/{run_id}/stream (stream_mode values, updates, "
    "messages-tuple, custom, ...) or follow the thread with GET /threads/{thread_id}/stream (SSE), and send "
    "commands with POST /threads/{thread_id}/commands"
)


@router.post("/threads/{thread_id}/stream")
async def open_event_stream(thread_id: str, body: EventStreamRequest, api: Api, tenant: Tenant) -> None:
    """Not supported yet: the streaming protocol's channel-filtered thread stream."""
    await api.wp.threads.get(thread_id, tenant_id=tenant)
    raise not_supported(f"the channel-filtered thread stream is not supported: {INSTEAD}")


@router.websocket("/threads/{thread_id}/stream")
async def open_thread_socket(websocket: WebSocket, thread_id: str) -> None:
    """Not supported: the thread stream as a WebSocket (refused with 501, before its key is
    checked, as an unknown route is)."""
    raise not_supported(f"the thread stream over a WebSocket is not supported: {INSTEAD}")


@router.post("/threads/{thread_id}/stream/events")
@router.get("/threads/{thread_id}/stream/events")
async def open_session_events(thread_id: str, api: Api, tenant: Tenant) -> None:
    """Not supported: the event stream of langgraph-sdk's thread session (`client.threads.stream`,
    its v3 protocol); its `run.start` command works (POST /threads/{thread_id}/commands)."""
    await api.wp.threads.get(thread_id, tenant_id=tenant)
    raise not_supported(f"the thread session's event stream (langgraph-sdk threads.stream) is not supported: {INSTEAD}")


@router.websocket("/threads/{thread_id}/stream/events")
async def open_session_socket(websocket: WebSocket, thread_id: str) -> None:
    """Not supported: the thread session's event stream as a WebSocket (as `open_thread_socket`)."""
    raise not_supported(f"the thread session's event stream (langgraph-sdk threads.stream) is not supported: {INSTEAD}")
