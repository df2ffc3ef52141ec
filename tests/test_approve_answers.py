"""An approval with an edited input or an ask_human answer, on every surface that approves: the CLI
(`--input`, `--answer`), `/v1` (`edited_input`, `answer`), the viewer's approve form and the MCP
`approve` tool (`answer_text`). Real worker, Temporal and Postgres; the runs wait side by side."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.browser import form_token, sign_in
from tests.conftest import ApiServer
from tests.helpers import eventually, one_line_error, waypoint
from tests.mcp_client import call, over_stdio
from waypoint.client import Waypoint

pytestmark = pytest.mark.postgres


async def waiting(api: ApiServer, agent: str) -> str:
    """A new run of `agent`, once it waits for a human."""
    r = await api.http.post("/v1/runs", json={"task": "go", "agent": agent})
    assert r.status_code == 201, r.text
    run_id: str = r.json()["run_id"]

    async def waits() -> bool:
        return (await api.http.get(f"/v1/runs/{run_id}")).json().get("status") == "waiting_approval"

    await eventually(waits, timeout=30, what=f"{run_id} waiting for approval")
    return run_id


async def ended(wp: Waypoint, run_id: str) -> tuple[str, list[dict]]:
    """The run's final output, and its tool results (name, output)."""
    result = await wp.result(run_id)
    assert result.status == "completed", result
    results = [e.payload for e in await wp.events(run_id, kinds=["tool_result"])]
    return result.output or "", results


async def test_edited_inputs_and_answers_on_every_surface(api: ApiServer, worker, client, engine, settings):
    wp = Waypoint(client, engine, settings)
    cli_pay, cli_ask, v1_pay, v1_ask, ui_pay, mcp_ask = await asyncio.gather(
        *(waiting(api, agent) for agent in ("payer", "asker", "payer", "asker", "payer", "asker"))
    )

    # CLI: a bad --input is one error line and changes nothing; a good one runs the tool with it
    not_json = one_line_error(await waypoint(settings, "approve", cli_pay, "--input", "{amount: 5"))
    assert "--input must be a JSON object" in not_json
    wrong = one_line_error(await waypoint(settings, "approve", cli_pay, "--input", '{"amount": "lots", "to": "bob"}'))
    assert "does not fit its arguments" in wrong
    assert (await wp.run(cli_pay)).status == "waiting_approval"
    done = await waypoint(settings, "approve", cli_pay, "--input", '{"amount": 5, "to": "bob"}')
    assert done.code == 0, done.err
    output, results = await ended(wp, cli_pay)
    assert output == "last tool answer: paid 5 to bob"
    assert [(r["name"], r["output"]) for r in results] == [("pay", "paid 5 to bob")]
    # --answer answers an ask_human call: the answer is the call's result
    done = await waypoint(settings, "approve", cli_ask, "--answer", "teal")
    assert done.code == 0, done.err
    output, results = await ended(wp, cli_ask)
    assert output == "last tool answer: teal" and results[0]["output"] == "teal"

    # /v1: an answer to a plain approval is 422 naming what it expects; edited_input and answer run
    mismatch = await api.http.post(f"/v1/runs/{v1_pay}/approve", json={"answer": "yes"})
    assert mismatch.status_code == 422 and "pay" in mismatch.text, mismatch.text
    edited = await api.http.post(f"/v1/runs/{v1_pay}/approve", json={"edited_input": {"amount": 6, "to": "cy"}})
    assert edited.status_code == 200, edited.text
    answered = await api.http.post(f"/v1/runs/{v1_ask}/approve", json={"answer": "mauve"})
    assert answered.status_code == 200, answered.text
    assert (await ended(wp, v1_pay))[0] == "last tool answer: paid 6 to cy"
    assert (await ended(wp, v1_ask))[0] == "last tool answer: mauve"
    decisions = await api.http.get(f"/v1/runs/{v1_pay}/events", params={"kind": "decision"})
    assert decisions.json()["events"][0]["payload"]["edited_input"] == {"amount": 6, "to": "cy"}

    # the viewer's approve form, with its edited input field
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        await sign_in(http, api.key)
        token = form_token((await http.get(f"/ui/runs/{ui_pay}")).text)
        form = {"csrf": token, "edited_input": json.dumps({"amount": 7, "to": "dee"})}
        sent = await http.post(f"/ui/runs/{ui_pay}/approve", data=form, headers={"Origin": api.url})
        assert sent.status_code in (302, 303) and "approved" in sent.headers["location"], sent.text[:500]
    assert (await ended(wp, ui_pay))[0] == "last tool answer: paid 7 to dee"

    # MCP: approve with answer_text
    async with over_stdio(settings, WAYPOINT_MCP_WRITE="true") as mcp:
        await call(mcp, "approve", run_id=mcp_ask, answer_text="ochre")
    assert (await ended(wp, mcp_ask))[0] == "last tool answer: ochre"
