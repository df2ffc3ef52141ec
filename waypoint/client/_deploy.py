"""Deploying new code: replay one run or every open execution against the code installed here (the
deploy gate), and move a Worker Deployment's current version."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from waypoint.access import Action, Target, TargetKind
from waypoint.checks import check_count, check_deployment_version, parse_when
from waypoint.client._scope import Scope, TemporalLink
from waypoint.gateway.deploy import FINISHED_DEFAULT, FINISHED_MAX, DeployCheck


@dataclass(frozen=True)
class ReplayOutcome:
    execution: str  # Temporal's run id of one execution (continue-as-new makes several)
    error: str | None  # the determinism error, or None when it replays


class Deploys:
    def __init__(self, temporal: TemporalLink, scope: Scope):
        self._temporal = temporal
        self._scope = scope

    async def replay(
        self, run_id: str, *, tenant_id: str | None = None, workflows: Sequence[type] | None = None
    ) -> list[ReplayOutcome]:
        """Replay every execution of the run (continue-as-new included) against the current workflow code."""
        await self._scope.check_tenant(run_id, tenant_id)
        if workflows is None:
            from waypoint.workflows.agent_run import AgentRunWorkflow

            workflows = (AgentRunWorkflow,)
        outcomes = await (await self._temporal()).replay(run_id, workflows)
        return [ReplayOutcome(execution, error) for execution, error in outcomes]

    async def check_deploy(
        self,
        *,
        finished: int = FINISHED_DEFAULT,
        since: str | datetime | None = None,
        workflows: Mapping[str, Sequence[type]] | None = None,
        full_sandbox: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> DeployCheck:
        """The deploy gate: replay the Temporal histories of every open execution of Waypoint's
        workflows on its task queues, and of the last `finished` closed ones (most recently closed
        first; only those closed since `since`, an age such as `24h` or an ISO time), against the
        workflow code installed here (`workflows`: task queue -> workflow classes, default what this
        code's workers register). Run it with the code about to be deployed; every tenant's runs count.
        `full_sandbox`: replay in the workers' own sandbox, Waypoint's modules imported afresh for each
        history (about 7x slower; the default passes them through, see `TemporalGateway.replayer`).
        `progress(replayed, listed)` follows a long check."""
        check_count("finished", finished, low=0, high=FINISHED_MAX)
        when = parse_when("since", since) if isinstance(since, str) else since
        if workflows is None:
            from waypoint.gateway.code import deployed_workflows

            workflows = deployed_workflows(self._scope.settings)
        classes = list(dict.fromkeys(cls for group in workflows.values() for cls in group))
        return await (await self._temporal()).check_deploy(
            classes, list(workflows), finished=finished, since=when, full_sandbox=full_sandbox, progress=progress
        )

    async def set_current_deployment(self, deployment: str, build_id: str | None = None) -> str | None:
        """Make version `build_id` of the Worker Deployment `deployment` current (default: the build id
        of the code installed here, which `waypoint worker --deployment` uses when given none): new
        runs go to its workers, and open runs too at their next workflow task unless they are pinned.
        Returns the build id it replaced (None: there was no current version)."""
        async with self._scope.act(Action.DEPLOY, None, Target(TargetKind.SETTING, f"deployment:{deployment}")):
            if build_id is None:
                from waypoint.gateway.code import build_id as local_build_id

                build_id = local_build_id()
            deployment, build_id = check_deployment_version(deployment, build_id)
            return await (await self._temporal()).set_current_version(deployment, build_id)

    async def deployment(self, deployment: str) -> tuple[str | None, list[str]]:
        """The current build id of the Worker Deployment (None: none yet) and the build ids of its versions."""
        check_deployment_version(deployment, "any")
        return await (await self._temporal()).deployment_versions(deployment)
