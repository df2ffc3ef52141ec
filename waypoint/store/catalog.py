"""The `agents` catalog: which agents the workers serve, with their tools and models.

Workers register what they loaded when they start; the client checks a run against it before
starting anything (an unknown agent or a model its worker cannot call is refused at once, with
no run id given out), and the HTTP API lists it.
"""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert

from waypoint.errors import UnknownAgent
from waypoint.store.base import StoreBase
from waypoint.store.schema import agents
from waypoint.types import AgentInfo


class Catalog(StoreBase):
    async def register_agents(self, task_queue: str, found: list[AgentInfo]) -> None:
        """Upsert the agents a worker of `task_queue` loaded (the newest registration of a name wins)."""
        if not found:
            return
        rows = [{**{k: v for k, v in asdict(a).items() if k != "updated_at"}, "task_queue": task_queue} for a in found]
        stmt = insert(agents).values(rows)
        columns = ("description", "model", "providers", "tools", "settings", "worker", "fingerprint")
        stmt = stmt.on_conflict_do_update(
            index_elements=["task_queue", "name"],
            set_={**{c: stmt.excluded[c] for c in columns}, "updated_at": func.now()},
        )
        async with self.engine.begin() as conn:
            await conn.execute(stmt)

    async def agents(self, task_queue: str) -> list[AgentInfo]:
        """The agents the workers of `task_queue` serve."""
        query = select(agents).where(agents.c.task_queue == task_queue).order_by(agents.c.name)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [AgentInfo.of(r) for r in rows]

    async def agent(self, task_queue: str, name: str) -> AgentInfo:
        here = agents.c.task_queue == task_queue
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(agents).where(here, agents.c.name == name))).mappings().first()
            if row is not None:
                return AgentInfo.of(row)
            known = list(await conn.scalars(select(agents.c.name).where(here).order_by(agents.c.name)))
        if not known:
            raise UnknownAgent(
                f"unknown agent {name!r}: no worker of task queue {task_queue!r} has registered its agents yet; "
                "start one with `waypoint dev` or `waypoint worker` (its WAYPOINT_AGENTS names the agent modules)"
            )
        raise UnknownAgent(
            f"unknown agent {name!r} (known: {', '.join(known)}); add its module to WAYPOINT_AGENTS of the worker"
        )
