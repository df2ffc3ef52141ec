"""Every /v1 operation of Waypoint's own HTTP API, fuzzed with schemathesis from the API's own
OpenAPI document against a real `waypoint serve` (uvicorn) on the test stack (Temporal dev server,
Postgres, a worker and a memory worker), with a valid key. Checked on every answer: no 5xx; the status,
content type and body are ones the document describes; input the document calls invalid is refused
with a 4xx.

- stateless: each operation with its path parameters naming real things (a finished run, a
  schedule, an assistant), then with random ones, then with invalid input;
- stateful: runs, schedules and assistants are created and the ids they answer are fed to the
  operations on them (read, steps, pause, cancel, fork, delete...). FastAPI emits no OpenAPI links,
  so `linked` adds them to the document here; schemathesis' own stateful checks (a deleted thing
  is gone, a created one is there) run too.

Bounded for CI: a few examples per operation, derandomized (the same requests on every run). What
is not fuzzed as the others, and why: BOUNDED.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ensure_resource_availability,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    use_after_free,
)

from tests.conftest import ApiServer
from tests.helpers import eventually, finished

pytestmark = pytest.mark.postgres

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
REAL, RANDOM, INVALID = 5, 2, 4  # examples per operation: real path parameters, random ones, invalid input
STEPS = 6  # stateful: calls in a sequence at most
TIMEOUT = 20.0  # seconds, one request

# The operations that hold the connection open while something happens: never fed a live run.
# GET /v1/runs/{run_id}/stream follows a run until it ends (SSE): fuzzed on a finished run (its
# log, then the end) and on random ids (404), never linked in the stateful pass, where the run may
# still be running. Every other /v1 operation answers at once and is fuzzed like any other.
BOUNDED = {("GET", "/v1/runs/{run_id}/stream")}


def settings(examples: int, **extra: Any) -> hypothesis.settings:
    return hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        **extra,
    )


def served_document(url: str, keep: Callable[[str], bool]) -> dict[str, Any]:
    """The served OpenAPI document, reduced to the paths `keep` keeps."""
    spec: dict[str, Any] = httpx.get(f"{url}/openapi.json", timeout=TIMEOUT).json()
    spec["paths"] = {path: item for path, item in spec["paths"].items() if keep(path)}
    return spec


def is_v1(path: str) -> bool:
    return path.startswith("/v1/")


# --- stateless -------------------------------------------------------------------------------------


def exercise(
    operation: schemathesis.APIOperation,
    mode: GenerationMode,
    examples: int,
    url: str,
    headers: dict[str, str],
    path_parameters: dict[str, str] | None = None,
) -> None:
    @settings(examples)
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode, path_parameters=path_parameters))
    def check(case: schemathesis.Case) -> None:
        response = case.call(base_url=url, headers=headers, timeout=TIMEOUT)
        case.validate_response(response, checks=CHECKS, headers=headers)

    check()


def fuzz_each(url: str, key: str, real: dict[str, str]) -> tuple[list[str], set[str]]:
    """Every /v1 operation; the failures as text, and the operations fuzzed. Deletes go last, so the
    real things stay until every other operation has had them."""
    schema = schemathesis.openapi.from_dict(served_document(url, is_v1))
    headers = {"Authorization": f"Bearer {key}"}
    operations = sorted((r.ok() for r in schema.get_all_operations()), key=lambda op: op.method.upper() == "DELETE")
    failures: list[str] = []
    for operation in operations:
        names = re.findall(r"{(\w+)}", operation.path)
        passes: list[tuple[GenerationMode, int, dict[str, str] | None]] = [
            (GenerationMode.POSITIVE, REAL, {name: real[name] for name in names}),
            (GenerationMode.POSITIVE, RANDOM, None),
            (GenerationMode.NEGATIVE, INVALID, None),
        ]
        for mode, examples, path_parameters in passes if names else passes[1:]:
            try:
                exercise(operation, mode, examples, url, headers, path_parameters)
            except hypothesis.errors.Unsatisfiable:
                pass  # nothing of this operation can be made invalid (no parameters, no body)
            except (Exception, BaseExceptionGroup) as e:  # noqa: BLE001 - collected: one run names every failure
                how = "real ids" if path_parameters else mode.value
                failures.append(f"{how} {operation.method.upper()} {operation.path}: {e}"[:3000])
    return failures, {f"{op.method.upper()} {op.path}" for op in operations}


def summary(failures: list[str]) -> str:
    """One line a failure: the operation, what failed, the status and the request that showed it."""
    lines = []
    for text in failures:
        found = re.findall(r"- ([A-Z]+[0-9]+ [^\n]+)|Received: ([0-9]+)|(curl [^\n]+)", text)
        lines.append(text.split(":", 1)[0] + " | " + " | ".join("".join(g)[:300] for g in found))
    return "\n".join(lines)


async def real_things(api: ApiServer) -> dict[str, str]:
    """A finished run, a schedule, an assistant, a dataset and a finished experiment of the key's
    tenant: the path parameters of the pass that reaches past the 404s."""
    http = api.http
    started = await http.post("/v1/runs", json={"task": "add", "agent": "calculator", "max_steps": 10})
    run_id = started.json()["run_id"]
    await finished(api, run_id)
    every = {"task": "add", "agent": "calculator", "every": 3600, "paused": True}
    schedule_id = (await http.post("/v1/schedules", json=every)).json()["schedule_id"]
    assistant_id = (await http.post("/assistants", json={"graph_id": "calculator"})).json()["assistant_id"]
    fingerprint = (await http.get(f"/v1/runs/{run_id}")).json()["agent_fingerprint"]
    await http.post("/v1/datasets", json={"name": "fuzzed", "from_runs": {"run_ids": [run_id]}})
    body = {"dataset": "fuzzed", "agent": "calculator", "recorded_tools": True, "scorers": ["exact"]}
    experiment_id = (await http.post("/v1/experiments", json=body)).json()["experiment_id"]

    async def ended() -> bool:
        return (await http.get(f"/v1/experiments/{experiment_id}")).json()["experiment"]["status"] != "running"

    await eventually(ended, timeout=60, what=f"the end of {experiment_id}")
    return {
        "fingerprint": fingerprint,
        "run_id": run_id,
        "other": run_id,
        "step": "2",
        "name": "calculator",
        "schedule_id": schedule_id,
        "assistant_id": assistant_id,
        "dataset": "fuzzed",
        "experiment_id": experiment_id,
        "other_id": experiment_id,
        # No delivery of the tenant's: a redelivery here would start a delivery workflow that retries
        # for a day after the test's worker is gone. Its operations answer 404 here, 201 in test_webhooks.
        "delivery_id": "whd_fuzzed",
    }


@pytest.fixture
async def no_schedules_left(api: ApiServer) -> AsyncIterator[None]:
    """The schedules a fuzz made are deleted after it: some fire every second, and Temporal would go
    on firing runs of them (on a queue no worker serves any more) under every later test of the session."""
    yield
    listed = await api.http.get("/v1/schedules", params={"limit": 500})
    for schedule in listed.json().get("schedules", []) if listed.status_code == 200 else []:
        await api.http.delete(f"/v1/schedules/{schedule['schedule_id']}")


@pytest.mark.timeout(300)
async def test_every_v1_operation(api: ApiServer, memory_worker, no_schedules_left):
    real = await real_things(api)
    failures, fuzzed = await asyncio.to_thread(fuzz_each, api.url, api.key, real)
    assert len(fuzzed) >= 47 and "POST /v1/runs" in fuzzed and "GET /v1/runs/{run_id}/stream" in fuzzed
    assert {"POST /v1/experiments", "GET /v1/experiments/{experiment_id}", "GET /v1/datasets/{dataset}"} <= fuzzed
    assert not failures, summary(failures) + "\n\n" + "\n\n".join(failures)


# --- stateful --------------------------------------------------------------------------------------

RUN_MAKERS = [("/v1/runs", "post"), ("/v1/runs/{run_id}/fork", "post"), ("/v1/runs/{run_id}/rerun", "post")]
AGENTS = ["calculator"]  # what the stateful pass starts: an agent that ends in a few steps


def linked(spec: dict[str, Any]) -> dict[str, Any]:
    """The document with OpenAPI links from each create to the operations on what it made: a run's id
    from the run starts to every /v1/runs/{run_id}... operation (but BOUNDED), a schedule's to its
    operations and its runs, an assistant's (the Agent Protocol makes them) to /v1/assistants/{id}.
    The agent of a start is one that ends (AGENTS), so the chain has a run to work on."""
    spec = copy.deepcopy(spec)
    paths = spec["paths"]

    def link(source: tuple[str, str], status: str, name: str, field: str) -> None:
        if source[1] not in paths.get(source[0], {}):
            return  # not in this document
        links = paths[source[0]][source[1]]["responses"][status].setdefault("links", {})
        for path, item in paths.items():
            for method, operation in item.items():
                names = re.findall(r"{(\w+)}", path)
                query = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
                if (method.upper(), path) in BOUNDED or not (name in names or (not names and name in query)):
                    continue
                values = {n: f"$response.body#/{field}" for n in names if n in (name, "other")}
                # step 0: a run has it from its start; step 1 read right after a start races the run's
                # first model call (a 404 schemathesis takes for a created resource gone missing)
                values.update({"step": "0"} if "step" in names else {})
                if not names:
                    values = {f"query.{name}": f"$response.body#/{field}"}
                links[operation["operationId"]] = {"operationId": operation["operationId"], "parameters": values}
        assert links, (source, name)

    for maker in RUN_MAKERS:
        link(maker, "201", "run_id", "run_id")
    link(("/v1/schedules", "post"), "201", "schedule_id", "schedule_id")
    link(("/assistants", "post"), "200", "assistant_id", "assistant_id")
    schemas = spec["components"]["schemas"]
    for model in ("StartRun", "CreateSchedule"):
        schemas[model]["properties"]["agent"] = {"type": "string", "enum": AGENTS}
    schemas["Create"]["properties"]["graph_id"] = {"type": "string", "enum": AGENTS}
    schemas["CreateSchedule"] = valid_schedule(schemas["CreateSchedule"])
    return spec


def valid_schedule(model: dict[str, Any]) -> dict[str, Any]:
    """A schedule's create, as the chains send it: only bodies the server takes. Its rules span
    fields (exactly one of every and cron; tz only with cron; a model, thread or webhook that
    exists), which no JSON Schema says, so a random body is a 400 nearly always, and a chain that
    starts with one reaches nothing past its create (derandomized, it never did on some versions
    of schemathesis). Random and invalid bodies: the stateless pass."""
    keep = ("agent", "overlap", "catchup_seconds", "jitter_seconds", "priority", "paused")
    properties = {name: model["properties"][name] for name in keep}
    properties["task"] = {"type": "string", "pattern": "^[a-z]{1,40}$"}
    properties["every"] = {"type": "number", "minimum": 60, "maximum": 86400}  # none fires under the test
    return {**model, "properties": properties, "required": ["agent", "task", "every"], "additionalProperties": False}


STATEFUL_CHECKS = [*CHECKS, use_after_free, ensure_resource_availability]
# Each family: the paths of a create and of the operations on what it made. A machine of its own
# each, so that every sequence starts with a create (an operation no link leads to is a start).
FAMILIES = {"runs": 10, "schedules": 6, "assistants": 5}  # and the sequences each


def family_paths(spec: dict[str, Any], family: str) -> dict[str, Any]:
    """The paths of one family: its create, and every path under what it makes."""
    below = {"runs": "/v1/runs/{run_id}", "schedules": "/v1/schedules/{schedule_id}"}.get(family)
    if family == "assistants":
        return {
            "/assistants": {"post": spec["paths"]["/assistants"]["post"]},
            "/assistants/{assistant_id}": {"delete": spec["paths"]["/assistants/{assistant_id}"]["delete"]},
            **{p: item for p, item in spec["paths"].items() if p.startswith("/v1/assistants/{assistant_id}")},
        }
    create = f"/v1/{family}"
    paths = {p: item for p, item in spec["paths"].items() if below and p.startswith(below)}
    for method, path in BOUNDED:  # never fed a live run
        paths[path] = {m: op for m, op in paths.get(path, {}).items() if m != method.lower()}
    paths = {p: item for p, item in paths.items() if item}
    paths[create] = {"post": spec["paths"][create]["post"]}
    if family == "schedules":
        paths["/v1/runs"] = {"get": spec["paths"]["/v1/runs"]["get"]}  # ?schedule_id=: the runs it fired
    return paths


def fuzz_statefully(url: str, key: str, family: str, scenarios: int) -> dict[str, set[int]]:
    """Sequences of linked calls in one family; the statuses each operation answered."""
    spec = served_document(url, lambda path: is_v1(path) or path.startswith("/assistants"))
    spec["paths"] = family_paths(spec, family)
    schema = schemathesis.openapi.from_dict(linked(spec))
    schema.config.generation.update(modes=[GenerationMode.POSITIVE])  # invalid input: the stateless pass
    headers = {"Authorization": f"Bearer {key}"}
    machine = schema.as_state_machine()
    answered: dict[str, set[int]] = {}

    class Chains(machine):  # type: ignore[valid-type, misc]
        def after_call(self, response: schemathesis.Response, case: schemathesis.Case) -> None:
            super().after_call(response, case)
            answered.setdefault(f"{case.method.upper()} {case.path}", set()).add(response.status_code)

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {"base_url": url, "headers": headers, "timeout": TIMEOUT}

        def validate_response(
            self, response: schemathesis.Response, case: schemathesis.Case, additional_checks: Any = None, **kwargs: Any
        ) -> None:
            case.validate_response(
                response, checks=STATEFUL_CHECKS, headers=headers, transport_kwargs=kwargs, recorder=self.recorder
            )

    Chains.run(settings=settings(scenarios, stateful_step_count=STEPS))
    return answered


@pytest.mark.timeout(300)
async def test_chains_of_v1_operations(api: ApiServer, memory_worker, no_schedules_left):
    answered: dict[str, set[int]] = {}
    belows = {
        "runs": "/v1/runs/{run_id}",
        "schedules": "/v1/schedules/{schedule_id}",
        "assistants": "/v1/assistants/{assistant_id}",
    }
    for family, scenarios in FAMILIES.items():
        found = await asyncio.to_thread(fuzz_statefully, api.url, api.key, family, scenarios)
        for op, statuses in found.items():
            answered.setdefault(op, set()).update(statuses)
    # the chains reached past the creates: an operation on what each made answered 2xx, by its id
    assert 201 in answered["POST /v1/runs"] and 201 in answered["POST /v1/schedules"]
    for below in belows.values():
        family = below.split("{")[0]
        seen = "; ".join(
            f"{op} {sorted(s)}" for op, s in sorted(answered.items()) if op.split(" ")[1].startswith(family)
        )
        assert reached_below(answered, below), f"nothing under {below} answered 2xx: {seen}"


def reached_below(answered: dict[str, set[int]], below: str) -> set[str]:
    """The operations under `below` (on what a create made) that answered 2xx."""
    return {op for op, statuses in answered.items() if below in op and any(200 <= s < 300 for s in statuses)}
