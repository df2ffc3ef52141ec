"""Reduce an OpenAPI document to its facts, for tests: paths, methods, parameters and schemas (types,
required, enums, formats, bounds), without any prose (descriptions, summaries, titles, examples).

    python tests/data/reduce_openapi.py openapi.json > tests/data/agent_protocol_0.1.6.json

The Agent Protocol's openapi.json (langchain-ai/agent-protocol, version 0.1.6) was reduced this way
to tests/data/agent_protocol_0.1.6.json; tests/test_http_agent_protocol_spec.py drives Waypoint from it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROSE = {"description", "summary", "title", "example", "examples", "externalDocs", "x-codeSamples"}
NAMED = {"properties", "patternProperties", "schemas", "responses", "paths", "content"}  # maps of names


def reduce(node: Any, *, names: bool = False) -> Any:
    """`names`: the keys of this mapping are names (a property called `description`), not keywords."""
    if isinstance(node, list):
        return [reduce(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if not names and key in PROSE:
            continue
        out[key] = reduce(value, names=not names and key in NAMED)
    return out


def reduced(document: dict[str, Any]) -> dict[str, Any]:
    return {
        "openapi": document["openapi"],
        "info": {"title": "agent-protocol (reduced)", "version": document["info"]["version"]},
        "paths": reduce(document["paths"], names=True),
        "components": reduce(document.get("components", {})),
    }


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(json.dumps(reduced(json.load(f)), indent=1, sort_keys=True))
