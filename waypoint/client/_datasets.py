"""Datasets of evaluation cases: made from recorded runs or from a file, versioned, exported."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from waypoint.access import Action, Target, TargetKind
from waypoint.checks import (
    NAME_MAX,
    check_choice,
    check_count,
    check_name,
    check_text,
    parse_selection,
)
from waypoint.client._scope import Scope
from waypoint.errors import Conflict, InvalidInput, NotFound
from waypoint.evals.cases import CASES_MAX, EvalCase, ExpectedCall, check_dataset_name, read_cases
from waypoint.names import RunStatus
from waypoint.store import RunStore
from waypoint.store.evals import DatasetRow

RUN_IDS_MAX = CASES_MAX


class Datasets:
    def __init__(self, store: RunStore, scope: Scope):
        self._store = store
        self._scope = scope

    async def create_dataset(
        self,
        name: str,
        *,
        select: str | None = None,
        run_ids: Sequence[str] = (),
        limit: int = 200,
        lines: Iterable[str] | None = None,
        cases: Sequence[EvalCase] | None = None,
        source: str | None = None,
        tenant_id: str | None = None,
    ) -> DatasetRow:
        """The next version of dataset `name`: from the tenant's recorded runs (`select`, as for
        `rerun --select`, newest first, reruns left out, at most `limit`; and/or `run_ids`), each run
        a case whose expected output and tools are what it answered and called; or from cases
        (`lines` of JSONL, or `cases`), `source` naming their file."""
        async with self._scope.act(Action.EVALUATE, tenant_id, Target(TargetKind.EVAL, f"dataset:{name}")) as tenant_id:
            check_dataset_name(name)
            tenant = self._scope.tenant(tenant_id)
            from_runs = select is not None or bool(run_ids)
            if from_runs == (lines is not None or cases is not None):
                raise InvalidInput(
                    "make a dataset from runs (--from-runs with --select or --run) or from a file, not both"
                )
            if from_runs:
                made = await self._cases_from_runs(tenant, select, run_ids, limit)
                origin: dict[str, Any] = {
                    "kind": "runs",
                    "select": select,
                    "run_ids": list(run_ids)[:50],
                    "limit": limit,
                }
            else:
                where = check_text("the file name", source or "the cases", high=NAME_MAX)
                made = list(cases) if cases is not None else read_cases(lines or [], where)
                if not made:
                    raise InvalidInput(f"{where} has no cases: write one JSON object a line, each with a task")
                if len(made) > CASES_MAX:
                    raise InvalidInput(f"{len(made)} cases: keep a dataset to {CASES_MAX}")
                origin = {"kind": "file", "file": where}
            return await self._store.evals.create_dataset(tenant, name, origin, made)

    async def _cases_from_runs(
        self, tenant: str, select: str | None, run_ids: Sequence[str], limit: int
    ) -> list[EvalCase]:
        check_count("the limit", limit, high=CASES_MAX)
        if len(run_ids) > RUN_IDS_MAX:
            raise InvalidInput(f"{len(run_ids)} run ids: keep it to {RUN_IDS_MAX}")
        chosen: list[str] = []
        if select is not None:
            found = parse_selection(check_text("the selection", select))
            if "status" in found:
                check_choice("status", str(found["status"]), RunStatus)
            since = datetime.now(UTC) - timedelta(seconds=int(found["since"])) if "since" in found else None
            rows = await self._store.list_runs(
                tenant,
                limit=limit,
                status=str(found["status"]) if "status" in found else None,
                agent=str(found["agent"]) if "agent" in found else None,
                since=since,
                originals=True,
            )
            chosen += [r.run_id for r in rows]
        for run_id in run_ids:
            check_name("the run id", run_id)
        known = await self._store.evals.existing_runs(tenant, list(run_ids)) if run_ids else set()
        missing = [r for r in run_ids if r not in known]
        if missing:
            raise NotFound(f"no run {missing[0]!r} for tenant {tenant!r}: list runs with `waypoint runs`")
        chosen += [r for r in run_ids if r not in chosen]
        if not chosen:
            raise NotFound(f"no run matches {select!r}: list runs with `waypoint runs`, or give --run ids")
        made = []
        for index, run_id in enumerate(chosen):
            run = await self._store.get_run(tenant, run_id)
            if not RunStatus(run.status).finished:
                raise Conflict(f"run {run_id} is {run.status}: a dataset records finished runs; wait for its end")
            seen = await self._store.evals.eval_run(tenant, run_id)
            calls = [ExpectedCall(c.name, _object(c.arguments)) for c in seen.tool_calls]
            made.append(
                EvalCase(
                    index=index,
                    task=run.task,
                    case_id=run_id,
                    expected_output=run.output_json if run.output_json is not None else run.output,
                    expected_tools=calls,
                    metadata={"agent": run.agent, "status": run.status, "model": run.model},
                    source_run_id=run_id,
                )
            )
        return made

    async def datasets(self, *, tenant_id: str | None = None) -> list[DatasetRow]:
        return await self._store.evals.list_datasets(self._scope.tenant(tenant_id))

    async def dataset(self, name: str, *, version: int | None = None, tenant_id: str | None = None) -> DatasetRow:
        check_dataset_name(name)
        if version is not None:
            check_count("the version", version, high=2**31 - 1)
        return await self._store.evals.get_dataset(self._scope.tenant(tenant_id), name, version)

    async def cases(self, name: str, *, version: int | None = None, tenant_id: str | None = None) -> list[EvalCase]:
        found = await self.dataset(name, version=version, tenant_id=tenant_id)
        return await self._store.evals.dataset_cases(found.tenant_id, found.name, found.version)

    async def export_dataset(
        self, name: str, *, version: int | None = None, tenant_id: str | None = None
    ) -> AsyncIterator[str]:
        """The dataset version as JSONL (what `--from-file` reads back), one line a case."""
        for case in await self.cases(name, version=version, tenant_id=tenant_id):
            yield json.dumps(case.as_line(), ensure_ascii=False) + "\n"

    # --- experiments ------------------------------------------------------------------------------


def _object(arguments: str) -> dict[str, Any] | None:
    """A recorded call's arguments as the object they are (None when they are not one)."""
    try:
        found = json.loads(arguments)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
