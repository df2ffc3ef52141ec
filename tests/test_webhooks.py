"""Webhooks against a real local receiver: a run posts its final state once, signed with its
tenant's secret, retried through a receiver that fails first; every attempt is recorded; a refusing
receiver is not retried; a bad URL is refused before anything starts. The workflow's side (once,
after finish_run, whatever the delivery's fate) is in tests/test_workflow_logic.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from tests.conftest import ApiServer
from tests.helpers import one_line_error, start, waypoint
from tests.webhook_receiver import Receiver, receiving
from waypoint.activities.webhooks import WebhookActivities
from waypoint.app.client import Waypoint
from waypoint.checks import check_webhook
from waypoint.config import Settings
from waypoint.errors import InvalidInput
from waypoint.store import RunStore
from waypoint.testing.fake_openai import FakeOpenAI, Turn
from waypoint.types import DeliverWebhookInput
from waypoint.webhooks import WebhookSignatureError, signed_headers, verify


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving([200]) as found:
        yield found


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
async def test_a_receiver_that_fails_twice_gets_one_signed_delivery(
    client: Client, engine, settings: Settings, worker, fake_openai: FakeOpenAI, receiver: Receiver
):
    receiver.statuses = [503, 503, 200]
    fake_openai.responder = lambda body, n: Turn(content="made it")  # every attempt, should one time out
    wp = Waypoint(client, engine, settings)
    run_id = await wp.start_run("hi", agent="remote", webhook=receiver.url)
    result = await wp.result(run_id)  # the workflow ends once its webhook is delivered (or given up)
    assert (result.status, result.output) == ("completed", "made it")
    assert receiver.answered == [503, 503, 200]
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
    assert len({r.headers["Waypoint-Delivery"] for r in receiver.got}) == 1
    assert event["delivery_id"] == delivered.headers["Waypoint-Delivery"]
    assert delivered.headers["Content-Type"] == "application/json"
    assert delivered.headers["User-Agent"].startswith("Waypoint-Webhooks/")
    attempts = await wp.webhook_attempts(run_id)
    assert [(a.attempt, a.status_code, a.delivered) for a in attempts] == [
        (1, 503, False),
        (2, 503, False),
        (3, 200, True),
    ]
    assert "HTTP 503" in (attempts[0].error or "") and attempts[2].error is None
    assert {a.url for a in attempts} == {receiver.url}
    row = await wp.run(run_id)
    assert (row.status, row.output, row.webhook) == ("completed", "made it", receiver.url)
    shown = await waypoint(settings, "status", run_id)
    assert "webhook: delivered after 3 attempts (HTTP 200)" in shown.out, shown.out


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
    assert receiver.answered == [400]
    (attempt,) = await wp.webhook_attempts(run_id)
    assert (attempt.status_code, attempt.delivered) == (400, False)
    assert (attempt.error or "").startswith("the webhook answered HTTP 400")
    assert (await wp.run(run_id)).status == "completed"


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
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(hooks.deliver_webhook, DeliverWebhookInput(run_id, settings.tenant, url, "d1"))
    assert caught.value.non_retryable and caught.value.type == "WebhookRefused"
    (attempt,) = await store.webhook_attempts(settings.tenant, run_id)
    assert attempt.status_code is None and not attempt.delivered
    assert "resolves to a cloud metadata address (169.254.169.254)" in (attempt.error or "")


@pytest.mark.postgres
@pytest.mark.parametrize("url", ["ftp://x", "http://169.254.169.254/"])
async def test_the_cli_refuses_a_bad_webhook_and_starts_nothing(client: Client, engine, settings: Settings, url: str):
    line = one_line_error(await waypoint(settings, "run", "hi", "--agent", "remote", "--webhook", url))
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
    shown = await waypoint(settings, "webhook", "secret", "--json")
    assert json.loads(shown.out)["secret"] == first
    rotated = (await api.http.post("/v1/webhooks/secret/rotate")).json()["secret"]
    assert rotated != first and rotated.startswith("whsec_")
    started = await api.http.post("/v1/runs", json={"task": "add", "agent": "calculator", "webhook": receiver.url})
    run_id = started.json()["run_id"]
    await Waypoint(client, engine, settings).result(run_id)
    found = (await api.http.get(f"/v1/runs/{run_id}/webhook")).json()
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
    (delivered,) = receiver.delivered
    event = json.loads(delivered.body)
    assert (event["run_id"], event["status"]) == (run["run_id"], "completed")
