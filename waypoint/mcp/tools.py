"""An MCP tool as a run records it when it starts, and what its answers mean to the model.

The record (`MCPTool`) is what replay, the model and `run_tool` rely on for the rest of the
run: the name the model sees, the server and the tool's name there, its description and
argument schema, and its settings. It lives in the run's `run_started` event (Postgres), so a
run never asks a server again what its tools are; only `ToolSpec`s (name, timeout, attempts,
approval) go into the plan that travels through Temporal history.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from waypoint.errors import ConfigError, ToolError
from waypoint.mcp.servers import MCPServer
from waypoint.tools import json_arguments
from waypoint.types import ToolSpec

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class MCPTool:
    name: str  # what the model calls it
    server: str  # the MCPServer's name
    remote: str  # its name on the server
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(_EMPTY_SCHEMA))
    requires_approval: bool = False
    timeout_seconds: float = 300.0
    max_attempts: int = 3
    # The server's annotations say readOnlyHint: no side effects, so replay-safe in a rerun.
    read_only: bool = False

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            timeout_seconds=self.timeout_seconds,
            requires_approval=self.requires_approval,
            max_attempts=self.max_attempts,
            replay_safe=self.read_only,
        )

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> MCPTool:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def parse_arguments(self, raw: str) -> dict[str, Any]:
        """The model's JSON arguments, checked against the tool's input schema; a ToolError (a bad
        call the model can repair) says what is wrong."""
        data = json_arguments(self.name, raw)
        problems = schema_problems(self.parameters, data)
        if problems:
            raise ToolError(f"invalid arguments for {self.name}: {'; '.join(problems)}")
        return data


def schema_problems(schema: dict[str, Any], value: Any, *, limit: int = 5) -> list[str]:
    """What is wrong with `value` under the JSON schema (empty when it fits, or when the schema
    itself is broken: that is the server's to fix, and the server validates again anyway)."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    if validator is None:
        return []
    found = []
    for error in validator.iter_errors(value):
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        found.append(f"{where}: {error.message}")
        if len(found) >= limit:
            break
    return found


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """A checked validator per schema (checking a schema costs about a millisecond: once, not per call)."""
    import jsonschema  # a dependency of the mcp SDK; imported here to keep agent modules light

    schema = json.loads(schema_json)
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return validator_class(schema)


def tools_of(server: MCPServer, listed: Iterable[Mapping[str, Any]]) -> list[MCPTool]:
    """The server's tools (its `tools/list` entries, wire names) as this run will use them."""
    found = []
    for entry in listed:
        remote = str(entry["name"])
        if not server.keeps(remote):
            continue
        found.append(
            MCPTool(
                name=server.exposed_name(remote),
                server=server.name,
                remote=remote,
                description=str(entry.get("description") or entry.get("title") or remote),
                parameters=dict(entry.get("inputSchema") or _EMPTY_SCHEMA),
                requires_approval=server.approval(remote),
                timeout_seconds=server.timeout_of(remote),
                max_attempts=server.max_attempts,
                read_only=(entry.get("annotations") or {}).get("readOnlyHint") is True,
            )
        )
    return found


def check_names(agent: str, own: Sequence[str], found: Sequence[MCPTool]) -> None:
    """Two tools the model would know by one name: a ConfigError naming both and the fix."""
    owners: dict[str, str] = {name: "its own tools" for name in own}
    for tool in found:
        where = f"MCP server {tool.server!r} (tool {tool.remote!r})"
        if tool.name in owners:
            raise ConfigError(
                f"agent {agent!r}: the tool name {tool.name!r} is in {owners[tool.name]} and in {where}: "
                f"give the server a namespace, MCPServer.stdio(..., namespace='{tool.server}') or "
                "MCPServer.http(..., namespace=...), or keep fewer of its tools with tools=[...]"
            )
        owners[tool.name] = where


def result_text(result: Mapping[str, Any]) -> tuple[str, bool]:
    """A `CallToolResult` (wire names) as the text the model reads, and whether it is an error."""
    parts = [_block_text(block) for block in result.get("content") or []]
    text = "\n".join(p for p in parts if p)
    structured = result.get("structuredContent")
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    return text, bool(result.get("isError"))


def _block_text(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        size = len(str(block.get("data", ""))) * 3 // 4
        return f"[{kind} {block.get('mimeType', '')}, {size} bytes]"
    if kind == "resource_link":
        return f"[resource {block.get('uri', '')}: {block.get('name', '')}]"
    if kind == "resource":
        resource = block.get("resource") or {}
        if "text" in resource:
            return str(resource["text"])
        return f"[resource {resource.get('uri', '')}, {resource.get('mimeType', 'binary')}]"
    return json.dumps(block, ensure_ascii=False)
