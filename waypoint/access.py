"""Who may do what: roles, the actions they allow, and who a call acts as.

Three roles, each allowing what the one before it does and more:

    viewer     read everything of its tenant
    operator   plus start, pause, resume, send, approve, deny, cancel, fork, rerun
    admin      plus delete, erase, keys, schedules, limits, policies, deployments

Every surface (the CLI with a key, `/v1`, the Agent Protocol routes, the viewer's forms, MCP) says
who it acts for by entering `acting_as(actor)`; the client checks the actor's role before it acts
(`Scope.act`), so every surface refuses the same things with the same message. Code that enters no
actor is the operator of the installation itself (the Python API, the CLI against its own
database, the worker): `LOCAL`, an admin of every tenant.

Standard library only: the ground floor, imported by the client and by every surface.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from enum import StrEnum


class Role(StrEnum):
    """A key's or a signed-in user's role, least first: each allows what the ones before it do."""

    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Role).index(self)

    def allows(self, action: Action) -> bool:
        return self.rank >= NEEDS[action].rank


class Action(StrEnum):
    """What a caller does; each needs a role (`NEEDS`) and is written to the audit log."""

    # operator
    START = "run.start"
    PAUSE = "run.pause"
    RESUME = "run.resume"
    SEND = "run.send"
    APPROVE = "run.approve"
    DENY = "run.deny"
    CANCEL = "run.cancel"
    FORK = "run.fork"
    RERUN = "run.rerun"
    THREAD_WRITE = "thread.write"  # create, update, copy a thread, its state or a store item
    EVALUATE = "eval.run"
    # admin
    DELETE = "run.delete"
    ERASE = "memory.erase"
    KEY_CREATE = "key.create"
    KEY_REVOKE = "key.revoke"
    SCHEDULE_WRITE = "schedule.write"  # create, update, pause, trigger, delete
    LIMITS_WRITE = "limits.write"
    POLICY_WRITE = "policy.write"  # tool policies, webhooks, assistants' settings
    DEPLOY = "deploy.write"
    COMPACTION_WRITE = "compaction.write"
    AUDIT_READ = "audit.read"  # the audit log is an admin's to read: it names every actor


NEEDS: dict[Action, Role] = {
    **{
        a: Role.OPERATOR
        for a in (
            Action.START,
            Action.PAUSE,
            Action.RESUME,
            Action.SEND,
            Action.APPROVE,
            Action.DENY,
            Action.CANCEL,
            Action.FORK,
            Action.RERUN,
            Action.THREAD_WRITE,
            Action.EVALUATE,
        )
    },
    **{
        a: Role.ADMIN
        for a in (
            Action.DELETE,
            Action.ERASE,
            Action.KEY_CREATE,
            Action.KEY_REVOKE,
            Action.SCHEDULE_WRITE,
            Action.LIMITS_WRITE,
            Action.POLICY_WRITE,
            Action.DEPLOY,
            Action.COMPACTION_WRITE,
            Action.AUDIT_READ,
        )
    },
}


class Surface(StrEnum):
    """Where an action came from, as the audit log records it."""

    PYTHON = "python"
    CLI = "cli"
    HTTP = "http"  # /v1
    PROTOCOL = "protocol"  # the Agent Protocol routes
    VIEWER = "viewer"
    MCP = "mcp"
    SCHEDULE = "schedule"  # a run a schedule started: the schedule's author acted when they made it


@dataclass(frozen=True)
class Actor:
    """Who a call acts as.

    `id` names the actor without a secret: `key:<id>` for an API key, `user:<subject>` for a
    signed-in user, `local` for the installation's own operator. `tenant` is the one tenant the actor
    may act for (None: any, only `LOCAL`). `address`: the client's network address, when a surface
    knows it.
    """

    id: str
    role: Role
    tenant: str | None
    surface: Surface
    address: str | None = None

    def at(self, surface: Surface, address: str | None = None) -> Actor:
        return replace(self, surface=surface, address=address)


class Outcome(StrEnum):
    """How an audited action ended."""

    OK = "ok"
    REFUSED = "refused"  # the actor's role or tenant does not allow it
    FAILED = "failed"  # allowed, then failed (an unknown run, a conflict, ...)


class TargetKind(StrEnum):
    RUN = "run"
    THREAD = "thread"
    SCHEDULE = "schedule"
    KEY = "key"
    SETTING = "setting"  # limits, policies, deployments, compaction, webhooks
    ASSISTANT = "assistant"
    EVAL = "eval"


@dataclass(frozen=True)
class Target:
    """What an action was on: a run, thread, schedule, key or setting, by id (never a secret)."""

    kind: TargetKind
    id: str


@dataclass(frozen=True)
class AuditEntry:
    """One audited action, as `Scope.act` hands it to the audit log."""

    actor: Actor
    action: Action
    tenant: str
    target: Target | None
    outcome: Outcome
    detail: str | None = None  # the refusal's or failure's message (never a secret)


LOCAL = Actor("local", Role.ADMIN, None, Surface.PYTHON)

_ACTOR: ContextVar[Actor] = ContextVar("waypoint_actor", default=LOCAL)


def current_actor() -> Actor:
    """The actor the running call acts as (`LOCAL` where no surface entered one)."""
    return _ACTOR.get()


@contextmanager
def acting_as(actor: Actor) -> Iterator[Actor]:
    """Every client call inside acts as `actor` (checked against its role, written to the audit log)."""
    token = _ACTOR.set(actor)
    try:
        yield actor
    finally:
        _ACTOR.reset(token)


def enter(actor: Actor) -> None:
    """Act as `actor` for the rest of the current task (an HTTP dependency: the request's own task)."""
    _ACTOR.set(actor)


__all__ = [
    "LOCAL",
    "NEEDS",
    "Action",
    "Actor",
    "AuditEntry",
    "Outcome",
    "Target",
    "TargetKind",
    "Role",
    "Surface",
    "acting_as",
    "current_actor",
    "enter",
]
