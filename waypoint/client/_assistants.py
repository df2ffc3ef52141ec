"""`wp.assistants`: Agent Protocol assistants, tenant-scoped and validated here for every surface.

An assistant is an agent of the catalog (its `graph_id`) with the config and context its runs
start with (`waypoint.run_config`: model, instructions, budgets, priority). Every update is a new
version; `set_latest` picks the version runs use. Each agent of the catalog is an assistant too
(built in: its id and graph id are the agent's name, version 1, read-only: agents are code).

    a = await wp.assistants.create("demo", config={"configurable": {"instructions": "Be brief."}})
    a2 = await wp.assistants.update(a.assistant_id, context={"max_steps": 3})   # version 2
    await wp.assistants.set_latest(a.assistant_id, 1)
"""

from __future__ import annotations

import uuid
from typing import Any

from waypoint.access import Action, Target, TargetKind
from waypoint.checks import check_count, check_json, check_name, check_text
from waypoint.client._catalog import Catalog
from waypoint.client._scope import Scope
from waypoint.errors import Conflict, InvalidInput, NotFound, UnknownAgent
from waypoint.run_config import RunConfig, run_config
from waypoint.store.assistants import AssistantRow, AssistantStore
from waypoint.types import AgentInfo

IF_EXISTS = ("raise", "do_nothing")


def builtin(info: AgentInfo) -> AssistantRow:
    """A catalog agent as an assistant: its name is its id and graph id; version 1, read-only."""
    return AssistantRow(
        assistant_id=info.name,
        graph_id=info.name,
        name=info.name,
        version=1,
        config={"configurable": {"model": info.model}},
        context={},
        metadata={
            "model": info.model,
            "providers": list(info.providers),
            "tools": [t.name for t in info.tools],
            "worker": info.worker,
        },
        description=info.description,
        created_at=info.updated_at,
        updated_at=info.updated_at,
        builtin=True,
    )


def _read_only(assistant_id: str) -> Conflict:
    return Conflict(
        f"assistant {assistant_id!r} is the agent {assistant_id!r} of the catalog (read-only: agents are code): "
        f'create an assistant of it (POST /assistants {{"graph_id": "{assistant_id}"}}) and change that one'
    )


def _matches(row: AssistantRow, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None) -> bool:
    if graph_id and row.graph_id != graph_id:
        return False
    if name and name.lower() not in row.name.lower():
        return False
    return not metadata or all(row.metadata.get(k) == v for k, v in metadata.items())


def assistant_target(assistant_id: str | None) -> Target | None:
    return Target(TargetKind.ASSISTANT, assistant_id) if assistant_id is not None else None


class Assistants:
    def __init__(self, store: AssistantStore, scope: Scope, catalog: Catalog):
        self._store = store
        self._scope = scope
        self._scoped = scope.scoped  # the tenant a call acts for
        self._agents = catalog

    async def _catalog(self, assistant_id: str) -> AssistantRow | None:
        for info in await self._agents.agents():
            if info.name == assistant_id:
                return builtin(info)
        return None

    async def _graph(self, graph_id: str) -> None:
        check_name("the graph id", graph_id)
        try:
            await self._agents.agent(graph_id)
        except UnknownAgent as exc:
            raise InvalidInput(f"graph_id {graph_id!r} is no agent of this deployment: {exc}") from None

    async def create(
        self,
        graph_id: str,
        *,
        config: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        assistant_id: str | None = None,
        if_exists: str = "raise",
        tenant_id: str | None = None,
    ) -> AssistantRow:
        """A new assistant of agent `graph_id` at version 1. An existing id is a Conflict, or with
        `if_exists="do_nothing"` that assistant; an agent's name is taken (its built-in assistant)."""
        async with self._scope.act(Action.POLICY_WRITE, tenant_id, assistant_target(assistant_id)) as tenant_id:
            if if_exists not in IF_EXISTS:
                raise InvalidInput("if_exists is raise or do_nothing")
            tenant = self._scoped(tenant_id)
            await self._graph(graph_id)
            run_config(config, context)  # what they say must mean something, before anything is stored
            for label, value in (("the config", config), ("the context", context), ("the metadata", metadata)):
                check_json(label, value)
            check_text("the description", description)
            assistant_id = check_name("the assistant id", assistant_id) or str(uuid.uuid4())
            if await self._catalog(assistant_id) is not None:
                raise Conflict(
                    f"assistant id {assistant_id!r} is an agent's name (its built-in assistant): pick another"
                )
            values = {
                "graph_id": graph_id,
                "config": config or {},
                "context": context or {},
                "metadata": metadata or {},
                "name": check_name("the name", name) or graph_id,
                "description": description,
            }
            return await self._store.create_assistant(tenant, assistant_id, values, if_exists=if_exists)

    async def get(self, assistant_id: str, *, version: int | None = None, tenant_id: str | None = None) -> AssistantRow:
        """The tenant's assistant (at its current version, or `version`), or a catalog agent's."""
        check_name("the assistant id", assistant_id)
        tenant = self._scoped(tenant_id)
        if version is not None:
            check_count("the version", version, high=2**31 - 1)
        try:
            row = await self._store.get_assistant(tenant, assistant_id)
        except NotFound as exc:
            found = await self._catalog(assistant_id)
            if found is None:  # neither the tenant's nor an agent's: as an unknown agent is
                raise UnknownAgent(str(exc)) from None
            if version not in (None, 1):
                raise NotFound(f"assistant {assistant_id!r} (an agent of the catalog) has only version 1") from None
            return found
        if version is None or version == row.version:
            return row
        return await self._store.get_assistant(tenant, assistant_id, version)

    async def search(
        self,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        tenant_id: str | None = None,
    ) -> list[AssistantRow]:
        """The catalog's agents (by name), then the tenant's assistants (newest first), filtered:
        of `graph_id`, whose name holds `name` (any case), whose metadata contains `metadata`."""
        check_count("the limit", limit, high=1000)
        check_count("the offset", offset, low=0, high=2**31 - 1)
        check_json("the metadata", metadata)
        tenant = self._scoped(tenant_id)
        catalog = [a for a in map(builtin, await self._agents.agents()) if _matches(a, graph_id, name, metadata)]
        wanted = offset + limit - len(catalog)
        own = await self._store.search_assistants(
            tenant, graph_id=graph_id, name=name, metadata=metadata, limit=max(wanted, 1), offset=0
        )
        return [*catalog, *own][offset : offset + limit]

    async def count(
        self,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        tenant_id: str | None = None,
    ) -> int:
        check_json("the metadata", metadata)
        tenant = self._scoped(tenant_id)
        catalog = [a for a in map(builtin, await self._agents.agents()) if _matches(a, graph_id, name, metadata)]
        own = await self._store.count_assistants(tenant, graph_id=graph_id, name=name, metadata=metadata)
        return len(catalog) + own

    async def update(
        self,
        assistant_id: str,
        *,
        graph_id: str | None = None,
        config: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        tenant_id: str | None = None,
    ) -> AssistantRow:
        """A new version, made the current one: what is given replaces the current version's
        (metadata is merged into it). An assistant keeps its graph: another `graph_id` is refused."""
        async with self._scope.act(Action.POLICY_WRITE, tenant_id, assistant_target(assistant_id)) as tenant_id:
            current = await self.get(assistant_id, tenant_id=tenant_id)
            if current.builtin:
                raise _read_only(assistant_id)
            if graph_id is not None and graph_id != current.graph_id:
                raise InvalidInput(
                    f"assistant {assistant_id!r} runs graph {current.graph_id!r}: an assistant keeps its graph; "
                    f"create a new assistant with graph_id {graph_id!r} instead"
                )
            run_config(
                config if config is not None else current.config, context if context is not None else current.context
            )
            for label, value in (("the config", config), ("the context", context), ("the metadata", metadata)):
                check_json(label, value)
            check_text("the description", description)
            changes = {
                "config": config,
                "context": context,
                "metadata": metadata,
                "name": check_name("the name", name),
                "description": description,
            }
            return await self._store.update_assistant(self._scoped(tenant_id), assistant_id, changes)

    async def versions(
        self,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        tenant_id: str | None = None,
    ) -> list[AssistantRow]:
        """Every version of the assistant, newest first."""
        check_count("the limit", limit, high=1000)
        check_count("the offset", offset, low=0, high=2**31 - 1)
        check_json("the metadata", metadata)
        current = await self.get(assistant_id, tenant_id=tenant_id)
        if current.builtin:
            return [current][offset : offset + limit] if _matches(current, None, None, metadata) else []
        tenant = self._scoped(tenant_id)
        return await self._store.list_assistant_versions(
            tenant, assistant_id, metadata=metadata, limit=limit, offset=offset
        )

    async def set_latest(self, assistant_id: str, version: int, *, tenant_id: str | None = None) -> AssistantRow:
        """Make `version` the one new runs use (the versions after it stay, for a later set_latest)."""
        async with self._scope.act(Action.POLICY_WRITE, tenant_id, assistant_target(assistant_id)) as tenant_id:
            check_count("the version", version, high=2**31 - 1)
            current = await self.get(assistant_id, tenant_id=tenant_id)
            if current.builtin:
                return await self.get(assistant_id, version=version, tenant_id=tenant_id)
            return await self._store.set_latest_assistant(self._scoped(tenant_id), assistant_id, version)

    async def delete(self, assistant_id: str, *, tenant_id: str | None = None) -> None:
        """Forget the assistant and its versions; its runs keep the id and version they ran."""
        async with self._scope.act(Action.POLICY_WRITE, tenant_id, assistant_target(assistant_id)) as tenant_id:
            current = await self.get(assistant_id, tenant_id=tenant_id)
            if current.builtin:
                raise _read_only(assistant_id)
            await self._store.delete_assistant(self._scoped(tenant_id), assistant_id)

    async def run_settings(self, assistant_id: str, *, tenant_id: str | None = None) -> tuple[AssistantRow, RunConfig]:
        """What a run of the assistant starts with: its current version and that version's settings."""
        current = await self.get(assistant_id, tenant_id=tenant_id)
        settings = RunConfig() if current.builtin else run_config(current.config, current.context)
        return current, settings


__all__ = ["Assistants", "builtin"]
