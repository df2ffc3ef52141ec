"""How an agent reaches an MCP server: a plain, frozen configuration (no SDK import here, so
defining agents stays cheap).

    Agent(..., mcp=[
        MCPServer.stdio("python", ["-m", "my_tools"], env={"API_KEY": key}, namespace="files"),
        MCPServer.http("https://tools.example.com/mcp", headers={"Authorization": f"Bearer {token}"},
                       requires_approval=["delete_file"]),
    ])

The command, arguments, environment, URL and headers stay in the worker process: a run records
the server's name and the tools it listed, never these (they may hold credentials).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Literal, TypedDict
from urllib.parse import urlsplit

from waypoint.errors import ConfigError

Transport = Literal["stdio", "http"]

# A run's start waits for its servers to list their tools; waypoint.retry.START_TIMEOUT leaves room.
MAX_CONNECT_SECONDS = 100.0

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


@dataclass(frozen=True)
class MCPServer:
    """One MCP server an agent's runs use. Build one with `MCPServer.stdio(...)` or `MCPServer.http(...)`.

    `name` identifies the server in the run's record, spans and errors (default: the command's or the
    host's name). `namespace` prefixes its tools (`{namespace}_{tool}`); without one, a tool whose
    name clashes with another tool of the agent fails the run's start. `tools` keeps only the listed
    tools. `requires_approval`: True (every tool) or the names of the tools that wait for a human.
    `timeout` bounds one attempt of a call (per-tool overrides in `timeouts`), `max_attempts` the
    attempts of a call that got no answer; `connect_timeout` bounds starting the server and listing
    its tools."""

    transport: Transport
    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    namespace: str | None = None
    tools: frozenset[str] | None = None
    requires_approval: bool | frozenset[str] = False
    timeout: float = 300.0
    timeouts: tuple[tuple[str, float], ...] = ()
    max_attempts: int = 3
    connect_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(f"MCP server name {self.name!r}: use letters, digits, _ and - (at most 40)")
        if self.namespace is not None and not _NAME.match(self.namespace):
            raise ConfigError(f"MCP namespace {self.namespace!r}: use letters, digits, _ and - (at most 40)")
        if self.timeout <= 0 or self.connect_timeout <= 0 or any(t <= 0 for _, t in self.timeouts):
            raise ConfigError(f"MCP server {self.name!r}: timeouts must be positive")
        if self.connect_timeout > MAX_CONNECT_SECONDS:
            raise ConfigError(
                f"MCP server {self.name!r}: connect_timeout is at most {MAX_CONNECT_SECONDS:g} s (a run's start "
                "waits for it); start a slow server yourself and connect over HTTP instead"
            )
        if self.max_attempts < 1:
            raise ConfigError(f"MCP server {self.name!r}: max_attempts must be at least 1")

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        cwd: str | None = None,
        namespace: str | None = None,
        tools: Collection[str] | None = None,
        requires_approval: bool | Collection[str] = False,
        timeout: float = 300.0,
        timeouts: Mapping[str, float] | None = None,
        max_attempts: int = 3,
        connect_timeout: float = 30.0,
    ) -> MCPServer:
        """A server the worker runs as a child process and talks to over its stdin and stdout. The
        child gets a minimal environment (PATH, HOME, ...) plus `env`: pass the variables it needs."""
        if not command:
            raise ConfigError("MCPServer.stdio needs a command, e.g. MCPServer.stdio('python', ['-m', 'my_server'])")
        default = re.sub(r"[^A-Za-z0-9_-]", "_", PurePath(command).name)[:40] or "stdio"
        return cls(
            "stdio",
            name or default,
            command=command,
            args=tuple(args),
            env=tuple(sorted((env or {}).items())),
            cwd=cwd,
            **_common(namespace, tools, requires_approval, timeout, timeouts, max_attempts, connect_timeout),
        )

    @classmethod
    def http(
        cls,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        tools: Collection[str] | None = None,
        requires_approval: bool | Collection[str] = False,
        timeout: float = 300.0,
        timeouts: Mapping[str, float] | None = None,
        max_attempts: int = 3,
        connect_timeout: float = 30.0,
    ) -> MCPServer:
        """A server reached over streamable HTTP at `url` (any worker can call it)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"MCPServer.http needs an http(s) URL, e.g. http://localhost:8000/mcp; got {url!r}")
        default = re.sub(r"[^A-Za-z0-9_-]", "_", parts.hostname)[:40]
        return cls(
            "http",
            name or default,
            url=url,
            headers=tuple(sorted((headers or {}).items())),
            **_common(namespace, tools, requires_approval, timeout, timeouts, max_attempts, connect_timeout),
        )

    @property
    def where(self) -> str:
        """The command line or the URL (without credentials or query), for error messages."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        parts = urlsplit(self.url or "")
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    def exposed_name(self, tool: str) -> str:
        """The name the model sees for the server's tool `tool`: prefixed by the namespace, and
        limited to what chat-completions APIs accept (letters, digits, _ and -, at most 64)."""
        base = f"{self.namespace}_{tool}" if self.namespace else tool
        return re.sub(r"[^A-Za-z0-9_-]", "_", base)[:64]

    def approval(self, tool: str) -> bool:
        if isinstance(self.requires_approval, bool):
            return self.requires_approval
        return tool in self.requires_approval

    def timeout_of(self, tool: str) -> float:
        return dict(self.timeouts).get(tool, self.timeout)

    def keeps(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools


class _Options(TypedDict):
    namespace: str | None
    tools: frozenset[str] | None
    requires_approval: bool | frozenset[str]
    timeout: float
    timeouts: tuple[tuple[str, float], ...]
    max_attempts: int
    connect_timeout: float


def _common(
    namespace: str | None,
    tools: Collection[str] | None,
    requires_approval: bool | Collection[str],
    timeout: float,
    timeouts: Mapping[str, float] | None,
    max_attempts: int,
    connect_timeout: float,
) -> _Options:
    return {
        "namespace": namespace,
        "tools": frozenset(tools) if tools is not None else None,
        "requires_approval": requires_approval if isinstance(requires_approval, bool) else frozenset(requires_approval),
        "timeout": timeout,
        "timeouts": tuple(sorted((timeouts or {}).items())),
        "max_attempts": max_attempts,
        "connect_timeout": connect_timeout,
    }
