"""Webhooks against a real local receiver: a run's end is one delivery, a workflow of its own that
posts it signed with the tenant's secret, retried with backoff while the receiver is down (the port
closed) or failing, until it comes back or the retry window ends (shortened here by the setting);
then the delivery is on the dead-letter list, and redelivery sends it again. Every attempt is
recorded; a refusing receiver is not retried; a bad URL is refused before anything starts; the CLI,
HTTP, the viewer and MCP list and redeliver. The workflows' side (the retry schedule over a whole
default window, in virtual time; a run's workflow that ends at once) is in tests/test_workflow_logic.py:
here each kind of failure is shown once on the real stack (a real receiver, the signature, the
attempt rows), with as few real backoff seconds as show it; the CLI spawns once per test where its
process is the point, the other commands run in process (`waypoint_here`)."""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.browser import logged_in, needs_browser
from tests.conftest import ApiServer
from tests.helpers import eventually, one_line_error, start, waypoint, waypoint_here
from tests.ports import reserve_port
from tests.webhook_receiver import Received, Receiver, receiving
from waypoint.activities.webhooks import WebhookActivities
from waypoint.app.embedded import StackInfo
from waypoint.checks import check_webhook
from waypoint.client import Waypoint
from waypoint.config import Settings
from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.store import RunStore
from waypoint.store.schema import webhook_attempts
from waypoint.store.webhooks import WebhookDelivery
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.types import DeliverWebhookInput, PostWebhookInput
from waypoint.webhooks import WebhookSignatureError, signed_headers, verify


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving([200]) as found:
        yield found


def hook_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/hooks/waypoint?token=t0k"


@contextlib.asynccontextmanager
async def worker_with_window(client: Client, engine, settings: Settings, agents, seconds: float):
    """A worker of the test's queue whose deliveries are retried for `seconds` (the setting, shortened)."""
    from waypoint.app.worker import StopDeadline, build_worker, running

    shortened = settings.model_copy(update={"webhook_retry_window_seconds": seconds})
    async with running(build_worker(client, engine, shortened, agents), StopDeadline(shortened)) as w:
        yield w


async def the_delivery(wp: Waypoint, run_id: str, what: str, done: Any, timeout: float = 60) -> WebhookDelivery:
    """The run's (only) delivery once `done(delivery)` holds: waits for the rows that prove it."""

    async def probe() -> WebhookDelivery | None:
        found = await wp.webhooks.list(run_id=run_id)
        return found[0] if len(found) == 1 and done(found[0]) else None

    return await eventually(probe, timeout=timeout, what=what)


def is_delivered(d: WebhookDelivery) -> bool:
    return d.status == "delivered"


def is_failed(d: WebhookDelivery) -> bool:
    return d.status == "failed"


# --- the URL and the signature (no servers) ------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/x", "not http or https"),
        ("http:///hooks", "no host"),
        ("http://169.254.169.254/latest/meta-data", "a cloud metadata address (169.254.169.254)"),
        ("http://169.254.10.1/", "a link-local address (169.254.10.1)"),
        ("http://[fe80::1]/", "a link-local address (fe80::1)"),
        ("http://[fd00:ec2::254]/", "a cloud metadata address (fd00:ec2::254)"),
        ("http://[::ffff:169.254.169.254]/", "a cloud metadata address (169.254.169.254)"),
        ("http://2852039166/", "a cloud metadata address (169.254.169.254)"),  # the same address, as one number
        ("http://metadata.google.internal/computeMetadata/v1/", "a cloud metadata service"),
        ("https://user:pw@example.com/", "carries a user name or password"),
        ("https://example.com/" + "x" * 3000, "keep it to 2048"),
    ],
)
def test_a_webhook_url_that_cannot_be_used_is_refused(url: str, why: str):
    with pytest.raises(InvalidInput, match="webhook URL") as caught:
        check_webhook(url)
    assert why in str(caught.value)


def test_private_addresses_pass_and_the_setting_allows_metadata_ones():
    for url in ("http://127.0.0.1:9000/x", "http://10.0.0.7/x", "https://hooks.example.com/x", "http://[::1]/"):
        assert check_webhook(url) == url
    with pytest.raises(InvalidInput, match="WAYPOINT_WEBHOOK_ALLOW_PRIVATE=true"):
        check_webhook("http://169.254.169.254/")
    assert check_webhook("http://169.254.169.254/", allow_private=True) == "http://169.254.169.254/"
    with pytest.raises(InvalidInput):
        check_webhook("ftp://x", allow_private=True)  # the setting allows addresses, never schemes


def test_verify_refuses_a_wrong_secret_a_changed_body_and_an_old_timestamp():
    body = b'{"run_id":"run-1"}'
    headers = signed_headers("whsec_a", body, delivery_id="whd_1", event="run.finished", now=1_000_000)
    assert verify("whsec_a", body, headers, now=1_000_010) == {"run_id": "run-1"}
    assert verify(["whsec_old", "whsec_a"], body, headers, now=1_000_010)  # during a rotation
    lower = {k.lower(): v for k, v in headers.items()}
    assert verify("whsec_a", body.decode(), lower, now=1_000_010)
    for secret, sent, now in [
        ("whsec_b", body, 1_000_010),
        ("whsec_a", body.replace(b"1", b"2"), 1_000_010),
        ("whsec_a", body, 1_000_301),  # five minutes and a second later: a replay
    ]:
        with pytest.raises(WebhookSignatureError):
            verify(secret, sent, headers, now=now)
    with pytest.raises(WebhookSignatureError, match="not a Waypoint webhook"):
        verify("whsec_a", body, {}, now=1_000_010)


# --- real runs -------------------------------------------------------------------------------------


@pytest.mark.postgres
async def test_a_receiver_that_fails_once_gets_one_signed_delivery(
    client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI, receiver: Receiver
):
    # One 503 shows a retryable answer retried over the real stack; the schedule of the retries (1, 2,
    # 4 ... s, capped, over the window) is test_workflow_logic's, in virtual time.
    receiver.statuses = [503, 200]
    fake_openai.responder = lambda body, n: Turn(content="made it")  # every attempt, should one time out
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote", webhook=receiver.url)
    result = await wp.result(run_id)  # the run's workflow ends once its delivery has started
    assert (result.status, result.output) == ("completed", "made it")
    delivery = await the_delivery(wp, run_id, "the delivery", is_delivered)
    assert (delivery.attempts, delivery.last_status_code, delivery.last_error) == (2, 200, None)
    assert delivery.window_ends_at is not None and delivery.ended_at is not None and delivery.next_attempt_at is None
    assert delivery.window_ends_at - delivery.created_at >= timedelta(hours=24)  # the default window
    assert receiver.answered == [503, 200]
    (delivered,) = receiver.delivered
    secret = (await wp.webhook_secret()).secret
    assert secret.startswith("whsec_")
    event = verify(secret, delivered.body, delivered.headers, tolerance_seconds=60)
    assert abs(int(delivered.headers["Waypoint-Timestamp"]) - time.time()) < 60
    assert (event["event"], event["run_id"], event["status"], event["output"]) == (
        "run.finished",
        run_id,
        "completed",
        "made it",
    )
    assert event["agent"] == "remote" and event["steps"] == 1 and event["finished_at"]
    assert "tenant_id" not in event and settings.tenant not in delivered.body.decode()
    assert {r.headers["Waypoint-Delivery"] for r in receiver.got} == {delivery.delivery_id}
    assert event["delivery_id"] == delivery.delivery_id and "redelivery_of" not in event
    assert delivered.headers["Content-Type"] == "application/json"
    assert delivered.headers["User-Agent"].startswith("Waypoint-Webhooks/")
    attempts = await wp.webhook_attempts(run_id)
    assert [(a.attempt, a.status_code, a.delivered) for a in attempts] == [(1, 503, False), (2, 200, True)]
    assert "HTTP 503" in (attempts[0].error or "") and attempts[1].error is None
    assert {a.url for a in attempts} == {receiver.url} and {a.delivery_id for a in attempts} == {delivery.delivery_id}
    gap = (attempts[1].at - attempts[0].at).total_seconds()
    assert gap >= 0.9, gap  # the first backoff: 1 s (the dev server's timers may add a second)
    row = await wp.run(run_id)
    assert (row.status, row.output, row.webhook) == ("completed", "made it", receiver.url)
    shown = await waypoint_here(settings, "status", run_id)
    assert "webhook: delivered after 2 attempts (HTTP 200)" in shown.out, shown.out


@pytest.mark.postgres
async def test_a_receiver_that_answers_400_is_not_asked_again(
    client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI, receiver: Receiver
):
    receiver.statuses = [400]
    fake_openai.responder = lambda body, n: Turn(content="made it")  # every attempt, should one time out
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote", webhook=receiver.url)
    result = await wp.result(run_id)
    assert (result.status, result.output) == ("completed", "made it")
    delivery = await the_delivery(wp, run_id, "the refused delivery on the dead-letter list", is_failed)
    assert receiver.answered == [400]
    (attempt,) = await wp.webhook_attempts(run_id)
    assert (attempt.status_code, attempt.delivered) == (400, False)
    assert (attempt.error or "").startswith("the webhook answered HTTP 400")
    assert (delivery.attempts, delivery.last_status_code) == (1, 400) and delivery.ended_at is not None
    assert (delivery.last_error or "").startswith("the webhook answered HTTP 400")
    assert [d.delivery_id for d in await wp.webhooks.list(failed=True)] == [delivery.delivery_id]
    assert (await wp.run(run_id)).status == "completed"
    await wp.delete(run_id)  # the retention path takes its deliveries (their bodies hold its output) and attempts
    assert await wp.webhooks.list() == []
    with pytest.raises(NotFound):
        await wp.webhooks.get(delivery.delivery_id)
    async with engine.connect() as conn:
        left = await conn.scalar(select(func.count()).where(webhook_attempts.c.run_id == run_id))
    assert left == 0


@pytest.mark.postgres
async def test_a_name_that_resolves_to_a_metadata_address_is_refused_at_delivery(engine, settings: Settings):
    """A host that passed at start may resolve elsewhere later: the attempt is recorded, not retried."""

    class Moved(WebhookActivities):
        async def resolve(self, host: str, port: int) -> list[str]:
            return ["10.0.0.5", "169.254.169.254"]

    store = RunStore(engine)
    run_id = await start(store, settings)
    hooks = Moved(store, settings)
    url = "https://hooks.example.com/in"
    delivery_id = f"whd_{uuid.uuid4().hex}"
    await store.webhooks.create_delivery(
        settings.tenant, delivery_id=delivery_id, run_id=run_id, event="run.finished", url=url, body="{}"
    )
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(hooks.post_webhook, PostWebhookInput(delivery_id, settings.tenant))
    assert caught.value.non_retryable and caught.value.type == "WebhookRefused"
    (attempt,) = await store.webhooks.webhook_attempts(settings.tenant, run_id)
    assert attempt.status_code is None and not attempt.delivered and attempt.delivery_id == delivery_id
    assert "resolves to a cloud metadata address (169.254.169.254)" in (attempt.error or "")
    found = await store.webhooks.webhook_delivery(settings.tenant, delivery_id)
    assert (found.status, found.attempts) == ("failed", 1)  # refused: on the dead-letter list at once
    # runs from before deliveries post from their own workflow: the same check
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(hooks.deliver_webhook, DeliverWebhookInput(run_id, settings.tenant, url, "d1"))
    assert caught.value.non_retryable and caught.value.type == "WebhookRefused"


@pytest.mark.postgres
async def test_the_cli_refuses_a_bad_webhook_and_starts_nothing(client: Client, engine, settings: Settings):
    for url, cli in (("ftp://x", waypoint), ("http://169.254.169.254/", waypoint_here)):  # one spawned process
        line = one_line_error(await cli(settings, "run", "hi", "--agent", "remote", "--webhook", url))
        assert "invalid webhook URL" in line and url in line
    assert await Waypoint(client, engine, settings).runs() == []


@pytest.mark.postgres
async def test_http_webhooks(api: ApiServer, client: Client, engine, settings: Settings, worker, receiver: Receiver):
    """POST /v1/runs takes a webhook (422 for a bad one), the secret is shown and rotated, a run's
    attempts are readable; the CLI shows the same secret."""
    for url in ("ftp://x", "http://169.254.169.254/"):
        refused = await api.http.post("/v1/runs", json={"task": "add", "agent": "calculator", "webhook": url})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_input", refused.text
        assert "invalid webhook URL" in refused.text
    assert (await api.http.get("/v1/runs")).json()["runs"] == []
    first = (await api.http.get("/v1/webhooks/secret")).json()["secret"]
    shown = await waypoint_here(settings, "webhook", "secret", "--json")
    assert json.loads(shown.out)["secret"] == first
    rotated = (await api.http.post("/v1/webhooks/secret/rotate")).json()["secret"]
    assert rotated != first and rotated.startswith("whsec_")
    started = await api.http.post("/v1/runs", json={"task": "add", "agent": "calculator", "webhook": receiver.url})
    run_id = started.json()["run_id"]
    wp = Waypoint(client, engine, settings)
    await wp.result(run_id)
    delivery = await the_delivery(wp, run_id, "the delivery", is_delivered)
    found = (await api.http.get(f"/v1/runs/{run_id}/webhook")).json()
    assert [d["delivery_id"] for d in found["deliveries"]] == [delivery.delivery_id]
    assert (found["webhook"], found["delivered"], len(found["attempts"])) == (receiver.url, True, 1)
    assert found["summary"] == "delivered after 1 attempt (HTTP 200)"
    (delivered,) = receiver.delivered
    assert verify(rotated, delivered.body, delivered.headers)["run_id"] == run_id  # signed with the new secret
    with pytest.raises(WebhookSignatureError):
        verify(first, delivered.body, delivered.headers)
    from waypoint.app.http.ui import session

    key = await Waypoint(client, engine, settings).keys.valid(api.key)
    assert key is not None
    api.http.cookies.set(session.COOKIE, session.issue(session.secret_of(settings.ui_secret), key.id))
    page = await api.http.get(f"/ui/runs/{run_id}")
    assert 'id="run-webhook">delivered after 1 attempt (HTTP 200)<' in page.text


@pytest.mark.postgres
async def test_the_agent_protocol_takes_a_webhook(api: ApiServer, worker, receiver: Receiver):
    """langgraph-sdk's `webhook=`: the thread's run posts its end; a bad URL takes no place on the thread."""
    from langgraph_sdk import get_client

    lg = get_client(url=api.url, api_key=api.key)
    thread = await lg.threads.create()
    tid = thread["thread_id"]
    bad = {"assistant_id": "calculator", "input": {"messages": [{"role": "user", "content": "add"}]}}
    refused = await api.http.post(f"/threads/{tid}/runs", json={**bad, "webhook": "http://169.254.169.254/"})
    assert refused.status_code == 400 and "cloud metadata address" in refused.text, refused.text
    assert await lg.runs.list(tid) == []
    human = {"messages": [{"role": "user", "content": "add"}]}
    await lg.runs.wait(tid, "calculator", input=human, webhook=receiver.url)
    (run,) = await lg.runs.list(tid)

    async def posted() -> list[Received]:
        return receiver.delivered

    (delivered,) = await eventually(posted, what="the delivery")
    event = json.loads(delivered.body)
    assert (event["run_id"], event["status"]) == (run["run_id"], "completed")


# --- a receiver that is down: retried over the window, dead-lettered, redelivered -----------------


@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_a_receiver_that_is_down_gets_the_event_when_it_comes_back(
    client: Client, engine, settings: Settings, agents, fake_openai: FakeOpenAI
):
    """The receiver's port is closed: its attempts cannot connect and are retried, and the run's
    workflow has ended; once the receiver listens again, the next attempt delivers. One attempt while
    it is down shows that (the doubling backoff over many attempts is test_workflow_logic's)."""
    fake_openai.responder = lambda body, n: Turn(content="made it")
    port = reserve_port()  # nothing listens on it: a receiver that is down
    wp = Waypoint(client, engine, settings)
    async with worker_with_window(client, engine, settings, agents, 600):
        run_id = await wp.start_run("hi", agent="remote", webhook=hook_url(port))
        assert (await wp.result(run_id)).status == "completed"
        down = await the_delivery(wp, run_id, "an attempt that could not connect", lambda d: d.attempts >= 1)
        assert down.status == "pending" and "cannot reach the webhook" in (down.last_error or "")
        assert down.window_ends_at is not None and down.next_attempt_at is not None
        assert down.created_at < down.next_attempt_at <= down.window_ends_at
        assert down.window_ends_at - down.created_at <= timedelta(seconds=601)  # the setting, shortened
        with pytest.raises(Conflict, match="still being retried"):  # one delivery at a time
            await wp.webhooks.redeliver(down.delivery_id)
        with receiving([200], port=port) as receiver:
            back = await the_delivery(wp, run_id, "the delivery once the receiver is back", is_delivered, timeout=120)
    (got,) = receiver.got  # nothing reached it while it was down; one attempt once it was back
    event = verify((await wp.webhook_secret()).secret, got.body, got.headers, tolerance_seconds=60)
    assert (event["run_id"], event["output"], event["delivery_id"]) == (run_id, "made it", back.delivery_id)
    attempts = await wp.webhooks.attempts(back.delivery_id)
    assert [a.attempt for a in attempts] == list(range(1, back.attempts + 1)) and back.attempts >= 2
    assert all(a.status_code is None and not a.delivered for a in attempts[:-1])
    assert (attempts[-1].status_code, attempts[-1].delivered) == (200, True)
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(attempts, attempts[1:], strict=False)]
    assert all(gap >= 2**i * 0.9 for i, gap in enumerate(gaps)), gaps  # 1, 2 ... s of backoff
    run = await client.get_workflow_handle(run_id).describe()
    assert run.close_time is not None and run.close_time < attempts[1].at  # the run did not wait for its webhook
    assert await wp.webhook_summary(run_id) == f"delivered after {back.attempts} attempts (HTTP 200)"


@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_a_receiver_that_never_comes_back_ends_on_the_dead_letter_list_and_redeliver_sends_it(
    client: Client, engine, settings: Settings, agents, fake_openai: FakeOpenAI
):
    """With a 6 s window, a receiver that stays down gets two attempts at least (at 0 and 1 s, then 3 s; a first
    attempt up to 5 s late on a busy machine still leaves room for the second), then the delivery is given up:
    `waypoint webhooks list --failed` lists it; `waypoint webhooks redeliver` sends the same body again as a new
    delivery once the receiver is up. The commands run in process: the one spawned `waypoint webhooks` is in
    test_the_cli_says_what_is_wrong_with_a_delivery_in_one_line."""
    fake_openai.responder = lambda body, n: Turn(content="made it")
    port = reserve_port()
    wp = Waypoint(client, engine, settings)
    async with worker_with_window(client, engine, settings, agents, 6):
        run_id = await wp.start_run("hi", agent="remote", webhook=hook_url(port))
        assert (await wp.result(run_id)).status == "completed"
        dead = await the_delivery(wp, run_id, "the delivery on the dead-letter list", is_failed, timeout=120)
        attempts = await wp.webhooks.attempts(dead.delivery_id)
        assert dead.attempts == len(attempts) >= 2 and dead.next_attempt_at is None
        assert all(a.status_code is None and not a.delivered for a in attempts)
        assert "cannot reach the webhook" in (dead.last_error or "")
        assert dead.window_ends_at is not None and dead.ended_at is not None
        assert attempts[-1].at <= dead.window_ends_at <= dead.created_at + timedelta(seconds=7)
        assert "on the dead-letter list" in await wp.webhook_summary(run_id)

        listed = await waypoint_here(settings, "webhooks", "list", "--failed", "--json")
        assert [(d["delivery_id"], d["status"]) for d in json.loads(listed.out)] == [(dead.delivery_id, "failed")]
        table = await waypoint_here(settings, "webhooks", "list", "--failed")
        assert dead.delivery_id in table.out and "failed" in table.out and "dead-letter" in table.out, table.out
        assert "t0k" not in table.out  # the URL's query (a token) is never shown

        with receiving([200], port=port) as receiver:
            again = await waypoint_here(settings, "webhooks", "redeliver", dead.delivery_id)
            assert again.code == 0, again.err
            new_id = again.out.strip()
            sent = await eventually(lambda: _delivered_one(wp, new_id), timeout=60, what="the redelivery delivered")
    assert new_id != dead.delivery_id and sent.redelivery_of == dead.delivery_id and sent.run_id == run_id
    (got,) = receiver.got
    event = verify((await wp.webhook_secret()).secret, got.body, got.headers, tolerance_seconds=60)
    assert got.headers["Waypoint-Delivery"] == event["delivery_id"] == new_id
    assert event["redelivery_of"] == dead.delivery_id
    _, original = await RunStore(engine).webhooks.delivery_body(settings.tenant, dead.delivery_id)
    first = json.loads(original)
    assert {k: v for k, v in event.items() if k not in ("delivery_id", "redelivery_of")} == {
        k: v for k, v in first.items() if k != "delivery_id"
    }  # the same payload
    assert (await wp.webhooks.get(dead.delivery_id)).status == "failed"  # the original stays as it ended
    shown = await waypoint_here(settings, "webhooks", "show", new_id)
    assert "delivered after 1 attempt (HTTP 200)" in shown.out and dead.delivery_id in shown.out, shown.out


async def _delivered_one(wp: Waypoint, delivery_id: str) -> WebhookDelivery | None:
    found = await wp.webhooks.get(delivery_id)
    return found if found.status == "delivered" else None


@pytest.mark.postgres
async def test_the_cli_says_what_is_wrong_with_a_delivery_in_one_line(engine, settings: Settings):
    """An unknown delivery, another tenant's, one still pending: one `error:` line each, exit 1."""
    for args, cli in ((("redeliver", "whd_nope"), waypoint), (("show", "whd_nope"), waypoint_here)):  # one spawn
        line = one_line_error(await cli(settings, "webhooks", *args))
        assert "no webhook delivery 'whd_nope'" in line and "waypoint webhooks list" in line
    store = RunStore(engine)
    run_id = await start(store, settings)
    pending = f"whd_{uuid.uuid4().hex}"
    await store.webhooks.create_delivery(
        settings.tenant, delivery_id=pending, run_id=run_id, event="run.finished", url="http://127.0.0.1:9/x", body="{}"
    )
    line = one_line_error(await waypoint_here(settings, "webhooks", "redeliver", pending))
    assert "is still being retried" in line and "waypoint webhooks list --failed" in line
    line = one_line_error(await waypoint_here(settings, "--tenant", "someone-else", "webhooks", "show", pending))
    assert f"no webhook delivery '{pending}'" in line  # another tenant's is not found, never forbidden
    line = one_line_error(await waypoint_here(settings, "webhooks", "list", "--limit", "0"))
    assert "limit must be a whole number from 1 to 1000" in line
    quiet = await waypoint_here(settings, "webhooks", "list", "--failed")
    assert quiet.code == 0 and "no failed deliveries" in quiet.out


@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_the_dead_letter_list_over_http_the_viewer_and_mcp(
    api: ApiServer, client: Client, engine, settings: Settings, worker, receiver: Receiver
):
    """A receiver that refuses (400) puts the delivery on the dead-letter list at once; HTTP, the
    viewer's page (its form with the CSRF token) and MCP list it and each redelivers it; every
    surface is scoped to the key's tenant."""
    from tests.browser import form_token, sign_in
    from tests.mcp_client import call, over_stdio

    receiver.statuses = [400, 200]
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("add", agent="calculator", webhook=receiver.url)
    await wp.result(run_id)
    dead = await the_delivery(wp, run_id, "the refused delivery", is_failed)
    did = dead.delivery_id

    listed = (await api.http.get("/v1/webhooks/deliveries", params={"failed": "true"})).json()["deliveries"]
    assert [(d["delivery_id"], d["status"], d["last_status_code"]) for d in listed] == [(did, "failed", 400)]
    one = (await api.http.get(f"/v1/webhooks/deliveries/{did}")).json()
    assert one["delivery"]["run_id"] == run_id and [a["status_code"] for a in one["attempts"]] == [400]
    missing = await api.http.get("/v1/webhooks/deliveries/whd_nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    theirs, _ = await wp.keys.create("someone-else", "other")
    for method, path in (
        ("GET", f"/v1/webhooks/deliveries/{did}"),
        ("POST", f"/v1/webhooks/deliveries/{did}/redeliver"),
    ):
        other = await api.http.request(method, path, headers=api.headers(theirs))
        assert other.status_code == 404, other.text
    elsewhere = await api.http.get("/v1/webhooks/deliveries", headers=api.headers(theirs))
    assert elsewhere.json()["deliveries"] == []
    made = await api.http.post(f"/v1/webhooks/deliveries/{did}/redeliver")
    assert made.status_code == 201, made.text
    first = made.json()["delivery"]
    assert (
        first["redelivery_of"] == did and made.headers["Location"] == f"/v1/webhooks/deliveries/{first['delivery_id']}"
    )
    await eventually(lambda: _delivered_one(wp, first["delivery_id"]), what="the HTTP redelivery")
    pending = f"whd_{uuid.uuid4().hex}"
    await RunStore(engine).webhooks.create_delivery(
        settings.tenant, delivery_id=pending, run_id=run_id, event="run.finished", url=receiver.url, body="{}"
    )
    busy = await api.http.post(f"/v1/webhooks/deliveries/{pending}/redeliver")
    assert busy.status_code == 409 and "still being retried" in busy.text
    await RunStore(engine).webhooks.forget_delivery(settings.tenant, pending)  # no workflow will take it up

    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        await sign_in(http, api.key)
        page = await http.get("/ui/webhooks", params={"failed": "true"})
        assert page.status_code == 200 and '<a href="/ui/webhooks">Webhooks</a>' in page.text  # in the nav
        assert f'action="/ui/webhooks/{did}/redeliver"' in page.text and "on the dead-letter list" in page.text
        assert first["delivery_id"] not in page.text  # delivered: not on the failed list
        everything = (await http.get("/ui/webhooks")).text
        assert first["delivery_id"] in everything and "status-delivered" in everything
        token = form_token(page.text)
        origin = {"Origin": api.url}
        refused = await http.post(f"/ui/webhooks/{did}/redeliver", data={"back": "failed"}, headers=origin)
        assert refused.status_code == 403
        form = {"csrf": token, "back": "failed"}
        r = await http.post(f"/ui/webhooks/{did}/redeliver", data=form, headers=origin, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/webhooks?failed=true&notice=redelivering")
        second = re.search(r"as\+(whd_[0-9a-f]+)", r.headers["location"]).group(1)  # type: ignore[union-attr]
        await eventually(lambda: _delivered_one(wp, second), what="the viewer's redelivery")
        detail = await http.get(f"/ui/webhooks/{second}")
        assert detail.status_code == 200 and f'href="/ui/webhooks/{did}"' in detail.text
        assert "delivered after 1 attempt (HTTP 200)" in detail.text
        nope = await http.post("/ui/webhooks/whd_nope/redeliver", data=form, headers=origin, follow_redirects=True)
        assert nope.status_code == 200 and "no webhook delivery &#39;whd_nope&#39;" in nope.text

    # Without the write flag the list is there and redelivery is not: test_mcp_server's READ_TOOLS.
    async with over_stdio(settings, WAYPOINT_MCP_WRITE="true") as writer:
        found = await call(writer, "list_webhook_deliveries", failed=True)
        assert [d["delivery_id"] for d in found] == [did]
        third = (await call(writer, "redeliver_webhook", delivery_id=did))["delivery_id"]
    await eventually(lambda: _delivered_one(wp, third), what="the MCP redelivery")
    assert receiver.answered == [400, 200, 200, 200]
    assert {r.headers["Waypoint-Delivery"] for r in receiver.got} == {did, first["delivery_id"], second, third}


@pytest.mark.postgres
async def test_a_deliverys_attempts_are_spans_of_the_runs_trace(
    stack: StackInfo, engine, settings: Settings, agents, fake_openai: FakeOpenAI, receiver: Receiver
):
    """The delivery's workflow starts in the run's trace; each attempt's span names the delivery, the
    attempt, the receiver's status and what comes next (the URL without its query)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from waypoint import telemetry
    from waypoint.app.worker import build_worker
    from waypoint.telemetry.spanfile import span_dict

    exporter = InMemorySpanExporter()
    telemetry.setup(settings, exporter=exporter)
    receiver.statuses = [503, 200]
    fake_openai.responder = lambda body, n: Turn(content="made it")
    traced = await Client.connect(stack.temporal_address, interceptors=telemetry.client_interceptors(settings))
    async with build_worker(traced, engine, settings, agents):
        wp = Waypoint(traced, engine, settings)
        run_id = await wp.start_run("hi", agent="remote", webhook=receiver.url)
        await wp.result(run_id)
        delivery = await the_delivery(wp, run_id, "the delivery", is_delivered)
    trace_id = await wp.trace_id(run_id)
    telemetry.current().force_flush()
    spans = [span_dict(s) for s in exporter.get_finished_spans()]
    posts = sorted(
        (s for s in spans if s["name"] == "RunActivity:post_webhook"),
        key=lambda s: s["attributes"]["waypoint.webhook.attempt"],
    )
    assert {s["trace_id"] for s in posts} == {trace_id}  # the run's own trace
    assert [
        (
            a["waypoint.webhook.delivery_id"],
            a["waypoint.webhook.attempt"],
            a["http.response.status_code"],
            a["waypoint.webhook.outcome"],
            a["waypoint.run_id"],
        )
        for a in (s["attributes"] for s in posts)
    ] == [
        (delivery.delivery_id, 1, 503, "next attempt in 1 s", run_id),
        (delivery.delivery_id, 2, 200, "delivered", run_id),
    ]
    assert [s["status"] for s in posts] == ["ERROR", "UNSET"]
    assert {s["attributes"]["url.full"] for s in posts} == {receiver.url.split("?")[0]}
    assert "t0k" not in json.dumps(spans)  # the URL's query (a token) reaches no span
    assert any(s["name"] == "RunWorkflow:WebhookDeliveryWorkflow" and s["trace_id"] == trace_id for s in spans)


@pytest.mark.postgres
async def test_a_worker_with_the_readmes_role_delivers_and_dead_letters(
    client: Client,
    engine,
    settings: Settings,
    agents,
    worker_role: str,
    receiver: Receiver,
):
    """The README's worker role may write deliveries (INSERT, UPDATE) as well as attempts."""
    from waypoint.app.worker import build_worker
    from waypoint.store.db import create_engine

    receiver.statuses = [503, 200, 400]
    restricted = create_engine(worker_role)
    try:
        async with build_worker(client, restricted, settings, agents):
            wp = Waypoint(client, engine, settings)
            ok = await wp.start_run("add", agent="calculator", webhook=receiver.url)
            await wp.result(ok)
            assert (await the_delivery(wp, ok, "the delivery", is_delivered)).attempts == 2
            refused = await wp.start_run("add", agent="calculator", webhook=receiver.url)
            await wp.result(refused)
            assert (await the_delivery(wp, refused, "the dead letter", is_failed)).last_status_code == 400
    finally:
        await restricted.dispose()


@needs_browser
@pytest.mark.postgres
@pytest.mark.timeout(120)  # a browser, a stack and a worker under CI load; a hang still fails
async def test_the_webhooks_pages_pass_the_basic_accessibility_check(
    browser,  # noqa: F811
    contexts,  # noqa: F811
    api: ApiServer,
    client: Client,
    engine,
    worker,
    receiver: Receiver,
):
    """The list (filtered to the dead-letter list) and one delivery's page, in a real browser; the
    Redeliver button is a plain form post that sends the delivery again."""
    from tests import a11y

    receiver.statuses = [400, 200]
    wp = Waypoint(client, engine, api.settings)
    run_id = await wp.start_run("add", agent="calculator", webhook=receiver.url)
    await wp.result(run_id)
    dead = await the_delivery(wp, run_id, "the refused delivery", is_failed)
    _, page = await logged_in(browser, contexts, api)
    await page.goto("/ui/webhooks?failed=true")
    assert dead.delivery_id in await page.locator("table.webhooks").inner_text()
    assert await a11y.problems(page) == []
    await page.click(f"button[aria-label='Redeliver {dead.delivery_id}']")  # no script: a plain form post
    await page.wait_for_url("**/ui/webhooks?failed=true&notice=*")
    assert "redelivering" in await page.locator(".notice").inner_text()

    async def redelivered() -> list[WebhookDelivery]:
        found = await wp.webhooks.list(run_id=run_id)
        return [d for d in found if d.redelivery_of == dead.delivery_id and d.status == "delivered"]

    await eventually(redelivered, what="the redelivery delivered")
    await page.goto(f"/ui/webhooks/{dead.delivery_id}")
    assert "the webhook answered HTTP 400" in await page.locator("table.attempts").inner_text()
    assert await a11y.problems(page) == []
