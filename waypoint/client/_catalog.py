"""The agents this deployment's workers serve (the catalog they register), their versions, and the
check that a run can start before anything starts."""

from __future__ import annotations

from waypoint.checks import check_fingerprint, check_text
from waypoint.client._scope import Scope
from waypoint.errors import ConfigError, InvalidInput
from waypoint.models.spec import KEY_VARIABLES, Provider, check_extra, parse_model_spec
from waypoint.store import RunStore
from waypoint.types import AgentInfo
from waypoint.versions import AgentVersion


class Catalog:
    def __init__(self, store: RunStore, scope: Scope):
        self._store = store
        self._scope = scope

    async def agents(self) -> list[AgentInfo]:
        """The agents the workers of this deployment's task queue serve (the catalog they register)."""
        return await self._store.catalog.agents(self._scope.settings.task_queue)

    async def agent(self, name: str) -> AgentInfo:
        """One agent of the catalog; NotFound naming the ones there are."""
        return await self._store.catalog.agent(self._scope.settings.task_queue, check_text("the agent", name))

    async def agent_version(self, fingerprint: str, *, tenant_id: str | None = None) -> AgentVersion:
        """The agent version a run of the tenant started with, by its fingerprint or a prefix of it
        (`RunRow.agent_fingerprint`): instructions, tool schemas, models, MCP tool names. NotFound
        when the tenant has none such (another tenant's versions are not found either)."""
        fingerprint = check_fingerprint(fingerprint)
        if not fingerprint:
            raise InvalidInput("give the agent version's fingerprint (4 to 64 hex digits)")
        return await self._store.versions.agent_version(self._scope.tenant(tenant_id), fingerprint)

    async def check_start(self, agent: str, model: str | None) -> None:
        """Refuse a run that cannot start before anything starts (and before it gets an id): an agent
        no worker serves, a model spec that names no adapter, a model its worker cannot call."""
        info = await self._store.catalog.agent(self._scope.settings.task_queue, agent)
        spec = parse_model_spec(model or info.model)
        if spec.provider == Provider.SCRIPTED and Provider.SCRIPTED not in info.providers:
            raise InvalidInput(f"agent {agent!r} has no scripted turns: pick a model with --model openai:<name>")
        if spec.provider != Provider.SCRIPTED and spec.provider not in info.providers:
            check_extra(spec.provider)  # this process lacks the SDK: the worker may too
            variable = info.settings.get("provider_key_env") or KEY_VARIABLES[spec.provider][0]
            raise ConfigError(
                f"the worker that serves agent {agent!r} ({info.worker}) has no {variable} for {spec.provider}: "
                "models: export it where the worker runs, then restart the worker"
            )
