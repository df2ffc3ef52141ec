"""Roles on API keys (issue 44): every surface refuses the same things, because the client checks
the actor each surface enters (`waypoint.access`, `Scope.act`). A refusal needs no worker: each
surface is shown one action refused and one allowed for each role, on runs written straight to
the store (a finished run can be deleted without Temporal's help)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import SecretStr

from tests.browser import form_token, sign_in
from tests.conftest import ApiServer
from tests.helpers import cli_env, make_run, one_line_error, step, waypoint
from tests.mcp_client import call, error_of
from waypoint.access import (
    LOCAL,
    NEEDS,
    Action,
    Actor,
    AuditEntry,
    Outcome,
    Role,
    Surface,
    Target,
    TargetKind,
    acting_as,
    current_actor,
)
from waypoint.app.http.server import listen_on, url_of
from waypoint.app.mcp_server import RequireKey, build_server
from waypoint.client import Waypoint
from waypoint.client._scope import Scope
from waypoint.config import Settings
from waypoint.errors import Forbidden, NotFound
from waypoint.names import RunStatus
from waypoint.store import RunStore

# --- the vocabulary and the one check, without servers ------------------------------------------

OPERATOR_ACTIONS = {"run.start", "run.pause", "run.resume", "run.send", "run.approve", "run.deny", "run.cancel"}
OPERATOR_ACTIONS |= {"run.fork", "run.rerun", "thread.write", "eval.run"}


def test_every_action_needs_a_role_and_each_role_allows_what_the_one_before_does():
    assert set(NEEDS) == set(Action)  # an action added without a role fails here
    assert not any(Role.VIEWER.allows(a) for a in Action)
    assert {a.value for a in Action if Role.OPERATOR.allows(a)} == OPERATOR_ACTIONS
    assert all(Role.ADMIN.allows(a) for a in Action)
    for action in Action:
        allowed = [r for r in Role if r.allows(action)]
        assert allowed == list(Role)[list(Role).index(NEEDS[action]) :]


def scope_of(tenant: str = "acme") -> tuple[Scope, list[AuditEntry]]:
    """A scope of the configured tenant `tenant`, its audit entries collected (`act` asks nothing of
    the store or Temporal: the check is all in the scope)."""
    scope = Scope(Settings(tenant=tenant), cast(RunStore, None), cast(Any, None))
    entries: list[AuditEntry] = []

    async def sink(entry: AuditEntry) -> None:
        entries.append(entry)

    scope.audit_sink = sink
    return scope, entries


async def test_scope_act_checks_the_role_and_the_tenant_and_audits_each_action_once():
    scope, entries = scope_of()
    viewer = Actor("key:1", Role.VIEWER, "acme", Surface.CLI)
    admin_of_acme = Actor("key:2", Role.ADMIN, "acme", Surface.HTTP)
    run = Target(TargetKind.RUN, "r1")
    with acting_as(viewer):
        with pytest.raises(Forbidden) as refused:
            async with scope.act(Action.CANCEL, None, run):
                raise AssertionError("a viewer's cancel ran")
        assert refused.value.details == {"needs": "operator"}
        assert "run.cancel needs the role operator; key:1 has the role viewer" in str(refused.value)
        assert scope.tenant() == "acme" and scope.scoped(None, "r1") == "acme"  # reads need no role
    with acting_as(admin_of_acme):
        with pytest.raises(NotFound):  # another tenant's run is "not found", as it always was
            async with scope.act(Action.DELETE, "globex", run):
                pass
        with pytest.raises(Forbidden, match="acts for tenant 'acme', not 'globex'"):
            async with scope.act(Action.KEY_CREATE, "globex"):
                pass
        with pytest.raises(Forbidden):
            scope.tenant("globex")
        with pytest.raises(NotFound):
            scope.scoped("globex", "r1")
        async with scope.act(Action.DELETE, None, run) as tenant:
            async with scope.act(Action.ERASE, tenant, run):  # inside another: checked, not written again
                pass
    assert current_actor() == LOCAL  # acting_as ends with its block
    assert [(e.actor.id, e.action, e.tenant, e.outcome) for e in entries] == [
        ("key:1", Action.CANCEL, "acme", Outcome.REFUSED),
        ("key:2", Action.DELETE, "globex", Outcome.REFUSED),
        ("key:2", Action.KEY_CREATE, "globex", Outcome.REFUSED),
        ("key:2", Action.DELETE, "acme", Outcome.OK),
    ]
    async with scope.act(Action.DELETE, "globex", run) as tenant:  # LOCAL: an admin of every tenant
        assert tenant == "globex"


# --- the surfaces ------------------------------------------------------------------------------


async def finished_run(store: RunStore, settings: Settings) -> str:
    run_id = await make_run(store, settings, [step(1, [], content="done")])
    await store.log.finish_run(settings.tenant, run_id, RunStatus.COMPLETED, "done", None)
    return run_id


async def keys_of(wp: Waypoint, tenant: str) -> dict[Role, str]:
    return {role: (await wp.keys.create(tenant, f"{role}-key", role=role))[0] for role in Role}


@pytest.mark.postgres
async def test_the_http_api_and_the_agent_protocol_refuse_by_role(api: ApiServer, engine, store: RunStore):
    wp = Waypoint(None, engine, api.settings)
    keys = await keys_of(wp, api.settings.tenant)
    runs = [await finished_run(store, api.settings) for _ in range(2)]

    async def as_(role: Role, method: str, path: str, body: Any = None) -> httpx.Response:
        return await api.http.request(method, path, json=body, headers=api.headers(keys[role]))

    # /v1: a viewer reads, and is refused a cancel naming the role it needs
    assert (await as_(Role.VIEWER, "GET", f"/v1/runs/{runs[0]}")).status_code == 200
    refused = await as_(Role.VIEWER, "POST", f"/v1/runs/{runs[0]}/cancel", {"reason": "no"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden" and refused.json()["error"]["needs"] == "operator"
    assert "run.cancel needs the role operator" in refused.json()["error"]["message"]
    # the webhook signing secret signs deliveries receivers believe: an admin's, even to read
    refused = await as_(Role.OPERATOR, "GET", "/v1/webhooks/secret")
    assert refused.status_code == 403 and refused.json()["error"]["needs"] == "admin"
    assert (await as_(Role.ADMIN, "GET", "/v1/webhooks/secret")).status_code == 200
    # an operator may not delete; an admin may
    refused = await as_(Role.OPERATOR, "DELETE", f"/v1/runs/{runs[0]}")
    assert refused.status_code == 403 and refused.json()["error"]["needs"] == "admin"
    assert (await as_(Role.ADMIN, "DELETE", f"/v1/runs/{runs[0]}")).status_code == 204
    assert (await as_(Role.ADMIN, "GET", f"/v1/runs/{runs[0]}")).status_code == 404

    # the Agent Protocol: a viewer reads threads but makes none; an operator makes them, deletes no run
    assert (await as_(Role.VIEWER, "POST", "/threads/search", {})).status_code == 200
    refused = await as_(Role.VIEWER, "POST", "/threads", {"metadata": {"by": "viewer"}})
    assert refused.status_code == 403 and refused.json()["error"]["needs"] == "operator"
    made = await as_(Role.OPERATOR, "POST", "/threads", {"metadata": {"by": "operator"}})
    assert made.status_code == 200, made.text
    refused = await as_(Role.OPERATOR, "DELETE", f"/runs/{runs[1]}")
    assert refused.status_code == 403 and refused.json()["error"]["needs"] == "admin"
    assert (await as_(Role.ADMIN, "DELETE", f"/runs/{runs[1]}")).status_code == 204

    # a key's role changed: its next request has the new one
    viewer_id = (await wp.keys.valid(keys[Role.VIEWER])).id  # type: ignore[union-attr]
    await wp.keys.set_role(str(viewer_id), Role.OPERATOR)
    assert (await as_(Role.VIEWER, "POST", "/threads", {"metadata": {}})).status_code == 200

    # the OpenAPI document says what a 403 is
    described = (await api.http.get("/openapi.json")).json()["paths"]["/v1/runs/{run_id}"]["delete"]["responses"]
    assert "forbidden" in described["403"]["description"]


def refusal_of(posted: httpx.Response) -> str:
    """The refusal a form's post went back to its page with."""
    assert posted.status_code == 303, posted.text
    return parse_qs(urlsplit(posted.headers["location"]).query)["refusal"][0]


@pytest.mark.postgres
async def test_the_viewer_shows_and_takes_only_the_forms_a_role_may_use(api: ApiServer, engine, store: RunStore):
    wp = Waypoint(None, engine, api.settings)
    keys = await keys_of(wp, api.settings.tenant)
    run_id = await make_run(store, api.settings, [step(1, [], content="still going")])  # not finished
    page = f"/ui/runs/{run_id}"

    async with httpx.AsyncClient(base_url=api.url) as viewer:
        await sign_in(viewer, keys[Role.VIEWER])
        shown = await viewer.get(page)
        assert shown.status_code == 200 and "Run" in shown.text
        assert f"/ui/runs/{run_id}/cancel" not in shown.text and f"/ui/runs/{run_id}/fork" not in shown.text
        assert "need the operator role" in shown.text
        # a post all the same (an old page, a hand-made form): back to the run, with the refusal
        posted = await viewer.post(
            f"{page}/cancel", data={"csrf": form_token(shown.text)}, headers={"Origin": api.url}, follow_redirects=False
        )
        assert posted.status_code == 303 and "refusal=" in posted.headers["location"]
        back = await viewer.get(posted.headers["location"])
        assert "run.cancel needs the role operator" in back.text

    async with httpx.AsyncClient(base_url=api.url) as operator:
        await sign_in(operator, keys[Role.OPERATOR])
        shown = await operator.get(page)
        assert f"/ui/runs/{run_id}/cancel" in shown.text and "need the operator role" not in shown.text
        # schedules are an admin's: an operator's post is refused before the schedule is looked up
        token = form_token((await operator.get("/ui/schedules")).text)
        posted = await operator.post(
            "/ui/schedules/nightly/pause", data={"csrf": token, "back": "schedule"}, headers={"Origin": api.url}
        )
        assert "schedule.write needs the role admin" in refusal_of(posted)

    async with httpx.AsyncClient(base_url=api.url) as admin:
        await sign_in(admin, keys[Role.ADMIN])
        token = form_token((await admin.get("/ui/schedules")).text)
        posted = await admin.post(
            "/ui/schedules/nightly/pause", data={"csrf": token, "back": "schedule"}, headers={"Origin": api.url}
        )
        said = refusal_of(posted)
        assert "needs the role" not in said and "nightly" in said  # allowed: then not found


@pytest.mark.postgres
async def test_the_cli_acts_as_waypoint_api_key(engine, store: RunStore, settings: Settings):
    wp = Waypoint(None, engine, settings)
    keys = await keys_of(wp, settings.tenant)
    runs = [await finished_run(store, settings) for _ in range(2)]

    def as_(role: Role | None, *args: str, key: str | None = None):
        env = cli_env(settings, WAYPOINT_API_KEY=key or keys[role]) if key or role else cli_env(settings)  # type: ignore[index]
        return waypoint(settings, *args, env=env)

    done = await asyncio.gather(
        as_(Role.VIEWER, "runs", "--json"),
        as_(Role.VIEWER, "cancel", runs[0]),
        as_(Role.OPERATOR, "delete", runs[0], "--yes"),
        as_(Role.OPERATOR, "keys", "create", "--tenant", settings.tenant),
        as_(Role.ADMIN, "delete", runs[1], "--yes"),
        as_(None, "runs", "--json", key="wp_not-a-key"),
        as_(None, "keys", "create", "--tenant", settings.tenant, "--role", "boss"),
        as_(Role.ADMIN, "keys", "create", "--tenant", settings.tenant, "--role", "viewer", "--json"),
        as_(Role.ADMIN, "keys", "create", "--tenant", "someone-else"),
        as_(Role.VIEWER, "--tenant", "someone-else", "runs"),
    )
    listed, viewer_cancel, operator_delete, operator_key, admin_delete, unknown, bad_role, made, other, named = done
    assert listed.code == 0 and runs[0] in {r["run_id"] for r in json.loads(listed.out)}  # (runs[1] may be gone)
    assert "run.cancel needs the role operator" in one_line_error(viewer_cancel)
    assert "run.delete needs the role admin" in one_line_error(operator_delete)
    assert "key.create needs the role admin" in one_line_error(operator_key)
    assert admin_delete.code == 0, admin_delete.err
    assert "WAYPOINT_API_KEY is an unknown or revoked key" in one_line_error(unknown)
    assert one_line_error(bad_role) == "error: unknown role 'boss': use one of viewer, operator, admin"
    assert made.code == 0 and json.loads(made.out)["role"] == "viewer"
    assert f"acts for tenant {settings.tenant!r}, not 'someone-else'" in one_line_error(other)
    assert await wp.keys.list("someone-else") == []
    assert f"WAYPOINT_API_KEY acts for tenant {settings.tenant!r}, not 'someone-else'" in one_line_error(named)

    listing = await waypoint(settings, "keys", "list", "--tenant", settings.tenant)
    assert listing.code == 0 and "role" in listing.out and "operator" in listing.out


@pytest.mark.postgres
async def test_mcp_tools_act_as_the_bearer_key(engine, store: RunStore, settings: Settings):
    """Over HTTP, `waypoint mcp` takes Waypoint API keys too, each with its tenant and role; stdio
    is the installation's admin for the configured tenant."""
    cfg = settings.model_copy(update={"mcp_write": True, "mcp_api_key": SecretStr("s3cret-key")})
    wp = Waypoint(None, engine, cfg)
    keys = await keys_of(wp, cfg.tenant)
    run_id = await finished_run(store, cfg)
    server = build_server(wp, cfg, "http")
    app = RequireKey(server.streamable_http_app(host="127.0.0.1"), cfg, wp)
    http = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    sock = listen_on("127.0.0.1", 0)
    task = asyncio.create_task(http.serve(sockets=[sock]))
    try:
        while not http.started:
            assert not task.done()
            await asyncio.sleep(0.01)
        url = url_of(http) + "/mcp"
        for role, refused in ((Role.VIEWER, "run.cancel needs the role operator"), (Role.OPERATOR, None)):
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {keys[role]}"}) as h:
                async with Client(streamable_http_client(url, http_client=h)) as client:
                    assert [r["run_id"] for r in await call(client, "list_runs")] == [run_id]
                    said = await error_of(client, "cancel_run", run_id=run_id)
                    if refused:
                        assert refused in said
                    else:  # allowed: the client went on, and found no workflow to cancel
                        assert "needs the role" not in said
        schedule = {"schedule_id": "nightly", "action": "pause"}
        for key, refused in ((keys[Role.OPERATOR], "schedule.write needs the role admin"), ("s3cret-key", None)):
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as h:
                async with Client(streamable_http_client(url, http_client=h)) as client:
                    said = await error_of(client, "change_schedule", **schedule)
                    assert (refused in said) if refused else ("needs the role" not in said and "nightly" in said)
        async with httpx2.AsyncClient() as plain:
            answer = await plain.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"Authorization": "Bearer no"}
            )
            assert answer.status_code == 401
    finally:
        http.should_exit = True
        await task


def test_the_roles_page_names_the_role_each_action_needs():
    page = (Path(__file__).parents[1] / "docs" / "guides" / "roles.md").read_text()
    rows = re.findall(r"^\| `([a-z.]+)` \| (viewer|operator|admin) \|$", page, re.M)
    assert dict(rows) == {a.value: r.value for a, r in NEEDS.items()}


# --- every write of the client, refused below its role, and each refusal audited ----------------


def writes(wp: Waypoint, run_id: str, key_id: str) -> dict[Action, list[Callable[[], Awaitable[Any]]]]:
    """Every write of the client by the action it needs: a write added without `Scope.act` is one
    this table misses; a write whose check was lost fails below."""
    return {
        Action.START: [lambda: wp.start_run("a task", agent="demo")],
        Action.PAUSE: [lambda: wp.pause(run_id)],
        Action.RESUME: [lambda: wp.resume(run_id)],
        Action.SEND: [lambda: wp.send(run_id, "hello")],
        Action.APPROVE: [lambda: wp.approve(run_id)],
        Action.DENY: [lambda: wp.deny(run_id)],
        Action.CANCEL: [lambda: wp.cancel(run_id), lambda: wp.threads.cancel_run(run_id)],
        Action.FORK: [lambda: wp.fork(run_id, 1)],
        Action.RERUN: [lambda: wp.rerun(run_id), lambda: wp.rerun_batch("status = 'completed'")],
        Action.THREAD_WRITE: [lambda: wp.threads.create(), lambda: wp.threads.update("t-1", {"a": 1})],
        Action.EVALUATE: [lambda: wp.evals.create_dataset("notes", run_ids=[run_id])],
        Action.DELETE: [lambda: wp.delete(run_id), lambda: wp.threads.delete_run(run_id)],
        Action.ERASE: [lambda: wp.memory_forget(run_id)],
        Action.KEY_CREATE: [lambda: wp.keys.create(wp.settings.tenant), lambda: wp.keys.set_role(key_id, Role.ADMIN)],
        Action.KEY_REVOKE: [lambda: wp.keys.revoke(key_id)],
        Action.SCHEDULE_WRITE: [
            lambda: wp.schedules.create(agent="demo", task="t", every=60),
            lambda: wp.schedules.delete("s-1"),
            lambda: wp.schedules.trigger("s-1"),
        ],
        Action.POLICY_WRITE: [lambda: wp.assistants.delete("a-1"), lambda: wp.webhooks.secret(rotate=True)],
        Action.DEPLOY: [lambda: wp.set_current_deployment("waypoint")],
        Action.COMPACTION_WRITE: [lambda: wp.apply_compaction_schedule(), lambda: wp.compact(run_id)],
        Action.AUDIT_READ: [lambda: wp.audit.entries(), lambda: wp.audit.verify()],
    }


@pytest.mark.postgres
@pytest.mark.parametrize("role", [Role.VIEWER, Role.OPERATOR])
async def test_every_write_of_the_client_is_refused_below_its_role_and_audited(
    role: Role, engine, store: RunStore, settings: Settings
):
    run_id = await finished_run(store, settings)
    wp = Waypoint(None, engine, settings)  # no Temporal: a refusal comes before anything is asked of it
    _, key = await wp.keys.create(settings.tenant, "the viewer's", role=Role.VIEWER)
    table = writes(wp, run_id, str(key.id))
    # every action but the limits' (no client write changes limits yet: they are settings)
    assert set(table) == set(Action) - {Action.LIMITS_WRITE}
    refused = [(action, call) for action, calls in table.items() if not role.allows(action) for call in calls]
    assert refused
    with acting_as(Actor("key:77", role, settings.tenant, Surface.PYTHON)):
        for action, call in refused:
            with pytest.raises(Forbidden, match=f"{action} needs the role {NEEDS[action]}"):
                await call()
    entries = (await wp.audit.entries(actor="key:77", limit=200)).entries
    assert sorted((e.action, e.outcome, e.role) for e in entries) == sorted(
        (action.value, "refused", role.value) for action, _ in refused
    )
    assert (await wp.audit.verify()).ok
    assert (await wp.run(run_id)).status == RunStatus.COMPLETED  # nothing was done to the run
    assert await wp.keys.list(settings.tenant) == [key]  # nor a key made, changed or revoked
