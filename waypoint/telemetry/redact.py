"""Redaction of anything that looks like a secret, before text goes into a span.

Prompt and completion capture (`WAYPOINT_TRACE_CONTENT=true`) sends user text to
a trace backend that more people can read than the database; a key pasted into
a task must not travel with it.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "[REDACTED]"

_SECRET_KEY = re.compile(r"(pass(word|wd)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key)", re.I)
_PATTERNS = [
    re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{6,}", re.I),
    # key=value / "key": "value" pairs whose key names a secret: keep the key, mask the value.
    re.compile(
        r"""(?P<key>["']?[\w-]*(?:pass(?:word|wd)?|secret|token|api[_-]?key|authorization|credential)[\w-]*["']?"""
        r"""\s*[:=]\s*)(?P<value>"[^"]*"|'[^']*'|[^\s,;}&]+)""",
        re.I,
    ),
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"),  # OpenAI-style keys (sk-..., sk-proj-...)
    re.compile(r"\b(?:gh[pousr]_|github_pat_|xox[abpr]-|AKIA|ASIA|AIza)[A-Za-z0-9_-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),  # JWT
    re.compile(r"\b[0-9a-fA-F]{32,}\b"),  # long hex secrets
    re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{40,}={0,2}"),  # long base64 secrets
]


def redact_text(text: str) -> str:
    for pattern in _PATTERNS:
        if "key" in pattern.groupindex:
            text = pattern.sub(lambda m: m.group("key") + MASK, text)
        else:
            text = pattern.sub(MASK, text)
    return text


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with secrets masked: values of secret-named keys, and secret-looking text."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _SECRET_KEY.search(k) else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value
